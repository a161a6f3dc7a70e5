"""The validation engine: run a model over a dataset split and score it with the COCO protocol.

test.py is its command line; train.py calls run() every epoch with its live model and dataloader. The
numbers are the COCO protocol's (AP at IoU 0.50:0.95, 0.50, ...), computed in memory; P and R are YOLOv5's,
at the confidence of maximal mean F1.
"""

import contextlib
import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from models import load_model
from utils.augment import check_img_size
from utils.boxes import non_max_suppression, scale_boxes, xywh2xyxy, xyxy2xywh
from utils.datasets import create_dataloader, list_image_files, load_data_config
from utils.downloads import attempt_download_weights
from utils.errors import YoloError
from utils.files import increment_path
from utils.log import LOGGER, one_line
from utils.metrics import (
    COCO80_NAMES,
    COCO80_TO_91,
    CocoEvaluator,
    CocoGroundTruth,
    DetectionMetrics,
    MetricsError,
    evaluate_coco_json,
    format_coco_stats,
    load_coco_ground_truth,
    pycocotools_stats,
)
from utils.plots import save_batch_plot
from utils.torch_utils import prepare_for_inference, select_device, time_sync

TASKS = ("train", "val", "test", "speed")


class TestError(YoloError):
    """A validation request that cannot be carried out; the message is one line."""


# ---------------------------------------------------------------------------------------------------------------------
# Ground truth sources


def image_ids_for(files: list[str]) -> list[int]:
    """COCO image ids: the numeric file stems when all are numeric and distinct, else positions in the list."""
    stems = [Path(f).stem for f in files]
    if all(s.isdigit() for s in stems) and len({int(s) for s in stems}) == len(stems):
        return [int(s) for s in stems]
    return list(range(len(files)))


def json_image_ids(files: list[str], gt: CocoGroundTruth) -> list[int]:
    """COCO image ids of files from the annotations: by the images' file_name (basename), then by numeric stem.

    Raises TestError naming the first image that matches nothing, matches ambiguously, or shares an id."""
    by_name: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for image_id, file_name in gt.file_names.items():
        parts = Path(file_name.replace("\\", "/")).parts
        by_name.setdefault(parts[-1], []).append((parts, image_id))
    known = set(gt.image_ids.tolist())
    ids, owner = [], {}
    for f in files:
        image_id = _match_file(Path(f), by_name, known, gt.path)
        if image_id in owner:
            raise TestError(f"{gt.path}: {f} and {owner[image_id]} both match image id {image_id}")
        owner[image_id] = f
        ids.append(image_id)
    return ids


def _match_file(file: Path, by_name: dict, known: set[int], ann_json: Path) -> int:
    """One image's id: a unique file_name basename (a longer path suffix settles ties), else its numeric stem."""
    candidates = by_name.get(file.name, [])
    if len(candidates) > 1:  # the same basename in several folders: the file_name whose path ends like ours
        candidates = [(p, i) for p, i in candidates if file.parts[-len(p) :] == p]
        if len(candidates) != 1:
            raise TestError(f"{ann_json}: several images are named {file.name}; cannot tell which one {file} is")
    if candidates:
        return candidates[0][1]
    if file.stem.isdigit() and int(file.stem) in known:
        return int(file.stem)
    raise TestError(
        f"{ann_json} has no image for {file} (no file_name {file.name!r}, no image id "
        f"{int(file.stem) if file.stem.isdigit() else 'from its name'})"
    )


def coco_category_ids(names: list[str]) -> list[int] | None:
    """The official COCO category ids when names are COCO's 80 classes, else None."""
    return list(COCO80_TO_91) if list(names) == list(COCO80_NAMES) else None


def _json_ground_truth(
    ann_json: str, names: list[str], files: list[str]
) -> tuple[CocoGroundTruth, np.ndarray, list[int]]:
    """The COCO annotations file as ground truth: (its arrays, category id -> class index table, image ids of files).

    Raises MetricsError or TestError when the file cannot be read or does not describe these images and classes."""
    gt = load_coco_ground_truth(ann_json)
    image_ids = json_image_ids(files, gt)
    coco_ids = coco_category_ids(names)
    if not gt.category_ids:
        raise TestError(f"{ann_json} has no categories")
    if coco_ids is not None and set(gt.category_ids) <= set(coco_ids):
        table = coco_ids
    elif len(gt.category_ids) == len(names):
        table = gt.category_ids  # the i-th category by id is class i
        if gt.names != list(names):
            LOGGER.warning(
                f"WARNING: {ann_json} category names differ from the data YAML's; class i is taken to be "
                f"the i-th category by id"
            )
    else:
        raise TestError(f"{ann_json} has {len(gt.category_ids)} categories but the data has {len(names)} classes")
    class_of = np.full(max(max(table), max(gt.category_ids)) + 1, -1, np.int64)
    class_of[table] = np.arange(len(table))
    return gt, class_of, image_ids


# ---------------------------------------------------------------------------------------------------------------------
# Validation


def _predictions_to_targets(output: list[torch.Tensor]) -> torch.Tensor:
    """NMS output of a batch as plot_images' prediction rows [batch_idx, cls, cx, cy, w, h, conf] (pixels)."""
    rows = []
    for i, det in enumerate(output):
        det = det.float().cpu()
        rows.append(torch.cat((torch.full((len(det), 1), i), det[:, 5:6], xyxy2xywh(det[:, :4]), det[:, 4:5]), 1))
    return torch.cat(rows, 0) if rows else torch.zeros((0, 7))


def _print_table(m: DetectionMetrics, seen: int, verbose: bool, training: bool) -> None:
    """YOLOv5's table: all classes, then one row per class with ground truth when asked."""
    LOGGER.info(("%22s" + "%11s" * 6) % ("Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95"))
    row = "%22s" + "%11i" * 2 + "%11.3g" * 4
    LOGGER.info(row % ("all", seen, m.instances.sum(), m.mp, m.mr, m.map50, m.map))
    if m.instances.sum() == 0:
        LOGGER.warning("WARNING: no labels found in the validation set, metrics are undefined")
    nc = len(m.names)
    if nc > 1 and (verbose or (nc < 50 and not training)):
        for c in np.flatnonzero(m.present):
            LOGGER.info(
                row % (m.names[c], m.class_images[c], m.instances[c], m.precision[c], m.recall[c], m.ap50[c], m.ap[c])
            )


def _save_json_and_check(
    evaluator: CocoEvaluator, save_dir: Path, ann_json: str | None, metrics: DetectionMetrics
) -> np.ndarray | None:
    """Write predictions.json, score it with pycocotools against ann_json (or a ground-truth JSON written from
    the labels) and compare with our numbers; returns pycocotools' 12 numbers, or None when it could not run."""
    pred_file = save_dir / "predictions.json"
    predictions = evaluator.predictions()
    pred_file.write_text(json.dumps(predictions))
    LOGGER.info(f"Saving {pred_file} ({len(predictions)} detections)...")
    if ann_json is None:
        ann_json = str(save_dir / "ground_truth.json")
        Path(ann_json).write_text(json.dumps(evaluator.ground_truth()))
        LOGGER.info(f"Saving {ann_json} (COCO ground truth from the labels)...")
    try:
        stats = pycocotools_stats(ann_json, pred_file, image_ids=evaluator.image_ids)
    except ImportError:
        LOGGER.warning("WARNING: pycocotools is not installed, predictions.json not cross-checked")
        return None
    except MetricsError as e:
        LOGGER.warning(f"WARNING: pycocotools check skipped: {e}")
        return None
    LOGGER.info(f"pycocotools on {pred_file.name} against {Path(ann_json).name}:\n{format_coco_stats(stats)}")
    diff = float(np.abs(stats - metrics.stats).max())
    if diff > 1e-6:
        LOGGER.warning(f"WARNING: pycocotools differs from the in-memory evaluation by up to {diff:.2e}")
    else:
        LOGGER.info(f"pycocotools agrees with the in-memory evaluation (largest difference {diff:.1e})")
    return stats


def write_results_json(
    path: Path, metrics: DetectionMetrics, speed_ms: tuple[float, float, float], pycocotools: np.ndarray | None = None
) -> None:
    """results.json: the summary metrics, the per-class table, speed, image/instance counts, pycocotools' stats."""
    out = {
        "metrics": metrics.summary_dict(),
        "per_class": metrics.per_class_dict(),
        "speed_ms": dict(zip(("preprocess", "inference", "nms"), (float(t) for t in speed_ms))),
        "images": metrics.images,
        "instances": int(metrics.instances.sum()),
    }
    if pycocotools is not None:
        out["pycocotools"] = {"stats": [float(x) for x in pycocotools]}
    path.write_text(json.dumps(out, indent=2))


def _standalone_model(weights, device: str, half: bool | None, bf16: bool):
    """Load the weights for standalone validation; returns (model, device, half, autocast context, channels_last)."""
    if weights is None:
        raise TestError("give the model to validate with --weights")
    if isinstance(weights, (list, tuple)):
        if len(weights) != 1:
            raise TestError(f"give one --weights file ({len(weights)} given; ensembles are not supported)")
        weights = weights[0]
    device = select_device(device)
    model = load_model(attempt_download_weights(weights), device)
    model, half, autocast, channels_last = prepare_for_inference(model, device, half, bf16)
    return model, device, half, autocast, channels_last


def _callers_model(model, half: bool | None):
    """train.py's model as it is (device, precision); an FP16 request on CUDA becomes autocast, not a conversion.

    Returns (device, half inputs, autocast context)."""
    device = next(model.parameters()).device
    model_half = next(model.parameters()).dtype == torch.float16
    amp = bool(half) and device.type == "cuda" and not model_half
    return device, model_half, torch.autocast("cuda", dtype=torch.float16) if amp else contextlib.nullcontext()


def _count_images(data: dict, split: str) -> int:
    """Images in a split (checked before any weights are loaded, so a wrong split fails at once)."""
    if not data.get(split):
        raise TestError(f"{data.get('yaml_file', 'the data YAML')} has no '{split}' split")
    return len(list_image_files(data[split], prefix=f"{split}: "))


def _validation_loader(
    data: dict, split: str, task: str, imgsz: int, batch_size: int, stride: int, single_cls: bool, workers: int, nc: int
):
    """YOLOv5's validation loader: rectangular batches padded by half a stride (square for --task speed).

    create_dataloader clips the batch to the images that remain once corrupt ones are dropped."""
    pad, rect = (0.0, False) if task == "speed" else (0.5, True)
    return create_dataloader(
        data[split],
        imgsz,
        batch_size,
        stride,
        single_cls,
        pad=pad,
        rect=rect,
        workers=workers,
        prefix=f"{split}: ",
        nc=nc,
    )[0]


_FALLBACK_WARNED: set[str] = set()  # data YAML ann_json files already reported unusable during training


def _ground_truth_json(ann_json: str | None, data: dict, names: list[str], files: list[str], use: bool, training: bool):
    """The COCO JSON to score against, if any: (its path, (ground truth, class table), image ids of files).

    Without a JSON the ids come from the file names and the YOLO labels are the ground truth: (None, None, ids).
    A JSON that does not describe these images (one the file names cannot be matched to, an unreadable one) is an
    error, whether given with --ann-json or by the data YAML's ann_json; only during training does the data YAML's
    fall back to the labels, with one warning, so a training run is not lost at its first validation.
    """
    if not use and ann_json:
        LOGGER.warning(
            f"WARNING: --ann-json {ann_json} is not used with --single-cls or --task speed: scoring "
            f"against the YOLO labels"
        )
    path = (ann_json or data.get("ann_json")) if use else None
    if not path:
        return None, None, image_ids_for(files)
    try:
        gt, class_of, ids = _json_ground_truth(path, names, files)
    except (TestError, MetricsError) as e:
        if ann_json or not training:
            source = "" if ann_json else " (the data YAML's ann_json; remove it to score against the YOLO labels)"
            raise TestError(f"{one_line(e)}{source}") from None
        if path not in _FALLBACK_WARNED:
            _FALLBACK_WARNED.add(path)
            LOGGER.warning(f"WARNING: {one_line(e)}: scoring against the YOLO labels instead")
        return None, None, image_ids_for(files)
    return path, (gt, class_of), ids


def _label_files(files: list[str], folder: Path) -> dict[str, Path]:
    """--save-txt's file for each image: labels/<stem>.txt, with _2, _3, ... for stems already taken."""
    out, taken = {}, set()
    for f in files:
        stem, n = Path(f).stem, 1
        name = stem
        while name.lower() in taken:  # lower case: a case-insensitive file system would merge X.txt and x.txt
            n += 1
            name = f"{stem}_{n}"
        taken.add(name.lower())
        out[f] = folder / f"{name}.txt"
    renamed = [f for f in files if out[f].stem != Path(f).stem]
    if renamed:
        LOGGER.warning(
            f"WARNING: {len(renamed)} image(s) share a file stem with another, e.g. {renamed[0]}: their "
            f"--save-txt labels are {out[renamed[0]].name} and so on"
        )
    return out


def _make_folder(folder: Path) -> None:
    """Create the results folder, or TestError saying why it cannot be (e.g. --project names a file)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TestError(f"cannot create the results folder {folder}: {e.strerror or e}") from None


@torch.no_grad()
def run(
    data,
    weights=None,
    batch_size: int = 32,
    imgsz: int = 640,
    conf_thres: float = 0.001,
    iou_thres: float = 0.6,
    max_det: int = 300,
    task: str = "val",
    device: str = "",
    workers: int = 8,
    single_cls: bool = False,
    verbose: bool = False,
    save_txt: bool = False,
    save_conf: bool = False,
    save_json: bool = False,
    project: str | Path = "runs/test",
    name: str = "exp",
    exist_ok: bool = False,
    half: bool | None = None,
    bf16: bool = False,
    model=None,
    dataloader=None,
    save_dir: str | Path | None = None,
    plots: bool = True,
    compute_loss=None,
    ann_json: str | None = None,
):
    """Validate a model on a split of data (a data YAML path or load_data_config's dict).

    Standalone (model=None) it loads weights; train.py passes its model, dataloader and compute_loss (the model
    is left on its device, in its precision and mode). Returns ((P, R, mAP50, mAP50-95, box_loss, obj_loss,
    cls_loss), per-class mAP50-95 (nc,), (pre-process, inference, NMS) ms per image). Raises DatasetError,
    CheckpointError, DownloadError, DeviceError, MetricsError or TestError, each one line, on bad input.
    """
    if task not in TASKS:
        raise TestError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    if task == "speed":  # YOLOv5's speed benchmark: the val split, square images, usual detection thresholds
        conf_thres, iou_thres, save_json, plots, save_txt = 0.25, 0.45, False, False, False
    data = data if isinstance(data, dict) else load_data_config(data)
    split = "val" if task == "speed" else task
    nc = 1 if single_cls else int(data["nc"])
    names = (["item"] if len(data["names"]) != 1 else list(data["names"])) if single_cls else list(data["names"])
    training = model is not None
    if dataloader is None:
        _count_images(data, split)  # a missing or empty split fails before any weights are loaded
    if training:
        device, half, autocast = _callers_model(model, half)
        channels_last = False  # the caller's model keeps its layout
    else:
        model, device, half, autocast, channels_last = _standalone_model(weights, device, half, bf16)
        if not single_cls and len(model.names) != nc:
            raise TestError(
                f"the weights predict {len(model.names)} classes but {data.get('yaml_file', 'the data')} "
                f"has {nc}: pass the data YAML the model was trained on"
            )
    stride = max(int(model.stride.max()), 32)
    save_dir = Path(save_dir) if save_dir else increment_path(Path(project) / name, exist_ok=exist_ok)
    if dataloader is None:
        imgsz = check_img_size(imgsz, stride)
        dataloader = _validation_loader(data, split, task, imgsz, batch_size, stride, single_cls, workers, nc)
    files = list(dataloader.dataset.im_files)

    # Ground truth: the official COCO JSON when there is one (crowd regions and areas as the protocol wants
    # them), else the YOLO labels scaled back to original-image pixels.
    ann_json, json_gt, ids = _ground_truth_json(
        ann_json, data, names, files, use=not single_cls and task != "speed", training=training
    )
    id_of = dict(zip(files, ids))
    txt_of = _label_files(files, save_dir / "labels") if save_txt else {}
    _make_folder(save_dir / "labels" if save_txt else save_dir)
    category_ids = None if single_cls else coco_category_ids(names)
    if json_gt is not None and category_ids is None:
        category_ids = json_gt[0].category_ids
    evaluator = CocoEvaluator(names, category_ids)

    was_training = model.training
    model.eval()
    try:
        if not training:  # one untimed image pays the one-off costs (allocations, kernel selection, grids)
            warm = torch.zeros((1, 3, imgsz, imgsz), device=device, dtype=torch.float16 if half else torch.float32)
            with autocast:
                model(warm.contiguous(memory_format=torch.channels_last) if channels_last else warm)
        seen, totals, image_hw = 0, [0.0, 0.0, 0.0], {}
        loss = torch.zeros(3, device=device)
        header = ("%22s" + "%11s" * 6) % ("Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95")
        bar = tqdm(dataloader, desc=header, bar_format="{l_bar}{bar:10}{r_bar}", disable=training and not verbose)
        for batch_i, (im, targets, paths, shapes) in enumerate(bar):
            t0 = time_sync(device)
            im = im.to(device, non_blocking=True)
            im = (im.half() if half else im.float()) / 255
            if channels_last:
                im = im.contiguous(memory_format=torch.channels_last)
            targets = targets.to(device)
            t1 = time_sync(device)
            with autocast:
                preds, train_out = model(im)
            t2 = time_sync(device)
            if compute_loss is not None:
                loss += compute_loss([x.float() for x in train_out], targets)[1]
            output = non_max_suppression(
                preds.float(), conf_thres, iou_thres, multi_label=True, agnostic=single_cls, max_det=max_det
            )
            t3 = time_sync(device)
            for k, dt in enumerate((t1 - t0, t2 - t1, t3 - t2)):
                totals[k] += dt
            for si, det in enumerate(output):
                seen += 1
                if single_cls:
                    det[:, 5] = 0
                _add_image(
                    evaluator,
                    id_of[paths[si]],
                    det,
                    targets[targets[:, 0] == si, 1:],
                    im.shape[2:],
                    shapes[si],
                    json_gt,
                )
                image_hw[paths[si]] = tuple(int(x) for x in shapes[si][0])
                if save_txt:
                    _save_txt(det, im.shape[2:], shapes[si], save_conf, txt_of[paths[si]])
            if plots and batch_i < 3:
                save_batch_plot(im, targets, paths, save_dir / f"val_batch{batch_i}_labels.jpg", names)
                save_batch_plot(
                    im, _predictions_to_targets(output), paths, save_dir / f"val_batch{batch_i}_pred.jpg", names
                )
    finally:
        model.train(was_training)

    if json_gt is not None:
        _check_json_sizes(ann_json, json_gt[0], image_hw, id_of)
    metrics = evaluator.evaluate(confusion=plots)
    _print_table(metrics, seen, verbose, training)
    speed = tuple(t / max(seen, 1) * 1e3 for t in totals)
    if not training or verbose:
        pre, inference, nms = speed
        LOGGER.info(
            f"Speed: {pre:.1f}ms pre-process, {inference:.1f}ms inference, {nms:.1f}ms NMS per image at "
            f"shape ({dataloader.batch_size}, 3, {imgsz}, {imgsz})"
        )
    if not training or verbose:
        LOGGER.info(f"COCO protocol (faster-coco-eval):\n{format_coco_stats(metrics.stats)}")
    coco_stats = _save_json_and_check(evaluator, save_dir, ann_json, metrics) if save_json else None
    if plots:
        try:
            from utils.charts import plot_evaluation

            plot_evaluation(metrics, save_dir)
        except Exception as e:  # a plot must never stop validation
            LOGGER.warning(f"WARNING: could not plot the evaluation charts: {e}")
    if not training or save_json:
        write_results_json(save_dir / "results.json", metrics, speed, coco_stats)
    if not training:
        n_txt = len(list((save_dir / "labels").glob("*.txt"))) if save_txt else 0
        LOGGER.info(
            f"Results saved to {save_dir}" + (f", {n_txt} label files in {save_dir / 'labels'}" if save_txt else "")
        )
    losses = (loss.cpu() / max(len(dataloader), 1)).tolist()
    return (metrics.mp, metrics.mr, metrics.map50, metrics.map, *losses), metrics.maps, speed


def _check_json_sizes(
    ann_json: str, gt: CocoGroundTruth, image_hw: dict[str, tuple[int, int]], id_of: dict[str, int]
) -> None:
    """Warn when the JSON's height/width differ from the images': its boxes then describe other (resized) images."""
    differ = [f for f, hw in image_hw.items() if gt.sizes.get(id_of[f], hw) != hw]
    if differ:
        f = differ[0]
        (h, w), (jh, jw) = image_hw[f], gt.sizes[id_of[f]]
        LOGGER.warning(
            f"WARNING: {len(differ)} image(s) differ in size from {ann_json}, e.g. {f} is {w}x{h} but "
            f"{jw}x{jh} there: its boxes may be for other (e.g. resized) images, and the mAP meaningless"
        )


def _add_image(
    evaluator: CocoEvaluator,
    image_id: int,
    det: torch.Tensor,
    labels: torch.Tensor,
    input_hw: tuple[int, int],
    shapes: tuple,
    json_gt,
) -> None:
    """One image's detections and ground truth, both in original-image pixels, into the evaluator.

    labels: (n, 5) [cls, cx, cy, w, h] normalised to the network input; shapes: the dataset's ((h0, w0),
    ratio_pad) for scale_boxes; json_gt: (CocoGroundTruth, category id -> class table) to use instead of labels.
    """
    (h0, w0), ratio_pad = shapes
    det = det.detach().cpu().double()
    boxes = scale_boxes(input_hw, det[:, :4].clone(), (h0, w0), ratio_pad)
    classes = det[:, 5]
    if json_gt is not None:
        gt, class_of = json_gt
        gt_boxes, categories, areas, crowd = gt.image(image_id)
        evaluator.add(
            image_id,
            gt_boxes,
            class_of[categories],
            boxes,
            det[:, 4],
            classes,
            gt_areas=areas,
            gt_crowd=crowd,
            shape=(h0, w0),
        )
        return
    height, width = input_hw
    labels = labels.detach().cpu().double()
    gt_boxes = xywh2xyxy(labels[:, 1:5]) * torch.tensor([width, height, width, height], dtype=torch.float64)
    gt_boxes = scale_boxes(input_hw, gt_boxes, (h0, w0), ratio_pad)
    evaluator.add(image_id, gt_boxes, labels[:, 0], boxes, det[:, 4], classes, shape=(h0, w0))


def _save_txt(det: torch.Tensor, input_hw: tuple[int, int], shapes: tuple, save_conf: bool, file: Path) -> None:
    """YOLO-format prediction labels: class cx cy w h [conf], normalised to the original image."""
    (h0, w0), ratio_pad = shapes
    det = det.detach().cpu().double()
    boxes = scale_boxes(input_hw, det[:, :4].clone(), (h0, w0), ratio_pad)
    xywh = xyxy2xywh(boxes) / torch.tensor([w0, h0, w0, h0], dtype=torch.float64)
    lines = []
    for (cx, cy, w, h), conf, cls in zip(xywh.tolist(), det[:, 4].tolist(), det[:, 5].tolist()):
        lines.append(f"{int(cls)} {cx:.6g} {cy:.6g} {w:.6g} {h:.6g}" + (f" {conf:.6g}" if save_conf else ""))
    file.write_text("".join(f"{x}\n" for x in lines))


def score_files(
    ann_json: str | Path,
    pred_json: str | Path,
    project: str | Path = "runs/test",
    name: str = "exp",
    exist_ok: bool = False,
) -> DetectionMetrics:
    """Score an existing COCO results file against a COCO annotations file; print the 12 numbers, save results.json."""
    metrics = evaluate_coco_json(ann_json, pred_json)
    LOGGER.info(
        f"{Path(pred_json).name} against {Path(ann_json).name} ({metrics.images} images, "
        f"{int(metrics.instances.sum())} instances):\n{format_coco_stats(metrics.stats)}"
    )
    save_dir = increment_path(Path(project) / name, exist_ok=exist_ok)
    _make_folder(save_dir)
    write_results_json(save_dir / "results.json", metrics, (0.0, 0.0, 0.0))
    LOGGER.info(f"Results saved to {save_dir}")
    return metrics
