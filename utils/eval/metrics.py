"""Detection results as typed values: the 12 COCO numbers, YOLOv5-style P/R and per-class arrays, and the
fitness that selects the best checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The 12 COCO summary numbers, in pycocotools' order.
STAT_KEYS = ("mAP50-95", "mAP50", "mAP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def fitness_score(map50: float, map50_95: float) -> float:
    """The model selection score, YOLOv5's: 0.1 * mAP50 + 0.9 * mAP50-95. It picks best.pt and the fittest
    generation of --evolve."""
    return 0.1 * map50 + 0.9 * map50_95


def fitness(metrics: DetectionMetrics) -> float:
    """fitness_score of one evaluation (ValidationResult.fitness)."""
    return fitness_score(metrics.map50, metrics.map)


@dataclass
class DetectionMetrics:
    """Everything one evaluation produces. Per-class arrays are NaN for classes without ground truth."""

    names: list[str]  # class names, by class index
    category_ids: list[int]  # class index -> category id used in COCO files
    images: int  # images evaluated
    instances: np.ndarray  # (nc,) non-crowd ground-truth boxes per class
    class_images: np.ndarray  # (nc,) images holding at least one of them
    stats: np.ndarray  # (12,) COCO summary numbers, STAT_KEYS order; -1 where undefined (pycocotools' value)
    ap50: np.ndarray  # (nc,) COCO AP at IoU 0.5
    ap: np.ndarray  # (nc,) COCO AP at IoU 0.50:0.95
    precision: np.ndarray  # (nc,) at the confidence of maximal mean F1 (detections matched at IoU 0.5)
    recall: np.ndarray  # (nc,)
    best_conf: float  # that confidence
    conf_grid: np.ndarray  # (1000,) confidences of the curves below
    p_curve: np.ndarray  # (nc, 1000) precision against confidence
    r_curve: np.ndarray  # (nc, 1000) recall against confidence
    f1_curve: np.ndarray  # (nc, 1000) F1 against confidence
    pr_precision: np.ndarray  # (nc, 101) COCO interpolated precision at IoU 0.5 against RECALL_THRESHOLDS
    confusion: np.ndarray | None = None  # (nc + 1, nc + 1) rows predicted, columns true; index nc = background

    @property
    def present(self) -> np.ndarray:
        """Mask of classes that have ground truth."""
        return self.instances > 0

    @property
    def mp(self) -> float:
        """Mean precision over classes with ground truth."""
        return _nanmean(self.precision)

    @property
    def mr(self) -> float:
        """Mean recall over classes with ground truth."""
        return _nanmean(self.recall)

    @property
    def map50(self) -> float:
        """COCO AP at IoU 0.5 (0 when undefined)."""
        return max(float(self.stats[1]), 0.0)

    @property
    def map(self) -> float:
        """COCO AP at IoU 0.50:0.95 (0 when undefined)."""
        return max(float(self.stats[0]), 0.0)

    @property
    def maps(self) -> np.ndarray:
        """Per-class AP50-95 with mAP50-95 for classes without ground truth (YOLOv5's per-class weights)."""
        return np.where(np.isnan(self.ap), self.map, self.ap)

    def __repr__(self) -> str:
        """One short line: counts, P/R and the 12 COCO numbers (the arrays stay attributes: m.ap, m.p_curve, ...)."""
        coco = " ".join(f"{k} {v:.4f}" for k, v in zip(STAT_KEYS, self.stats))
        classes = f"{len(self.names)} classes ({int(self.present.sum())} with labels)"
        counts = f"{self.images} images, {int(self.instances.sum())} instances"
        return f"DetectionMetrics({classes}, {counts}: P {self.mp:.4f} R {self.mr:.4f} {coco})"

    def coco_dict(self) -> dict[str, float]:
        """The 12 COCO numbers by name."""
        return {k: float(v) for k, v in zip(STAT_KEYS, self.stats)}

    def summary_dict(self) -> dict[str, float]:
        """P, R and the 12 COCO numbers, as results.json stores them."""
        return {"precision": self.mp, "recall": self.mr, **self.coco_dict()}

    def per_class_dict(self) -> dict[str, dict[str, float | int]]:
        """Per-class images, instances, P, R, mAP50, mAP50-95 for classes with ground truth."""
        return {
            self.names[c]: {
                "images": int(self.class_images[c]),
                "instances": int(self.instances[c]),
                "precision": float(self.precision[c]),
                "recall": float(self.recall[c]),
                "mAP50": float(self.ap50[c]),
                "mAP50-95": float(self.ap[c]),
            }
            for c in np.flatnonzero(self.present)
        }


def _nanmean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else 0.0
