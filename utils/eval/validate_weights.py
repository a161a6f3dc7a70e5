"""test.py's side of validation: load the weights, apply the precision policy, build the loader, then evaluate().

run() is the standalone entry (test.py's flags as keyword arguments); score_files() scores an existing COCO
results file. Both write results.json into a run folder reserved by utils.files.reserve_run_dir (runs/test/exp,
exp2, ...; --exist-ok reuses only a folder a run made), never into one that holds the dataset's images or labels.
"""

import contextlib
import math
from dataclasses import replace
from pathlib import Path

import torch

from models.api.ensemble import load_models
from models.api.tta import TTAModel
from models.export.backends import load_exported
from models.export.formats import is_backend_path
from utils.data.augment import check_img_size
from utils.data.config import load_data_config
from utils.data.loader import create_dataloader
from utils.data.verify import list_image_files
from utils.errors import MetricsError, TestError
from utils.eval.coco_json import JsonGroundTruth, load_json_ground_truth
from utils.eval.options import TASKS, TestCommand
from utils.eval.scoring import reserve_results_dir, write_results_json
from utils.eval.validate import (
    ValidationOptions,
    ValidationResult,
    check_outside_dataset,
    evaluate,
    make_folder,
)
from utils.infer.outputs import clear_stale_labels
from utils.infer.predict import recorded_size
from utils.log import LOGGER, one_line
from utils.torch_utils import prepare_for_inference, select_device

DEFAULT_SIZE = 640  # the image size for weights that do not record the size they were trained at


def run(data: str | Path | dict = "coco128.yaml", **options) -> ValidationResult:
    """Validate weights on a split of data (a data YAML path or load_data_config's dict), as test.py does; the
    keywords are test.py's flags (utils.eval.options.TestCommand's fields).

    Several weights files are validated as one ensemble; augment adds test-time augmentation (models/api/tta.py).
    Writes results.json (and, as asked, plots, labels/, predictions.json) into project/name. Raises
    DatasetError, CheckpointError, DownloadError, DeviceError, MetricsError or TestError, each one line.
    """
    return validate(TestCommand(data=data, **options))


def validate(o: TestCommand) -> ValidationResult:
    """run() on a TestCommand. The size and thresholds left at None are the model's: its training size, its
    family's validation thresholds (--task speed: its detect thresholds)."""
    data, split = _task_data(o.task, o.data)
    model, device, autocast, channels_last = _load_model(o.weights, o.device, o.half, o.bf16, o.augment)
    if o.task == "speed":  # YOLOv5's speed benchmark: the val split, square images, the family's detect thresholds
        conf = model.family.predict_conf if o.conf_thres is None else o.conf_thres
        iou = model.family.predict_iou if o.iou_thres is None else o.iou_thres
        o = replace(o, conf_thres=conf, iou_thres=iou, save_json=False, plots=False, save_txt=False)
    nc = 1 if o.single_cls else _check_classes(model, data)
    stride = max(int(model.stride.max()), 32)
    imgsz = check_img_size(training_size(model, o.imgsz, "test", stride), stride)
    imgsz, batch_size, square = _input_plan(model, imgsz, o.batch_size, o.task)
    task = getattr(model, "task", None)  # a segment model's loader reads polygon rows (its masks' ground truth)
    rows = "box" if task is None else task.label_rows
    loader = _validation_loader(data, split, square, imgsz, batch_size, stride, o.single_cls, o.workers, nc, rows)
    save_dir = _output_folder(o.project, o.name, o.exist_ok, o.save_txt, loader.dataset)
    ann_json = _ground_truth_json(o.ann_json, data, loader.dataset.im_files, use=not o.single_cls and o.task != "speed")
    options = ValidationOptions(
        conf_thres=o.conf_thres,
        iou_thres=o.iou_thres,
        max_det=o.max_det,
        single_cls=o.single_cls,
        ann_json=ann_json,
        save_dir=save_dir,
        plots=o.plots,
        save_txt=o.save_txt,
        save_conf=o.save_conf,
        save_json=o.save_json,
        verbose=True,
        per_class=o.verbose or len(data["names"]) < 50,
        autocast=autocast,
        channels_last=channels_last,
    )
    _warm_up(model, device, imgsz, options)
    result = evaluate(model, loader, list(data["names"]), options=options)
    _save_results(save_dir, result, o.save_txt)
    return result


def training_size(model, imgsz: int | None, what: str, stride: int = 32) -> int:
    """imgsz when given, else the size the model was trained at, rounded up to a multiple of stride (640 when its
    weights do not say); one log line with the family's thresholds' source."""
    trained, recorded_said = recorded_size(model, stride)
    size = imgsz or trained or DEFAULT_SIZE
    said = "--img" if imgsz else recorded_said
    LOGGER.info(f"{model.family.title} model: {what} image size {size} ({said})")
    return size


def _task_data(task: str, data: str | Path | dict) -> tuple[dict, str]:
    """The data config and the split a --task scores; TestError for an unknown task, DatasetError for a missing or
    empty split (before any weights are loaded)."""
    if task not in TASKS:
        raise TestError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    data = data if isinstance(data, dict) else load_data_config(data)
    split = "val" if task == "speed" else task
    _count_images(data, split)
    return data, split


def _output_folder(project: str | Path, name: str, exist_ok: bool, save_txt: bool, dataset) -> Path:
    """project/name reserved for this run, checked to hold no dataset file, with an empty labels/ for --save-txt
    (so that it holds this run's labels only)."""
    save_dir = reserve_results_dir(project, name, exist_ok)
    check_outside_dataset(save_dir, dataset)
    make_folder(save_dir / "labels" if save_txt else save_dir)
    if save_txt:
        clear_stale_labels(save_dir / "labels", set())
    return save_dir


def _save_results(save_dir: Path, result: ValidationResult, save_txt: bool) -> None:
    """results.json, and where everything went."""
    write_results_json(
        save_dir / "results.json",
        result.metrics,
        result.speed_ms,
        result.pycocotools,
        result.mask_metrics,
        result.mask_pycocotools,
    )
    n_txt = result.metrics.images if save_txt else 0  # one file per image, this run's only
    LOGGER.info(
        f"Results saved to {save_dir}" + (f", {n_txt} label files in {save_dir / 'labels'}" if save_txt else "")
    )


def _count_images(data: dict, split: str) -> int:
    """Images in a split (checked before any weights are loaded, so a wrong split fails at once)."""
    if not data.get(split):
        raise TestError(f"{data.get('yaml_file', 'the data YAML')} has no '{split}' split")
    return len(list_image_files(data[split], prefix=f"{split}: "))


def _load_model(weights, device: str, half: bool | None, bf16: bool, augment: bool = False):
    """The weights (several files: an Ensemble), on the device under the precision policy, TTA-wrapped if asked.

    Returns (model, device, autocast context, channels_last)."""
    if not weights:
        raise TestError("give the model to validate with --weights")
    device = select_device(device)
    paths = [weights] if isinstance(weights, (str, Path)) else list(weights)
    if any(is_backend_path(p) for p in paths):
        return load_exported(paths, device, half, bf16, augment), device, contextlib.nullcontext(), False
    model = load_models(paths, device)  # resolves each bare name in weights/ (attempt_download_weights)
    model, _, autocast, channels_last = prepare_for_inference(model, device, half, bf16)
    return TTAModel(model) if augment else model, device, autocast, channels_last


def _check_classes(model, data: dict) -> int:
    """The data's class count, or TestError when the weights predict another number of classes."""
    nc = int(data["nc"])
    if len(model.names) != nc:
        raise TestError(
            f"the weights predict {len(model.names)} classes but {data.get('yaml_file', 'the data')} "
            f"has {nc}: pass the data YAML the model was trained on"
        )
    return nc


def _input_plan(model, imgsz: int, batch_size: int, task: str) -> tuple[int, int, bool]:
    """(image size, batch size, square batches?): a static-shape export takes square batches at its fixed size and
    at most its fixed batch; other models keep YOLOv5's rectangular batches (square for --task speed)."""
    fixed = getattr(model, "fixed_shape", None)
    if not fixed:
        return imgsz, batch_size, task == "speed"
    stride = int(model.stride.max())
    if task != "speed" and min(fixed) >= math.ceil(imgsz / stride + 0.5) * stride:  # a rectangular batch fits
        LOGGER.info(f"static-shape export: rectangular batches at {imgsz}, each run padded to {fixed[0]}x{fixed[1]}")
        return imgsz, batch_size, False  # the backend pads (models/export/runtime.py): the .pt's inputs and mAP
    if fixed[0] != fixed[1]:
        raise TestError(f"test.py needs a square static export or a --dynamic one, got {fixed[0]}x{fixed[1]}")
    if imgsz != fixed[0] or batch_size > model.batch:
        LOGGER.info(f"static-shape export: square {fixed[0]}x{fixed[1]} batches of at most {model.batch} images")
    return fixed[0], min(batch_size, model.batch), True


def _warm_up(model, device: torch.device, imgsz: int, options: ValidationOptions) -> None:
    """One untimed image pays the one-off costs (allocations, kernel selection, grids) before the timed run."""
    dtype = next(model.parameters()).dtype
    warm = torch.zeros(
        (getattr(model, "batch", None) or 1, 3, imgsz, imgsz),
        device=device,
        dtype=torch.float16 if dtype == torch.float16 else None,
    )
    with torch.no_grad(), options.autocast:
        model.eval()(warm.contiguous(memory_format=torch.channels_last) if options.channels_last else warm)


def _validation_loader(
    data: dict,
    split: str,
    square: bool,
    imgsz: int,
    batch_size: int,
    stride: int,
    single_cls: bool,
    workers: int,
    nc: int,
    label_rows: str = "box",
):
    """YOLOv5's validation loader: rectangular batches padded by half a stride, or square ones unpadded; label_rows
    is the model task's (a segment model's: polygons, utils.data.dataset.LoadImagesAndLabels).

    create_dataloader clips the batch to the images that remain once corrupt ones are dropped."""
    pad, rect = (0.0, False) if square else (0.5, True)
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
        label_rows=label_rows,
    )[0]


def _ground_truth_json(ann_json: str | None, data: dict, files: list[str], use: bool) -> JsonGroundTruth | None:
    """The COCO JSON to score against (--ann-json, else the data YAML's ann_json) matched to files, or None.

    A JSON that does not describe these images is an error here (train.py instead falls back to the labels).
    """
    if not use and ann_json:
        LOGGER.warning(
            f"WARNING: --ann-json {ann_json} is not used with --single-cls or --task speed: scoring "
            f"against the YOLO labels"
        )
    path = (ann_json or data.get("ann_json")) if use else None
    if not path:
        return None
    try:
        return load_json_ground_truth(path, list(data["names"]), list(files))
    except MetricsError as e:
        source = "" if ann_json else " (the data YAML's ann_json; remove it to score against the YOLO labels)"
        raise TestError(f"{one_line(e)}{source}") from None
