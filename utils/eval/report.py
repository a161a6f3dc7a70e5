"""What an evaluation prints and cross-checks: YOLOv5's table (a segment model's with its mask columns, as YOLOv5's
segment/val.py prints them) and predictions.json scored again by pycocotools (bbox, and segm for masks)."""

import json
from pathlib import Path

import numpy as np

from utils.errors import MetricsError
from utils.eval.coco_io import format_coco_stats, pycocotools_stats
from utils.eval.evaluator import CocoEvaluator
from utils.eval.metrics import DetectionMetrics
from utils.log import LOGGER, speed_line

TABLE_HEADER = ("%22s" + "%11s" * 6) % ("Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95")
MASK_COLUMNS = ("Box(P", "R", "mAP50", "mAP50-95)", "Mask(P", "R", "mAP50", "mAP50-95)")
MASK_TABLE_HEADER = ("%22s" + "%11s" * 10) % ("Class", "Images", "Instances", *MASK_COLUMNS)


def _rows(metrics: DetectionMetrics, masks: DetectionMetrics | None, seen: int, per_class: bool) -> list[str]:
    """The table's rows: all classes, then each class with labels when asked."""
    groups = [metrics] if masks is None else [metrics, masks]
    row = "%22s" + "%11i" * 2 + "%11.3g" * 4 * len(groups)
    lines = [row % ("all", seen, metrics.instances.sum(), *(v for m in groups for v in (m.mp, m.mr, m.map50, m.map)))]
    if len(metrics.names) > 1 and per_class:
        for c in np.flatnonzero(metrics.present):
            values = (v for m in groups for v in (m.precision[c], m.recall[c], m.ap50[c], m.ap[c]))
            lines.append(row % (metrics.names[c], metrics.class_images[c], metrics.instances[c], *values))
    return lines


def print_report(
    metrics: DetectionMetrics,
    masks: DetectionMetrics | None,
    seen: int,
    speed,
    verbose: bool,
    per_class: bool,
    dataloader,
) -> None:
    """YOLOv5's table (all classes, then per class when asked); verbose: speed and the 12 COCO numbers of each."""
    LOGGER.info(TABLE_HEADER if masks is None else MASK_TABLE_HEADER)
    for line in _rows(metrics, masks, seen, per_class):
        LOGGER.info(line)
    if metrics.instances.sum() == 0:
        LOGGER.warning("WARNING: no labels found in the validation set, metrics are undefined")
    if verbose:
        size = dataloader.dataset.img_size
        LOGGER.info(speed_line(speed, f"shape ({dataloader.batch_size}, 3, {size}, {size})"))
        LOGGER.info(f"COCO protocol (faster-coco-eval):\n{format_coco_stats(metrics.stats)}")
        if masks is not None:
            LOGGER.info(f"COCO protocol, masks (segm):\n{format_coco_stats(masks.stats)}")


def save_json_and_check(
    evaluator: CocoEvaluator,
    save_dir: Path,
    ann_json: str | None,
    metrics: DetectionMetrics,
    masks: DetectionMetrics | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Write predictions.json, score it with pycocotools against ann_json (None: a ground-truth JSON written from
    the labels) and compare with our numbers; pycocotools' 12 numbers for the boxes and (with masks) the masks,
    None where it could not run."""
    pred_file = save_dir / "predictions.json"
    predictions = evaluator.predictions()
    pred_file.write_text(json.dumps(predictions))
    LOGGER.info(f"Saving {pred_file} ({len(predictions)} detections)...")
    if ann_json is None:
        ann_json = str(save_dir / "ground_truth.json")
        Path(ann_json).write_text(json.dumps(evaluator.ground_truth()))
        LOGGER.info(f"Saving {ann_json} (COCO ground truth from the labels)...")
    boxes = _check(ann_json, pred_file, evaluator.image_ids, metrics, "bbox")
    return boxes, None if masks is None or boxes is None else _check(
        ann_json, pred_file, evaluator.image_ids, masks, "segm"
    )


def _check(ann_json: str, pred_file: Path, image_ids, metrics: DetectionMetrics, iou_type: str) -> np.ndarray | None:
    """pycocotools' numbers of one iouType, logged with their largest difference from ours (None: it could not run)."""
    try:
        stats = pycocotools_stats(ann_json, pred_file, image_ids=image_ids, iou_type=iou_type)
    except ImportError:
        LOGGER.warning("WARNING: pycocotools is not installed, predictions.json not cross-checked")
        return None
    except MetricsError as e:
        LOGGER.warning(f"WARNING: pycocotools check skipped: {e}")
        return None
    name = "pycocotools" if iou_type == "bbox" else f"pycocotools ({iou_type})"
    LOGGER.info(f"{name} on {pred_file.name} against {Path(ann_json).name}:\n{format_coco_stats(stats)}")
    diff = float(np.abs(stats - metrics.stats).max())
    if diff > 1e-6:
        LOGGER.warning(f"WARNING: {name} differs from the in-memory evaluation by up to {diff:.2e}")
    else:
        LOGGER.info(f"{name} agrees with the in-memory evaluation (largest difference {diff:.1e})")
    return stats
