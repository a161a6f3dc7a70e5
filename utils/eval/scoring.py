"""Scoring a COCO results file and writing results.json: what test.py --ann-json --pred-json needs, without torch
or a model (this module imports neither)."""

import errno
import json
import os
from pathlib import Path

import numpy as np

from utils.errors import TestError
from utils.eval.coco_io import evaluate_coco_json, format_coco_stats
from utils.eval.metrics import DetectionMetrics
from utils.files import reserve_run_dir
from utils.log import LOGGER


def write_results_json(
    path: Path,
    metrics: DetectionMetrics,
    speed_ms: tuple[float, float, float],
    pycocotools: np.ndarray | None = None,
    mask_metrics: DetectionMetrics | None = None,
    mask_pycocotools: np.ndarray | None = None,
) -> None:
    """results.json: the summary metrics, the per-class table, speed, image/instance counts, pycocotools' stats; a
    segment model's mask_metrics (the same keys as metrics), mask_per_class and pycocotools' segm stats."""
    out = {
        "metrics": metrics.summary_dict(),
        "per_class": metrics.per_class_dict(),
        "speed_ms": dict(zip(("preprocess", "inference", "nms"), (float(t) for t in speed_ms))),
        "images": metrics.images,
        "instances": int(metrics.instances.sum()),
    }
    if mask_metrics is not None:
        out["mask_metrics"], out["mask_per_class"] = mask_metrics.summary_dict(), mask_metrics.per_class_dict()
    if pycocotools is not None:
        out["pycocotools"] = {"stats": [float(x) for x in pycocotools]}
        if mask_pycocotools is not None:
            out["pycocotools"]["segm_stats"] = [float(x) for x in mask_pycocotools]
    path.write_text(json.dumps(out, indent=2))


def reserve_results_dir(project: str | Path, name: str, exist_ok: bool) -> Path:
    """The run folder project/name (exp, exp2, ...; with exist_ok only a run's own folder), created and marked."""
    if not str(name).strip():  # project/'' is project itself, which would be incremented to a sibling folder
        raise TestError("--name is empty: give the run folder's name (default exp)")
    if Path(project).exists() and not Path(project).is_dir():  # say so, rather than mkdir's 'File exists'
        folder = (Path(project) / name).absolute()
        raise TestError(f"cannot create the results folder {folder}: {os.strerror(errno.ENOTDIR)}")
    return reserve_run_dir(Path(project) / name, exist_ok)


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
    save_dir = reserve_results_dir(project, name, exist_ok)
    write_results_json(save_dir / "results.json", metrics, (0.0, 0.0, 0.0))
    LOGGER.info(f"Results saved to {save_dir}")
    return metrics
