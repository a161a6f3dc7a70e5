"""The validation engine: evaluate(model, dataloader, names) runs a model over a loader and scores it (COCO protocol).

The model is used as given: its device, precision and layout stay, its train/eval mode is restored afterwards.
Loading weights, the precision policy and building the loader belong to the caller: test.py does them through
utils/eval/validate_weights.py, train.py passes its EMA model and validation loader. The numbers are the COCO
protocol's (AP at IoU 0.50:0.95, 0.50, ...), computed in memory; P and R are YOLOv5's, at the confidence of
maximal mean F1.
"""

import contextlib
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from utils.boxes import end2end_detections, non_max_suppression, scale_boxes, xywh2xyxy, xyxy2xywh
from utils.errors import MetricsError, TestError
from utils.eval.charts import plot_evaluation
from utils.eval.coco_json import (
    JsonGroundTruth,
    check_json_sizes,
    coco_category_ids,
    image_ids_for,
    load_json_ground_truth,
)
from utils.eval.evaluator import CocoEvaluator
from utils.eval.metrics import DetectionMetrics, fitness
from utils.eval.report import TABLE_HEADER, print_report, save_json_and_check
from utils.eval.segm import MaskGroundTruth, detections_that_can_match, rle_area
from utils.infer.masks import crop_rle, iter_instance_masks, pixel_bounds
from utils.labels import write_yolo_labels
from utils.log import LOGGER, PROGRESS_BAR, one_line
from utils.plots import save_batch_plot
from utils.torch_utils import model_inputs, time_sync


@dataclass
class ValidationOptions:
    """How evaluate() scores a model and what it prints and writes.

    The defaults are the YOLO labels as ground truth, the summary row only and no files; thresholds left at None are
    the model family's validation ones (model.family: YOLOv5 conf 0.001 / IoU 0.6, YOLOv8/YOLO11/YOLO26 0.001 /
    0.7), the same in test.py and in training."""

    conf_thres: float | None = None  # NMS confidence threshold
    iou_thres: float | None = None  # NMS IoU threshold
    max_det: int = 300  # detections kept per image
    single_cls: bool = False  # every class is class 0 (class-agnostic NMS); ann_json is then not used
    # Ground truth: a COCO annotations JSON (path, or one already matched by coco_json.load_json_ground_truth);
    # None scores against the loader's YOLO labels, scaled back to original-image pixels.
    ann_json: str | Path | JsonGroundTruth | None = None
    ann_json_fallback: bool = False  # a JSON path that does not fit the images: warn once, use the labels instead
    save_dir: Path | None = None  # where plots, labels/ and predictions.json go (needed by those options)
    plots: bool = False  # val_batch*_labels/pred.jpg for 3 batches, PR/F1/P/R curves and the confusion matrix
    save_txt: bool = False  # save_dir/labels/<stem>.txt, YOLO format: cls cx cy w h [conf]
    save_conf: bool = False  # with save_txt: a confidence column
    save_json: bool = False  # save_dir/predictions.json, cross-checked with pycocotools
    verbose: bool = False  # progress bar, per-class rows, speed and the 12 COCO numbers (else the summary row)
    per_class: bool | None = None  # per-class rows; None: as verbose
    half: bool = False  # FP16 autocast for an FP32 model on CUDA (train.py's AMP); an FP16 model gets FP16 inputs
    autocast: contextlib.AbstractContextManager | None = None  # a context to run the model in (test.py's bf16)
    channels_last: bool = False  # feed channels-last inputs (a model prepared for the CPU that way)


@dataclass
class ValidationResult:
    """What one evaluation produces."""

    metrics: DetectionMetrics  # COCO numbers, per-class AP, YOLOv5-style P/R, curves, confusion matrix
    losses: tuple[float, ...]  # the loss's items per batch (YOLOv5: box, obj, cls; others: box, cls, dfl; + seg)
    speed_ms: tuple[float, float, float]  # pre-process, inference, NMS milliseconds per image
    pycocotools: np.ndarray | None = None  # pycocotools' 12 numbers on predictions.json (save_json)
    mask_metrics: DetectionMetrics | None = None  # a segment model's: the same numbers for its masks (COCO 'segm')
    mask_pycocotools: np.ndarray | None = None  # pycocotools' 12 'segm' numbers on predictions.json (save_json)

    def __repr__(self) -> str:
        """One short line: the metrics' repr, the losses, the speed and whether pycocotools cross-checked."""
        losses = ", ".join(f"{v:.4f}" for v in self.losses)
        speed = "/".join(f"{t:.1f}" for t in self.speed_ms)
        checked = "" if self.pycocotools is None else ", pycocotools checked"
        return f"ValidationResult({self.metrics!r}, losses ({losses}), {speed} ms per image{checked})"

    @property
    def fitness(self) -> float:
        """Model selection score 0.1 * mAP50 + 0.9 * mAP50-95; a segment model's is its boxes' plus its masks' (as
        YOLOv5's segment/train.py and Ultralytics' SegmentMetrics add them)."""
        masks = 0.0 if self.mask_metrics is None else fitness(self.mask_metrics)
        return float(fitness(self.metrics) + masks)

    @property
    def summary(self) -> tuple[float, ...]:
        """(P, R, mAP50, mAP50-95, box loss, obj loss, cls loss), the validation columns of results.csv."""
        m = self.metrics
        return (m.mp, m.mr, m.map50, m.map, *self.losses)


@torch.no_grad()
def family_thresholds(options: ValidationOptions, family) -> ValidationOptions:
    """options with thresholds left at None set to the family's validation ones (a given value always wins)."""
    conf = family.val_conf if options.conf_thres is None else options.conf_thres
    return replace(
        options, conf_thres=conf, iou_thres=family.val_iou if options.iou_thres is None else options.iou_thres
    )


def evaluate(
    model: torch.nn.Module,
    dataloader,
    names: list[str],
    compute_loss=None,
    options: ValidationOptions | None = None,
) -> ValidationResult:
    """Score model on every batch of dataloader (YOLOv5's LoadImagesAndLabels batches) and return the result.

    names are the data's class names; compute_loss(predictions, targets) -> (loss, loss items) adds the
    validation losses (a segment model's: compute_loss(model outputs, targets, masks)). A model whose task has
    masks (model.task) is also scored on them (ValidationResult.mask_metrics). See ValidationOptions for
    thresholds, ground truth, outputs and precision; with single_cls the loader must have been built with
    single_cls too (its labels all class 0). Raises TestError or MetricsError (one line) when the ground truth
    JSON does not describe the images.
    """
    opts = family_thresholds(options or ValidationOptions(), model.family)
    if opts.save_dir is None and (opts.save_txt or opts.save_json or opts.plots):
        raise ValueError("evaluate(): plots, save_txt and save_json need options.save_dir")
    names = ["item"] if opts.single_cls and len(names) != 1 else list(names)
    files = list(dataloader.dataset.im_files)
    json_gt = _ground_truth(opts, names, files)
    mask_gt = _mask_ground_truth(model, dataloader.dataset, json_gt)
    evaluator = _evaluator(names, opts, json_gt, keep_masks=opts.save_json and mask_gt is not None)
    ids = json_gt.image_ids if json_gt is not None else image_ids_for(files)
    txt_of = _output_folders(opts, dataloader.dataset, files)

    was_training = model.training
    model.eval()
    try:
        run = _Run(model, opts, evaluator, dict(zip(files, ids)), json_gt, txt_of, names, mask_gt)
        losses = run.all_batches(dataloader, compute_loss)
    finally:
        model.train(was_training)

    if json_gt is not None:
        check_json_sizes(json_gt, run.image_hw, run.id_of)
    metrics = evaluator.evaluate(confusion=opts.plots)
    masks = None if mask_gt is None else evaluator.evaluate_masks()
    speed = tuple(t / max(run.seen, 1) * 1e3 for t in run.totals)
    per_class = opts.verbose if opts.per_class is None else opts.per_class
    print_report(metrics, masks, run.seen, speed, opts.verbose, per_class, dataloader)
    checked = (None, None)
    if opts.save_json:
        ann_json = None if json_gt is None else json_gt.path
        checked = save_json_and_check(evaluator, Path(opts.save_dir), ann_json, metrics, masks)
    if opts.plots:
        try:
            plot_evaluation(metrics, Path(opts.save_dir))
        except Exception as e:  # a plot must never stop validation
            LOGGER.warning(f"WARNING: could not plot the evaluation charts: {e}")
    return ValidationResult(metrics, tuple(losses), speed, checked[0], masks, checked[1])


def _evaluator(names: list[str], opts: ValidationOptions, json_gt, keep_masks: bool) -> CocoEvaluator:
    """The evaluator, with the category ids written to COCO files: COCO's for its 80 names, else the JSON's."""
    category_ids = None if opts.single_cls else coco_category_ids(names)
    if json_gt is not None and category_ids is None:
        category_ids = json_gt.gt.category_ids
    return CocoEvaluator(names, category_ids, keep_masks=keep_masks)


def _output_folders(opts: ValidationOptions, dataset, files: list[str]) -> dict[str, Path]:
    """The folders the options write into, made; --save-txt's file for each image (none without it)."""
    if opts.save_txt:
        check_outside_dataset(Path(opts.save_dir), dataset)
    txt_of = _label_files(files, Path(opts.save_dir) / "labels") if opts.save_txt else {}
    if opts.save_txt or opts.save_json or opts.plots:
        make_folder(Path(opts.save_dir) / "labels" if opts.save_txt else Path(opts.save_dir))
    return txt_of


_NO_POLYGONS_WARNED: list[bool] = []  # said once per process (training validates every epoch)


def _mask_ground_truth(model, dataset, json_gt: JsonGroundTruth | None) -> MaskGroundTruth | None:
    """Where a segment model's masks are scored against (model.task says whether it has masks): the JSON's
    segmentations, else the dataset's polygons; None for a detection model, or when there are no polygons."""
    task = getattr(model, "task", None)
    if task is None or not task.masks:
        return None
    segments = getattr(dataset, "segments", None)
    if json_gt is None and segments is None:
        if not _NO_POLYGONS_WARNED:
            _NO_POLYGONS_WARNED.append(True)
            LOGGER.warning("WARNING: a segment model on labels without polygons: its masks are not scored")
        return None
    return MaskGroundTruth(list(dataset.im_files), segments, json_gt)


_FALLBACK_WARNED: set[str] = set()  # JSON files already reported unusable (ann_json_fallback)


def _ground_truth(opts: ValidationOptions, names: list[str], files: list[str]) -> JsonGroundTruth | None:
    """The COCO JSON to score against, matched to files, or None for the YOLO labels (also with single_cls)."""
    if opts.single_cls or opts.ann_json is None or isinstance(opts.ann_json, JsonGroundTruth):
        return None if opts.single_cls else opts.ann_json
    path = str(opts.ann_json)
    try:
        return load_json_ground_truth(path, names, files)
    except MetricsError as e:
        if not opts.ann_json_fallback:
            raise
        if path not in _FALLBACK_WARNED:  # one warning per file, not one per epoch
            _FALLBACK_WARNED.add(path)
            LOGGER.warning(f"WARNING: {one_line(e)}: scoring against the YOLO labels instead")
        return None


class _Run:
    """One pass over the loader: timing, NMS, losses, and each image into the evaluator (and labels/plots)."""

    def __init__(self, model, opts: ValidationOptions, evaluator, id_of, json_gt, txt_of, names, mask_gt=None):
        self.model, self.opts, self.evaluator, self.json_gt = model, opts, evaluator, json_gt
        self.id_of, self.txt_of, self.names, self.mask_gt = id_of, txt_of, names, mask_gt
        task = getattr(model, "task", None)  # a segment model's outputs carry mask coefficients and prototypes
        self.masks = task is not None and task.masks
        parameter = next(model.parameters())
        self.device, self.half = parameter.device, parameter.dtype == torch.float16
        amp = opts.half and self.device.type == "cuda" and not self.half
        self.autocast = opts.autocast or (
            torch.autocast("cuda", dtype=torch.float16) if amp else contextlib.nullcontext()
        )
        self.seen, self.totals, self.image_hw = 0, [0.0, 0.0, 0.0], {}

    def all_batches(self, dataloader, compute_loss) -> list[float]:
        """Run every batch; the mean loss items per batch (three zeros without compute_loss)."""
        loss, plots = None, []
        bar = tqdm(dataloader, desc=TABLE_HEADER, bar_format=PROGRESS_BAR, disable=not self.opts.verbose)
        for batch_i, (im, targets, paths, shapes, *rest) in enumerate(bar):
            im, targets, output, outputs = self.batch(im, targets)
            if compute_loss is not None:
                items = self.loss_items(compute_loss, outputs, targets, rest)
                loss = items if loss is None else loss + items
            protos = outputs.protos if self.mask_gt is not None else None
            for si, det in enumerate(output):
                labels, image_protos = targets[targets[:, 0] == si, 1:], None if protos is None else protos[si]
                self.image(det, labels, im.shape[2:], paths[si], shapes[si], image_protos)
            if self.opts.plots and batch_i < 3:
                plots.append(self.plot_batch(batch_i, im, targets, output, paths))
        for thread in plots:  # every plot is written before the run reports
            thread.join()
        loss = torch.zeros(3) if loss is None else loss
        return (loss.cpu() / max(len(dataloader), 1)).tolist()

    def plot_batch(self, batch_i: int, im, targets, output, paths) -> threading.Thread:
        """val_batch{i}_labels.jpg and _pred.jpg, drawn on a thread of their own: drawing and JPEG encoding release
        the GIL, so they overlap the next batches' loading and inference (as YOLOv5's val.py draws them)."""
        folder, names, predicted = Path(self.opts.save_dir), self.names, _predictions_to_targets(output)

        def draw() -> None:
            save_batch_plot(im, targets, paths, folder / f"val_batch{batch_i}_labels.jpg", names)
            save_batch_plot(im, predicted, paths, folder / f"val_batch{batch_i}_pred.jpg", names)

        thread = threading.Thread(target=draw, name=f"val_batch{batch_i}_plots")
        thread.start()
        return thread

    def loss_items(self, compute_loss, outputs, targets: torch.Tensor, rest: list) -> torch.Tensor:
        """One batch's loss items: a segment model's from its whole outputs, the targets and the batch's masks; a
        detection model's from the raw maps and targets."""
        if self.masks:
            masks = rest[0].to(self.device) if rest and rest[0] is not None else None
            return compute_loss(outputs, targets, masks)[1].detach()
        return compute_loss([x.float() for x in outputs[1]], targets)[1].detach()

    def batch(self, im: torch.Tensor, targets: torch.Tensor):
        """Pre-process, inference and NMS of one batch, each timed; (images, targets, NMS output, model outputs).
        A segment model's detections carry their mask coefficients after the six box columns."""
        opts = self.opts
        t0 = time_sync(self.device)
        im = im.to(self.device, non_blocking=True)
        im = model_inputs(im, self.model, torch.float16 if self.half else torch.float32, opts.channels_last)
        targets = targets.to(self.device)
        t1 = time_sync(self.device)
        with self.autocast:
            outputs = self.model(im)
        t2 = time_sync(self.device)
        preds, extra = outputs[0], 0
        if self.mask_gt is not None:
            preds, extra = torch.cat((preds.float(), outputs.coefficients.float()), 2), outputs.coefficients.shape[2]
        if self.model.family.end2end:  # final detections (YOLO26's one-to-one head): no NMS
            output = end2end_detections(preds, opts.conf_thres, max_det=opts.max_det)
        else:
            output = non_max_suppression(
                preds.float(),
                opts.conf_thres,
                opts.iou_thres,
                multi_label=True,
                agnostic=opts.single_cls,
                max_det=opts.max_det,
                extra=extra,
            )
        t3 = time_sync(self.device)
        for k, dt in enumerate((t1 - t0, t2 - t1, t3 - t2)):
            self.totals[k] += dt
        return im, targets, output, outputs

    def image(self, det: torch.Tensor, labels: torch.Tensor, input_hw, path: str, shapes, protos=None) -> None:
        """One image's detections and labels (and with protos, its masks) into the evaluator; its --save-txt
        labels."""
        self.seen += 1
        if self.opts.single_cls:
            det[:, 5] = 0
        (h0, w0), ratio_pad = shapes
        det = det.detach().cpu().double()
        det[:, :4] = scale_boxes(input_hw, det[:, :4].clone(), (h0, w0), ratio_pad)  # original-image pixels
        image_id = self.id_of[path]
        gt_boxes, gt_classes, areas, crowd = _image_ground_truth(image_id, labels, input_hw, shapes, self.json_gt)
        if protos is not None:
            segmentations, gt_rles = self.mask_gt.image(path, image_id, gt_boxes.numpy(), (int(h0), int(w0)))
            if self.json_gt is None:  # the labels' areas are their masks', as COCO's annotations give them
                areas = rle_area(gt_rles)
        boxes, scores, classes = det[:, :4], det[:, 4], det[:, 5]
        self.evaluator.add(
            image_id, gt_boxes, gt_classes, boxes, scores, classes, gt_areas=areas, gt_crowd=crowd, shape=(h0, w0)
        )
        if protos is not None:
            self.add_masks(det, protos, input_hw, shapes, (gt_rles, gt_classes, crowd, segmentations))
        self.image_hw[path] = (int(h0), int(w0))
        if self.opts.save_txt:
            write_yolo_labels(self.txt_of[path], det[:, :6], (h0, w0), self.opts.save_conf)

    def add_masks(self, det: torch.Tensor, protos: torch.Tensor, input_hw, shapes, ground_truth: tuple) -> None:
        """The image's masks into the evaluator: det (n, 6 + nm) with boxes in original pixels; ground_truth (RLEs,
        classes, crowd flags or None, COCO segmentations). Only the masks of the detections that can be matched are
        made (the others' IoUs count as 0), unless predictions.json wants every one."""
        (h0, w0), ratio_pad = shapes
        shape, (gt_rles, gt_classes, crowd, segmentations) = (int(h0), int(w0)), ground_truth
        crowd = np.zeros(len(gt_rles), bool) if crowd is None else np.asarray(crowd, bool)
        boxes = det[:, :4].numpy()
        wanted = np.arange(len(det))
        if not self.evaluator.keep_masks:
            bounds = pixel_bounds(boxes, *shape)
            wanted = detections_that_can_match(bounds, det[:, 5].numpy(), gt_rles, gt_classes, crowd)
        masks = iter_instance_masks(protos.float().cpu(), det[wanted, 6:], boxes[wanted], input_hw, shape, ratio_pad)
        det_rles = {int(i): crop_rle(origin, crop, shape) for i, (origin, crop) in zip(wanted, masks)}
        self.evaluator.add_masks(gt_rles, det_rles, segmentations)


def _image_ground_truth(image_id: int, labels: torch.Tensor, input_hw, shapes: tuple, json_gt):
    """One image's ground truth: (corner boxes in original pixels, class indices, areas or None, crowd or None).

    labels: (n, 5) [cls, cx, cy, w, h] normalised to the network input; shapes: the dataset's ((h0, w0),
    ratio_pad) for scale_boxes; json_gt: the COCO JSON to use instead of labels.
    """
    if json_gt is not None:
        gt_boxes, categories, areas, crowd = json_gt.gt.image(image_id)
        return torch.from_numpy(gt_boxes), json_gt.class_of[categories], areas, crowd
    (h0, w0), ratio_pad = shapes
    height, width = input_hw
    labels = labels.detach().cpu().double()
    gt_boxes = xywh2xyxy(labels[:, 1:5]) * torch.tensor([width, height, width, height], dtype=torch.float64)
    return scale_boxes(input_hw, gt_boxes, (h0, w0), ratio_pad), labels[:, 0], None, None


def _predictions_to_targets(output: list[torch.Tensor]) -> torch.Tensor:
    """NMS output of a batch as plot_images' prediction rows [batch_idx, cls, cx, cy, w, h, conf] (pixels)."""
    rows = []
    for i, det in enumerate(output):
        det = det.float().cpu()
        rows.append(torch.cat((torch.full((len(det), 1), i), det[:, 5:6], xyxy2xywh(det[:, :4]), det[:, 4:5]), 1))
    return torch.cat(rows, 0) if rows else torch.zeros((0, 7))


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


def check_outside_dataset(save_dir: Path, dataset) -> None:
    """TestError when the run folder holds any image or label file of the dataset: --save-txt would write over
    its ground-truth labels (and the next test.py would score them). Checked on real paths, so links count."""
    run = Path(save_dir).resolve()
    files = list(dataset.im_files) + list(getattr(dataset, "label_files", []))
    inside = next((f for f in files if Path(f).resolve().is_relative_to(run)), None)
    if inside is not None:
        raise TestError(
            f"the output folder {save_dir} holds files of the dataset ({inside}): nothing there is written; "
            "choose another --project/--name"
        )


def make_folder(folder: Path) -> None:
    """Create the results folder, or TestError saying why it cannot be (e.g. --project names a file)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TestError(f"cannot create the results folder {folder}: {e.strerror or e}") from None
