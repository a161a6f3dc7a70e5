"""Detection metrics: the COCO protocol (through faster-coco-eval, fed in memory), YOLOv5-style P/R and confusion.

Ground truth and detections travel as numpy arrays. The IoU matrices are computed here with the same float
operations as pycocotools, and faster-coco-eval's C++ core does the matching and accumulation, so the 12
summary numbers equal pycocotools' COCOeval on the same inputs.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from utils.errors import MetricsError
from utils.log import LOGGER

# Class index (0-79) -> official COCO category id (1-90, with gaps): the standard table.
COCO80_TO_91 = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34,
    35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)  # fmt: skip
COCO80_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow", "elephant",
    "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard",
    "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli",
    "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed", "dining table", "toilet",
    "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

# The 12 COCO summary numbers, in pycocotools' order.
STAT_KEYS = ("mAP50-95", "mAP50", "mAP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")

# COCO protocol parameters, built exactly as pycocotools builds them so thresholds compare bit for bit.
IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
RECALL_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
AREA_RANGES = ((0.0, 1e5**2), (0.0, 32.0**2), (32.0**2, 96.0**2), (96.0**2, 1e5**2))  # all, small, medium, large
MAX_DETS = (1, 10, 100)

# Detections are stored as a COCO results JSON stores them (YOLOv5's rounding), so the in-memory numbers
# equal pycocotools' on the saved predictions file.
BOX_DECIMALS, SCORE_DECIMALS = 3, 5


def fitness(metrics: DetectionMetrics) -> float:
    """Model selection score 0.1 * mAP50 + 0.9 * mAP50-95 (ValidationResult.fitness)."""
    return 0.1 * metrics.map50 + 0.9 * metrics.map


# ----------------------------------------------------------------------------------------------------------------
# Results


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


# ----------------------------------------------------------------------------------------------------------------
# Box arrays and vectorised pairing


@dataclass
class _Boxes:
    """Flat box arrays of many images: COCO xywh boxes in original-image pixels."""

    image: np.ndarray  # (n,) int64 image ids (indices among the sorted ids once evaluated)
    cls: np.ndarray  # (n,) int64 class index
    xywh: np.ndarray  # (n, 4) float64 top-left x, y, width, height
    area: np.ndarray  # (n,) float64 area for the COCO area ranges
    crowd: np.ndarray  # (n,) bool, ground truth only (False for detections)
    score: np.ndarray  # (n,) float64, detections only (zeros for ground truth)

    def take(self, index: np.ndarray) -> _Boxes:
        return _Boxes(*(a[index] for a in (self.image, self.cls, self.xywh, self.area, self.crowd, self.score)))

    def __len__(self) -> int:
        return len(self.image)


def _boxes(image, cls, xywh, area=None, crowd=None, score=None) -> _Boxes:
    xywh = np.asarray(xywh, np.float64).reshape(-1, 4)
    n = len(xywh)
    return _Boxes(
        image=np.asarray(image, np.int64).reshape(n),
        cls=np.asarray(cls, np.int64).reshape(n),
        xywh=xywh,
        area=xywh[:, 2] * xywh[:, 3] if area is None else np.asarray(area, np.float64).reshape(n),
        crowd=np.zeros(n, bool) if crowd is None else np.asarray(crowd, bool).reshape(n),
        score=np.zeros(n) if score is None else np.asarray(score, np.float64).reshape(n),
    )


def _expand_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + c) over all (s, c), without a Python loop."""
    counts = np.asarray(counts, np.int64)
    offsets = np.repeat(np.asarray(starts, np.int64) - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(int(counts.sum()))


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values of a sorted array with the start and length of each run (np.unique without the sort)."""
    n = len(sorted_keys)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) if n else np.zeros(0, np.int64)
    return sorted_keys[starts], starts, np.diff(np.r_[starts, n])


def _pairs_with_equal_keys(a_keys: np.ndarray, b_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j) with a_keys[i] == b_keys[j], ordered by i then j; b_keys must be sorted."""
    lo = np.searchsorted(b_keys, a_keys, "left")
    n = np.searchsorted(b_keys, a_keys, "right") - lo
    return np.repeat(np.arange(len(a_keys)), n), _expand_ranges(lo, n)


def _coco_iou(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU of paired xywh boxes with pycocotools' float operations; a crowd region divides by the detection area."""
    w = np.minimum(d[:, 2] + d[:, 0], g[:, 2] + g[:, 0]) - np.maximum(d[:, 0], g[:, 0])
    h = np.minimum(d[:, 3] + d[:, 1], g[:, 3] + g[:, 1]) - np.maximum(d[:, 1], g[:, 1])
    inter = w * h
    d_area = d[:, 2] * d[:, 3]
    union = np.where(crowd, d_area, d_area + g[:, 2] * g[:, 3] - inter)
    out = np.zeros(len(d))
    overlap = (w > 0) & (h > 0)
    out[overlap] = inter[overlap] / union[overlap]
    return out


def _iou_xyxy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of paired corner boxes."""
    w = (np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0])).clip(0)
    h = (np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1])).clip(0)
    inter = w * h
    union = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    return inter / np.maximum(union, 1e-12)


def _one_to_one(det: np.ndarray, gt: np.ndarray, iou: np.ndarray, gt_prefers_iou: bool) -> tuple[np.ndarray, ...]:
    """Resolve candidate (detection, ground truth) matches so each side is used once.

    Each detection keeps the ground truth it overlaps most. A ground truth claimed by several detections keeps
    the highest-IoU one (gt_prefers_iou) or the first one, i.e. the most confident when detections are listed
    by decreasing confidence (how YOLOv5 counts true positives).
    """
    order = np.argsort(-iou, kind="stable")
    det, gt, iou = det[order], gt[order], iou[order]
    first = np.unique(det, return_index=True)[1]
    det, gt, iou = det[first], gt[first], iou[first]
    if gt_prefers_iou:
        order = np.argsort(-iou, kind="stable")
        det, gt, iou = det[order], gt[order], iou[order]
    first = np.unique(gt, return_index=True)[1]
    return det[first], gt[first], iou[first]


# ----------------------------------------------------------------------------------------------------------------
# Confusion matrix


class ConfusionMatrix:
    """YOLOv5's confusion matrix: (nc + 1) x (nc + 1) counts, rows predicted class, columns true class.

    Index nc is background: a missed ground truth counts in row nc, an unmatched detection in column nc.
    Detections above conf are matched class-agnostically to ground truth at IoU above iou_thres.
    """

    def __init__(self, nc: int, conf: float = 0.25, iou_thres: float = 0.45):
        self.nc, self.conf, self.iou_thres = nc, conf, iou_thres
        self.matrix = np.zeros((nc + 1, nc + 1), dtype=np.int64)

    def update(self, gt_image, gt_xyxy, gt_cls, det_image, det_xyxy, det_conf, det_cls) -> None:
        """Add many images at once; the image ids tie detections to ground truth (any order)."""
        gt_image, det_image = np.asarray(gt_image, np.int64), np.asarray(det_image, np.int64)
        gt_cls, det_cls = np.asarray(gt_cls, np.int64), np.asarray(det_cls, np.int64)
        gt_xyxy = np.asarray(gt_xyxy, np.float64).reshape(-1, 4)
        det_xyxy = np.asarray(det_xyxy, np.float64).reshape(-1, 4)
        keep = np.flatnonzero(np.asarray(det_conf) > self.conf)
        det_image, det_xyxy, det_cls = det_image[keep], det_xyxy[keep], det_cls[keep]
        order = np.argsort(gt_image, kind="stable")
        gt_image, gt_xyxy, gt_cls = gt_image[order], gt_xyxy[order], gt_cls[order]

        d, g = _pairs_with_equal_keys(det_image, gt_image)
        iou = _iou_xyxy(det_xyxy[d], gt_xyxy[g])
        hit = iou > self.iou_thres
        d, g, _ = _one_to_one(d[hit], g[hit], iou[hit], gt_prefers_iou=True)
        np.add.at(self.matrix, (det_cls[d], gt_cls[g]), 1)
        missed = np.ones(len(gt_cls), bool)
        missed[g] = False
        np.add.at(self.matrix, (self.nc, gt_cls[missed]), 1)
        unmatched = np.ones(len(det_cls), bool)
        unmatched[d] = False
        np.add.at(self.matrix, (det_cls[unmatched], self.nc), 1)


def _numpy(x) -> np.ndarray:
    """A numpy array from a numpy array, list or (CPU/GPU) torch tensor."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = (x.double() if x.is_floating_point() else x).numpy()  # also covers bfloat16, which numpy lacks
    return np.asarray(x)


# ----------------------------------------------------------------------------------------------------------------
# The COCO protocol through faster-coco-eval


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small dicts: its scans otherwise dominate."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _fast_core_available() -> bool:
    """Whether this faster-coco-eval exposes the C++ entry points the in-memory path drives (1.8 does)."""
    try:
        import faster_coco_eval.faster_eval_api_cpp as cpp
    except ImportError:
        return False
    if hasattr(cpp, "COCOevalEvaluateAccumulate") and hasattr(getattr(cpp, "Dataset", None), "load_tuple"):
        return True
    LOGGER.warning("WARNING: this faster-coco-eval lacks its in-memory C++ entry points; using COCOeval_faster")
    return False


def _coco_params(n_images: int, n_classes: int) -> SimpleNamespace:
    """The COCOeval parameter object faster-coco-eval's C++ reads (attribute names as in pycocotools)."""
    return SimpleNamespace(
        iouType="bbox",
        iouThrs=IOU_THRESHOLDS.tolist(),
        recThrs=RECALL_THRESHOLDS.tolist(),
        maxDets=list(MAX_DETS),
        areaRng=[list(r) for r in AREA_RANGES],
        areaRngLbl=["all", "small", "medium", "large"],
        imgIds=list(range(n_images)),
        catIds=list(range(n_classes)),
        useCats=1,
    )


def _empty_arrays(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's precision [T,R,K,A,M] and recall [T,K,A,M], all -1 (undefined)."""
    t, r, a, m = len(IOU_THRESHOLDS), len(RECALL_THRESHOLDS), len(AREA_RANGES), len(MAX_DETS)
    return np.full((t, r, n_classes, a, m), -1.0), np.full((t, n_classes, a, m), -1.0)


def _accumulate_fast(
    n_images: int, n_classes: int, gt: _Boxes, dt: _Boxes, d: np.ndarray, g: np.ndarray, iou: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's precision and recall arrays from faster-coco-eval's C++ matching and accumulation.

    gt and dt are sorted by class, then image, dt by decreasing score within an (image, class) pair and cut
    to the top MAX_DETS[-1]; (d, g, iou) are their same-pair candidates ordered by d then g, so the IoUs of
    a pair form one contiguous (detections x ground truth) block. The protocol treats classes independently,
    so each class is scored on its own, over only the images where it occurs: the C++ then does no work for
    the (image, class) cells that are empty, which are most of them. The C++ releases the GIL for much of its
    work, so classes are scored on a few threads while the next ones are prepared.
    """
    import faster_coco_eval.faster_eval_api_cpp as cpp

    precision, recall = _empty_arrays(n_classes)
    gt_bounds = np.searchsorted(gt.cls, np.arange(n_classes + 1))
    dt_bounds = np.searchsorted(dt.cls, np.arange(n_classes + 1))
    scored = np.flatnonzero(np.bincount(gt.cls[~gt.crowd], minlength=n_classes)[:n_classes])  # others stay -1
    # One IoU block per (image, class) pair holding both ground truth and detections.
    block_pair, block_start, block_size = _runs((dt.cls * n_images + dt.image)[d])
    gt_pairs, _, gt_count = _runs(gt.cls * n_images + gt.image)
    block_gt = gt_count[np.searchsorted(gt_pairs, block_pair)]  # ground truth per block: its width
    block_bounds = np.searchsorted(block_pair, np.arange(n_classes + 1) * n_images)
    with _gc_paused(), ThreadPoolExecutor(_worker_threads()) as pool:
        futures = {}
        for k in scored.tolist():
            gs, ge, ds, de = gt_bounds[k], gt_bounds[k + 1], dt_bounds[k], dt_bounds[k + 1]
            images = np.union1d(gt.image[gs:ge], dt.image[ds:de])  # sorted, as pycocotools orders images
            gt_dicts = [
                {"id": i, "area": a, "iscrowd": c, "ignore": c}  # ids > 0: the C++ reads 0 as unmatched
                for i, a, c in zip(range(gs + 1, ge + 1), gt.area[gs:ge].tolist(), gt.crowd[gs:ge].tolist())
            ]
            dt_dicts = [
                {"id": i, "area": a, "score": s}
                for i, a, s in zip(range(ds + 1, de + 1), dt.area[ds:de].tolist(), dt.score[ds:de].tolist())
            ]
            gt_set, dt_set = cpp.Dataset(), cpp.Dataset()
            gt_set.load_tuple((1, _groups(np.searchsorted(images, gt.image[gs:ge]), gt_dicts)))
            dt_set.load_tuple((1, _groups(np.searchsorted(images, dt.image[ds:de]), dt_dicts)))
            empty: list = []
            ious = [[empty] for _ in range(len(images))]
            b0, b1 = block_bounds[k], block_bounds[k + 1]
            for local, s, n, ng in zip(
                np.searchsorted(images, block_pair[b0:b1] - k * n_images).tolist(),
                block_start[b0:b1].tolist(),
                block_size[b0:b1].tolist(),
                block_gt[b0:b1].tolist(),
            ):
                ious[local][0] = iou[s : s + n].reshape(n // ng, ng).tolist()
            params = _coco_params(len(images), 1)
            futures[k] = pool.submit(
                cpp.COCOevalEvaluateAccumulate, params, ious, gt_set, dt_set, params.imgIds, params.catIds, True
            )
        for k, future in futures.items():
            result = future.result()
            precision[:, :, k] = result["precision"][:, :, 0]
            recall[:, k] = result["recall"][:, 0]
    return precision, recall


def _worker_threads() -> int:
    """Threads for the per-class C++ calls: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def _groups(local_image: np.ndarray, dicts: list[dict]) -> list[tuple]:
    """(image, class 0, annotations) per image, the bulk form faster-coco-eval's Dataset loads."""
    images, starts, counts = _runs(local_image)
    slices = map(slice, starts.tolist(), (starts + counts).tolist())
    return list(zip(images.astype(np.float64).tolist(), [0.0] * len(images), map(dicts.__getitem__, slices)))


def _accumulate_public(n_images: int, n_classes: int, gt: _Boxes, dt: _Boxes) -> tuple[np.ndarray, np.ndarray]:
    """The same through faster-coco-eval's public COCO/COCOeval_faster classes (slower; the reference path)."""
    from faster_coco_eval import COCO, COCOeval_faster

    def coco(annotations: list[dict]) -> COCO:
        api = COCO()
        api.dataset = {
            "images": [{"id": i} for i in range(n_images)],
            "categories": [{"id": c} for c in range(n_classes)],
            "annotations": annotations,
        }
        api.createIndex()
        return api

    gt_anns = [
        {"id": i + 1, "image_id": im, "category_id": c, "bbox": b, "area": a, "iscrowd": int(cr)}
        for i, (im, c, b, a, cr) in enumerate(
            zip(gt.image.tolist(), gt.cls.tolist(), gt.xywh.tolist(), gt.area.tolist(), gt.crowd.tolist())
        )
    ]
    dt_anns = [
        {"id": i + 1, "image_id": im, "category_id": c, "bbox": b, "area": a, "score": s, "iscrowd": 0}
        for i, (im, c, b, a, s) in enumerate(
            zip(dt.image.tolist(), dt.cls.tolist(), dt.xywh.tolist(), dt.area.tolist(), dt.score.tolist())
        )
    ]
    evaluator = COCOeval_faster(coco(gt_anns), coco(dt_anns), "bbox")
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator.evaluate()
        evaluator.accumulate()
    return np.asarray(evaluator.eval["precision"]), np.asarray(evaluator.eval["recall"])


def _summarize(precision: np.ndarray, recall: np.ndarray) -> np.ndarray:
    """pycocotools' 12 numbers: means of the valid (> -1) entries of precision [T,R,K,A,M] / recall [T,K,A,M]."""

    def mean(s: np.ndarray) -> float:
        s = s[s > -1]
        return float(np.mean(s)) if s.size else -1.0

    t50 = np.flatnonzero(np.isclose(IOU_THRESHOLDS, 0.5))
    t75 = np.flatnonzero(np.isclose(IOU_THRESHOLDS, 0.75))
    m100 = MAX_DETS.index(100)
    return np.array(
        [
            mean(precision[:, :, :, 0, m100]),
            mean(precision[t50][:, :, :, 0, m100]),
            mean(precision[t75][:, :, :, 0, m100]),
            *(mean(precision[:, :, :, a, m100]) for a in (1, 2, 3)),
            *(mean(recall[:, :, 0, m]) for m in range(len(MAX_DETS))),
            *(mean(recall[:, :, a, m100]) for a in (1, 2, 3)),
        ]
    )


def smooth(y: np.ndarray, fraction: float = 0.05) -> np.ndarray:
    """Moving average over a window of about 2 * fraction of the points, edges padded with the end values."""
    window = round(len(y) * fraction * 2) // 2 + 1  # odd
    pad = window // 2
    padded = np.concatenate((np.full(pad, y[0]), y, np.full(pad, y[-1])))
    return np.convolve(padded, np.ones(window) / window, mode="valid")


def _pr_curves(tp: np.ndarray, conf: np.ndarray, cls: np.ndarray, n_gt: np.ndarray) -> tuple[np.ndarray, ...]:
    """YOLOv5's P/R/F1 against confidence per class, sampled on 1000 confidences from 0 to 1.

    Detections come grouped by class, by decreasing confidence within a class. Returns conf_grid, p_curve,
    r_curve, f1_curve (rows of classes without ground truth are NaN).
    """
    eps = 1e-16
    n_classes = len(n_gt)
    grid = np.linspace(0, 1, 1000)
    p_curve, r_curve = np.zeros((n_classes, len(grid))), np.zeros((n_classes, len(grid)))
    bounds = np.searchsorted(cls, np.arange(n_classes + 1))
    for c in np.flatnonzero(n_gt > 0):
        s, e = bounds[c], bounds[c + 1]
        if s == e:
            continue  # no detections: P = R = 0 everywhere
        true_pos = np.cumsum(tp[s:e])
        recall = true_pos / (n_gt[c] + eps)
        precision = true_pos / np.arange(1, e - s + 1)
        r_curve[c] = np.interp(-grid, -conf[s:e], recall, left=0)
        p_curve[c] = np.interp(-grid, -conf[s:e], precision, left=1)
    f1_curve = 2 * p_curve * r_curve / (p_curve + r_curve + eps)
    absent = n_gt == 0
    p_curve[absent] = r_curve[absent] = f1_curve[absent] = np.nan
    return grid, p_curve, r_curve, f1_curve


def _true_positives_at_50(
    n_det: int, d: np.ndarray, g: np.ndarray, iou: np.ndarray, crowd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """YOLOv5's true positives: detections matched one-to-one to non-crowd ground truth at IoU >= 0.5.

    Also returns which detections count at all: an unmatched detection on a crowd region is ignored, as the
    COCO protocol ignores it.
    """
    hit = (iou >= 0.5) & ~crowd[g]
    tp = np.zeros(n_det, bool)
    tp[_one_to_one(d[hit], g[hit], iou[hit], gt_prefers_iou=False)[0]] = True
    on_crowd = np.zeros(n_det, bool)
    on_crowd[d[(iou >= 0.5) & crowd[g]]] = True
    return tp, tp | ~on_crowd


def _evaluate(
    n_images: int,
    names: Sequence[str],
    category_ids: Sequence[int],
    gt: _Boxes,
    dt: _Boxes,
    confusion: bool = False,
) -> DetectionMetrics:
    """Score detections against ground truth.

    Image fields of both are indices 0..n_images-1 of the sorted image ids; classes are indices into names.
    """
    n_classes = len(names)
    if n_images == 0:
        raise MetricsError("no images to evaluate")
    gt, dt, by_class = _protocol_order(n_images, n_classes, gt, dt)
    gt_pair = gt.cls * n_images + gt.image
    # Same-pair IoUs of every detection: the COCO arrays and YOLOv5's true positives both start from them.
    d, g = _pairs_with_equal_keys(dt.cls * n_images + dt.image, gt_pair)
    iou = _coco_iou(dt.xywh[d], gt.xywh[g], gt.crowd[g])
    precision, recall = _coco_arrays(n_images, n_classes, gt, dt, d, g, iou)
    area_all, m100 = 0, MAX_DETS.index(100)
    per_class = precision[:, :, :, area_all, m100]  # T, R, K
    present = (per_class > -1).all(axis=(0, 1))
    with np.errstate(invalid="ignore"):
        ap = np.where(present, per_class.mean(axis=(0, 1)), np.nan)
        ap50 = np.where(present, per_class[0].mean(axis=0), np.nan)

    tp, counted = _true_positives_at_50(len(dt), d, g, iou, gt.crowd)
    instances = np.bincount(gt.cls[~gt.crowd], minlength=n_classes)[:n_classes]
    pr = by_class[counted[by_class]]
    grid, p_curve, r_curve, f1_curve = _pr_curves(tp[pr], dt.score[pr], dt.cls[pr], instances)
    best = int(smooth(np.nanmean(f1_curve, 0), 0.1).argmax()) if present.any() else 0
    return DetectionMetrics(
        names=list(names),
        category_ids=list(category_ids),
        images=n_images,
        instances=instances,
        class_images=np.bincount(_runs(gt_pair[~gt.crowd])[0] // n_images, minlength=n_classes)[:n_classes],
        stats=_summarize(precision, recall),
        ap50=ap50,
        ap=ap,
        precision=p_curve[:, best],
        recall=r_curve[:, best],
        best_conf=float(grid[best]),
        conf_grid=grid,
        p_curve=p_curve,
        r_curve=r_curve,
        f1_curve=f1_curve,
        pr_precision=np.where(present[:, None], precision[0, :, :, area_all, m100].T, np.nan),
        confusion=_confusion_matrix(n_classes, gt, dt.take(counted)) if confusion else None,
    )


def _protocol_order(n_images: int, n_classes: int, gt: _Boxes, dt: _Boxes) -> tuple[_Boxes, _Boxes, np.ndarray]:
    """Both sides sorted by class, then image, detections then by decreasing score; and the P/R curves' order.

    Stable sorts keep ties in input order, as pycocotools does. The curves want detections by class, then
    decreasing score (images mixed): returned as positions in the sorted detections, sharing the score sort.
    """
    gt = gt.take(np.argsort(gt.cls * n_images + gt.image, kind="stable"))
    by_score = np.argsort(-dt.score, kind="stable")
    order = by_score[np.argsort((dt.cls * n_images + dt.image)[by_score], kind="stable")]
    by_class = by_score[np.argsort(dt.cls[by_score].astype(np.int16 if n_classes < 2**15 else np.int64), kind="stable")]
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return gt, dt.take(order), position[by_class]


def _coco_arrays(
    n_images: int, n_classes: int, gt: _Boxes, dt: _Boxes, d: np.ndarray, g: np.ndarray, iou: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's precision [T,R,K,A,M] and recall [T,K,A,M]: the C++ core when available, else the public API.

    The protocol only looks at the top MAX_DETS[-1] detections of each (image, class) pair.
    """
    if not _fast_core_available():
        return _accumulate_public(n_images, n_classes, gt, dt)
    _, starts, counts = _runs(dt.cls * n_images + dt.image)
    top = np.arange(len(dt)) - np.repeat(starts, counts) < MAX_DETS[-1]
    kept = np.cumsum(top) - 1  # new index of each kept detection
    edge = top[d]
    return _accumulate_fast(n_images, n_classes, gt, dt.take(top), kept[d[edge]], g[edge], iou[edge])


def _confusion_matrix(n_classes: int, gt: _Boxes, counted: _Boxes) -> np.ndarray:
    """YOLOv5's confusion matrix of the counted detections; crowd regions (and detections on them) stay out."""
    cm = ConfusionMatrix(n_classes)
    solid = ~gt.crowd
    cm.update(
        gt.image[solid],
        _xywh_to_xyxy(gt.xywh[solid]),
        gt.cls[solid],
        counted.image,
        _xywh_to_xyxy(counted.xywh),
        counted.score,
        counted.cls,
    )
    return cm.matrix


def _xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    return np.concatenate((b[:, :2], b[:, :2] + b[:, 2:]), 1)


# ----------------------------------------------------------------------------------------------------------------
# The accumulator test.py fills


class CocoEvaluator:
    """Collects ground truth and detections image by image, then scores them with the COCO protocol.

    Boxes are corner boxes (x1, y1, x2, y2) in original-image pixels; classes are indices into names.
    category_ids maps class indices to the ids written to COCO files (default: the indices themselves).
    """

    def __init__(self, names: Sequence[str], category_ids: Sequence[int] | None = None):
        self.names = [str(n) for n in names]
        self.category_ids = list(range(len(self.names))) if category_ids is None else [int(c) for c in category_ids]
        if len(self.category_ids) != len(self.names):
            raise ValueError(f"{len(self.names)} class names but {len(self.category_ids)} category ids")
        self._images: dict[int, tuple[int, int] | None] = {}  # id -> (height, width) when known
        self._gt: dict[str, list[np.ndarray]] = {k: [] for k in ("image", "cls", "xyxy", "area", "crowd")}
        self._dt: dict[str, list[np.ndarray]] = {k: [] for k in ("image", "cls", "xyxy", "score")}

    def __len__(self) -> int:
        return len(self._images)

    @property
    def image_ids(self) -> list[int]:
        """Ids of the images added so far, sorted."""
        return sorted(self._images)

    def add(
        self,
        image_id: int,
        gt_boxes,
        gt_classes,
        det_boxes,
        det_scores,
        det_classes,
        gt_areas=None,
        gt_crowd=None,
        shape: tuple[int, int] | None = None,
    ) -> None:
        """Record one image: its ground truth (areas default to box areas, crowd to False) and its detections."""
        image_id = int(image_id)
        if image_id in self._images:
            raise ValueError(f"image id {image_id} was added twice")
        self._images[image_id] = None if shape is None else (int(shape[0]), int(shape[1]))
        gt_xyxy = _numpy(gt_boxes).reshape(-1, 4)
        det_xyxy = _numpy(det_boxes).reshape(-1, 4)
        n_gt, n_det = len(gt_xyxy), len(det_xyxy)
        gt, dt = self._gt, self._dt
        gt["image"].append(np.full(n_gt, image_id, np.int64))
        gt["cls"].append(_numpy(gt_classes).reshape(n_gt))
        gt["xyxy"].append(gt_xyxy)
        gt["area"].append(np.full(n_gt, np.nan) if gt_areas is None else _numpy(gt_areas).reshape(n_gt))
        gt["crowd"].append(np.zeros(n_gt, bool) if gt_crowd is None else _numpy(gt_crowd).reshape(n_gt))
        dt["image"].append(np.full(n_det, image_id, np.int64))
        dt["cls"].append(_numpy(det_classes).reshape(n_det))
        dt["xyxy"].append(det_xyxy)
        dt["score"].append(_numpy(det_scores).reshape(n_det))

    def _collect(self) -> tuple[np.ndarray, _Boxes, _Boxes]:
        """Sorted image ids and the flat ground truth and (JSON-rounded) detections."""
        ids = np.array(sorted(self._images), dtype=np.int64)

        def flat(parts: list[np.ndarray], dtype, width: int = 0) -> np.ndarray:
            empty = np.zeros((0, width) if width else 0, dtype)
            return np.concatenate([empty, *parts]).astype(dtype, copy=False)

        gt, dt = self._gt, self._dt
        gt_xyxy, dt_xyxy = flat(gt["xyxy"], np.float64, 4), flat(dt["xyxy"], np.float64, 4)
        gt_xywh = np.concatenate((gt_xyxy[:, :2], gt_xyxy[:, 2:] - gt_xyxy[:, :2]), 1)
        area = flat(gt["area"], np.float64)
        area = np.where(np.isnan(area), gt_xywh[:, 2] * gt_xywh[:, 3], area)  # box area where none was given
        dt_xywh = np.round(np.concatenate((dt_xyxy[:, :2], dt_xyxy[:, 2:] - dt_xyxy[:, :2]), 1), BOX_DECIMALS)
        gt_cls, dt_cls = flat(gt["cls"], np.int64), flat(dt["cls"], np.int64)
        for cls in (gt_cls, dt_cls):
            if cls.size and (cls.min() < 0 or cls.max() >= len(self.names)):
                raise ValueError(
                    f"class index {int(cls.min() if cls.min() < 0 else cls.max())} out of range "
                    f"0..{len(self.names) - 1}"
                )
        return (
            ids,
            _boxes(flat(gt["image"], np.int64), gt_cls, gt_xywh, area, flat(gt["crowd"], bool)),
            _boxes(
                flat(dt["image"], np.int64),
                dt_cls,
                dt_xywh,
                score=np.round(flat(dt["score"], np.float64), SCORE_DECIMALS),
            ),
        )

    def evaluate(self, confusion: bool = False) -> DetectionMetrics:
        """The 12 COCO numbers, per-class AP, YOLOv5-style P/R and, if asked, the confusion matrix."""
        ids, gt, dt = self._collect()
        gt.image, dt.image = np.searchsorted(ids, gt.image), np.searchsorted(ids, dt.image)
        return _evaluate(len(ids), self.names, self.category_ids, gt, dt, confusion=confusion)

    def predictions(self) -> list[dict]:
        """Detections in COCO results format (bbox x, y, w, h), in the order they were added."""
        _, _, dt = self._collect()
        cat_ids = np.asarray(self.category_ids)[dt.cls].tolist()
        return [
            {"image_id": i, "category_id": c, "bbox": b, "score": s}
            for i, c, b, s in zip(dt.image.tolist(), cat_ids, dt.xywh.tolist(), dt.score.tolist())
        ]

    def ground_truth(self) -> dict:
        """The ground truth as a COCO annotations dict (full-precision floats, so evaluation round-trips)."""
        _, gt, _ = self._collect()
        images = []
        for image_id, shape in self._images.items():
            images.append(
                {"id": image_id, "file_name": str(image_id)}
                if shape is None
                else {"id": image_id, "file_name": str(image_id), "height": shape[0], "width": shape[1]}
            )
        cat_ids = np.asarray(self.category_ids)[gt.cls].tolist()
        annotations = [
            {"id": n, "image_id": i, "category_id": c, "bbox": b, "area": a, "iscrowd": int(cr)}
            for n, (i, c, b, a, cr) in enumerate(
                zip(gt.image.tolist(), cat_ids, gt.xywh.tolist(), gt.area.tolist(), gt.crowd.tolist()), 1
            )
        ]
        categories = [{"id": c, "name": n} for c, n in zip(self.category_ids, self.names)]
        return {"images": images, "annotations": annotations, "categories": categories}


# ----------------------------------------------------------------------------------------------------------------
# COCO JSON files


def _read_json(path: str | Path, what: str):
    path = Path(path)
    if not path.is_file():
        raise MetricsError(f"{what} not found: {path}")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetricsError(f"cannot read {what} {path}: {e}") from None


@dataclass
class CocoGroundTruth:
    """A COCO annotations file as arrays: categories sorted by id, class index = position among them."""

    path: Path
    image_ids: np.ndarray  # (I,) sorted unique image ids
    category_ids: list[int]
    names: list[str]
    boxes: _Boxes  # image = image id, cls = class index
    file_names: dict[int, str] = field(default_factory=dict)  # image id -> the images entry's file_name, if any
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # image id -> (height, width), if given

    def __post_init__(self):
        self._order = np.argsort(self.boxes.image, kind="stable")  # rows grouped by image, for image()
        self._sorted_images = self.boxes.image[self._order]

    def image(self, image_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Ground truth of one image: corner boxes (n, 4), category ids, areas, crowd flags."""
        lo, hi = np.searchsorted(self._sorted_images, [image_id, image_id + 1])
        rows, b = self._order[lo:hi], self.boxes
        return _xywh_to_xyxy(b.xywh[rows]), np.asarray(self.category_ids)[b.cls[rows]], b.area[rows], b.crowd[rows]


def _index_in(sorted_ids: Sequence[int], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of values in sorted_ids, and which values are there at all."""
    ids = np.asarray(sorted_ids, np.int64)
    pos = np.searchsorted(ids, values)
    found = np.append(ids, np.iinfo(np.int64).min)[np.minimum(pos, len(ids))] == values
    return pos, found


def _bbox_array(boxes: list, path: str | Path, what: str) -> np.ndarray:
    """(n, 4) finite float64 boxes, or MetricsError naming the first entry that is not [x, y, w, h]."""
    for n, box in enumerate(boxes):
        if not isinstance(box, (list, tuple)) or len(box) != 4:
            raise MetricsError(f"{path}: {what} {n} has bbox {str(box)[:40]}, not [x, y, w, h]")
    xywh = np.array(boxes, dtype=np.float64).reshape(-1, 4)
    bad = ~np.isfinite(xywh).all(1)
    if bad.any():
        raise MetricsError(f"{path}: {what} {int(np.flatnonzero(bad)[0])} has a non-finite bbox")
    return xywh


def _first_repeat(values: list[int]) -> int:
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return values[0]


def load_coco_ground_truth(path: str | Path) -> CocoGroundTruth:
    """Read a COCO instances JSON (images, annotations with bbox/area/iscrowd, categories)."""
    data = _read_json(path, "COCO annotations")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("images"), list)
        or not isinstance(data.get("categories"), list)
    ):
        found = f"keys {', '.join(map(str, data))}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise MetricsError(
            f"{path} is not a COCO annotations file (it needs 'images' and 'categories' lists; found {found})"
        )
    if not data["images"]:
        raise MetricsError(f"{path}: its 'images' list is empty")
    try:
        id_list = [int(im["id"]) for im in data["images"]]
        images = np.unique(np.array(id_list, dtype=np.int64))
        file_names = {i: str(im["file_name"]) for i, im in zip(id_list, data["images"]) if im.get("file_name")}
        sizes = {
            i: (int(im["height"]), int(im["width"]))
            for i, im in zip(id_list, data["images"])
            if isinstance(im.get("height"), (int, float)) and isinstance(im.get("width"), (int, float))
        }
        cats = sorted({int(c["id"]): str(c.get("name", c["id"])) for c in data["categories"]}.items())
        anns = data.get("annotations", [])
        category_ids = [c for c, _ in cats]
        cat_of = np.array([int(a["category_id"]) for a in anns], dtype=np.int64)
        cls, known = _index_in(category_ids, cat_of)
        if not known.all():
            raise MetricsError(
                f"{path}: annotations name category ids missing from 'categories' (e.g. {int(cat_of[~known][0])})"
            )
        xywh = _bbox_array([a["bbox"] for a in anns], path, "annotation")
        area = np.array([a["area"] if "area" in a else a["bbox"][2] * a["bbox"][3] for a in anns], dtype=np.float64)
        crowd = np.array([bool(a.get("iscrowd", 0)) for a in anns], dtype=bool)
        image = np.array([int(a["image_id"]) for a in anns], dtype=np.int64)
    except MetricsError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MetricsError(f"{path} is not a COCO annotations file ({e.__class__.__name__}: {e})") from None
    unknown = np.setdiff1d(image, images)
    if unknown.size:
        raise MetricsError(f"{path}: annotations name image ids missing from 'images' (e.g. {int(unknown[0])})")
    if images.size != len(id_list):
        raise MetricsError(f"{path}: its 'images' list repeats image ids (e.g. {_first_repeat(id_list)})")
    return CocoGroundTruth(
        Path(path),
        images,
        category_ids,
        [n for _, n in cats],
        _boxes(image, cls, xywh, area=area, crowd=crowd),
        file_names,
        sizes,
    )


def load_coco_predictions(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read a COCO results JSON: image ids, category ids, xywh boxes, scores (file order)."""
    data = _read_json(path, "predictions JSON")
    if not isinstance(data, list):
        raise MetricsError(f"{path}: a COCO results file is a list of detections, found a {type(data).__name__}")
    try:
        image = np.array([int(p["image_id"]) for p in data], dtype=np.int64)
        cat = np.array([int(p["category_id"]) for p in data], dtype=np.int64)
        xywh = _bbox_array([p["bbox"] for p in data], path, "detection")
        score = np.array([p["score"] for p in data], dtype=np.float64).reshape(len(data))
    except MetricsError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MetricsError(f"{path}: not COCO detection results ({e.__class__.__name__}: {e})") from None
    if not np.isfinite(score).all():
        raise MetricsError(f"{path}: detection {int(np.flatnonzero(~np.isfinite(score))[0])} has a non-finite score")
    return image, cat, xywh, score


def evaluate_coco_json(
    gt_path: str | Path, pred_path: str | Path, map_80_to_91: bool | None = None, confusion: bool = False
) -> DetectionMetrics:
    """Score a COCO results file against a COCO annotations file over all images of the annotations.

    map_80_to_91 translates category ids 0-79 to the official COCO ids; None does so when the file clearly uses
    class indices against COCO's 80 categories.
    """
    gt = load_coco_ground_truth(gt_path)
    image, cat, xywh, score = load_coco_predictions(pred_path)
    unknown = np.setdiff1d(image, gt.image_ids)
    if unknown.size:
        examples = ", ".join(str(i) for i in unknown[:5])
        raise MetricsError(f"{pred_path}: {unknown.size} image id(s) not in {gt_path} (e.g. {examples})")
    if map_80_to_91 is None:
        map_80_to_91 = (
            gt.category_ids == list(COCO80_TO_91)
            and cat.size > 0
            and cat.min() >= 0
            and cat.max() < 80
            and not np.isin(cat, COCO80_TO_91).all()
        )
        if map_80_to_91:
            LOGGER.info(f"{pred_path}: category ids 0-79 read as class indices, mapped to COCO ids 1-90")
    if map_80_to_91:
        cat = np.asarray(COCO80_TO_91)[cat]
    cls, known = _index_in(gt.category_ids, cat)
    if not known.all():
        LOGGER.warning(
            f"WARNING: {pred_path}: {int((~known).sum())} detection(s) with category ids not in "
            f"{gt_path} ignored (e.g. {int(cat[~known][0])})"
        )
    dt = _boxes(image[known], cls[known], xywh[known], score=score[known])
    boxes = gt.boxes
    gt_idx = _Boxes(
        np.searchsorted(gt.image_ids, boxes.image), boxes.cls, boxes.xywh, boxes.area, boxes.crowd, boxes.score
    )
    dt.image = np.searchsorted(gt.image_ids, dt.image)
    return _evaluate(len(gt.image_ids), gt.names, gt.category_ids, gt_idx, dt, confusion=confusion)


def pycocotools_stats(
    gt: str | Path | dict, predictions: str | Path | list, image_ids: Sequence[int] | None = None
) -> np.ndarray:
    """pycocotools' own 12 numbers (the reference implementation), quietly; optionally over some images only."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    preds = predictions if isinstance(predictions, list) else _read_json(predictions, "predictions JSON")
    if not isinstance(preds, list) or not preds:
        raise MetricsError("pycocotools needs a non-empty list of detections")
    with contextlib.redirect_stdout(io.StringIO()):
        if isinstance(gt, dict):
            coco_gt = COCO()
            coco_gt.dataset = gt
            coco_gt.createIndex()
        else:
            coco_gt = COCO(str(gt))
        try:
            coco_dt = coco_gt.loadRes([dict(p) for p in preds])  # copies: loadRes edits the dicts it gets
        except AssertionError:
            raise MetricsError("pycocotools: predictions name image ids that are not in the ground truth") from None
        evaluator = COCOeval(coco_gt, coco_dt, "bbox")
        if image_ids is not None:
            evaluator.params.imgIds = [int(i) for i in image_ids]
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.asarray(evaluator.stats, dtype=np.float64)


def format_coco_stats(stats: Sequence[float]) -> str:
    """The 12 numbers as pycocotools prints them, one per line."""
    rows = [
        ("Average Precision", "0.50:0.95", "all", 100),
        ("Average Precision", "0.50", "all", 100),
        ("Average Precision", "0.75", "all", 100),
        ("Average Precision", "0.50:0.95", "small", 100),
        ("Average Precision", "0.50:0.95", "medium", 100),
        ("Average Precision", "0.50:0.95", "large", 100),
        ("Average Recall", "0.50:0.95", "all", 1),
        ("Average Recall", "0.50:0.95", "all", 10),
        ("Average Recall", "0.50:0.95", "all", 100),
        ("Average Recall", "0.50:0.95", "small", 100),
        ("Average Recall", "0.50:0.95", "medium", 100),
        ("Average Recall", "0.50:0.95", "large", 100),
    ]
    lines = []
    for (title, iou, area, max_det), value in zip(rows, stats):
        kind = "(AP)" if title.startswith("Average Precision") else "(AR)"
        lines.append(f" {title:<18} {kind} @[ IoU={iou:<9} | area={area:>6s} | maxDets={max_det:>3d} ] = {value:0.3f}")
    return "\n".join(lines)
