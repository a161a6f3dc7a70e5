"""The COCO protocol on in-memory arrays: per-image matching and accumulation through faster-coco-eval's C++
core (a public-API fallback), the 12 summary numbers exactly as pycocotools computes them, and the P/R curves.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np

from utils.errors import MetricsError
from utils.eval.matching import (
    Boxes,
    ConfusionMatrix,
    coco_iou,
    match_one_to_one,
    pairs_with_equal_keys,
    runs_of,
    xywh_to_xyxy,
)
from utils.eval.metrics import DetectionMetrics
from utils.log import LOGGER

# COCO protocol parameters, built exactly as pycocotools builds them so thresholds compare bit for bit.
IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)

RECALL_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)

AREA_RANGES = ((0.0, 1e5**2), (0.0, 32.0**2), (32.0**2, 96.0**2), (96.0**2, 1e5**2))  # all, small, medium, large

MAX_DETS = (1, 10, 100)


def as_numpy(x) -> np.ndarray:
    """A numpy array from a numpy array, list or (CPU/GPU) torch tensor."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = (x.double() if x.is_floating_point() else x).numpy()  # also covers bfloat16, which numpy lacks
    return np.asarray(x)


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
    n_images: int, n_classes: int, gt: Boxes, dt: Boxes, d: np.ndarray, g: np.ndarray, iou: np.ndarray
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
    block_pair, block_start, block_size = runs_of((dt.cls * n_images + dt.image)[d])
    gt_pairs, _, gt_count = runs_of(gt.cls * n_images + gt.image)
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
    images, starts, counts = runs_of(local_image)
    slices = map(slice, starts.tolist(), (starts + counts).tolist())
    return list(zip(images.astype(np.float64).tolist(), [0.0] * len(images), map(dicts.__getitem__, slices)))


def _accumulate_public(n_images: int, n_classes: int, gt: Boxes, dt: Boxes) -> tuple[np.ndarray, np.ndarray]:
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
    tp[match_one_to_one(d[hit], g[hit], iou[hit], gt_prefers_iou=False)[0]] = True
    on_crowd = np.zeros(n_det, bool)
    on_crowd[d[(iou >= 0.5) & crowd[g]]] = True
    return tp, tp | ~on_crowd


def evaluate_arrays(
    n_images: int,
    names: Sequence[str],
    category_ids: Sequence[int],
    gt: Boxes,
    dt: Boxes,
    confusion: bool = False,
    pair_iou: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> DetectionMetrics:
    """Score detections against ground truth.

    Image fields of both are indices 0..n_images-1 of the sorted image ids; classes are indices into names.
    pair_iou(det indices, gt indices) gives the IoUs of same-image, same-class pairs (indices into dt and gt as
    given) in place of the boxes' (the 'segm' evaluation: mask IoUs; areas stay those of gt and dt).
    """
    n_classes = len(names)
    if n_images == 0:
        raise MetricsError("no images to evaluate")
    gt_order, dt_order, by_class = _protocol_order(n_images, n_classes, gt, dt)
    gt, dt = gt.take(gt_order), dt.take(dt_order)
    gt_pair = gt.cls * n_images + gt.image
    # Same-pair IoUs of every detection: the COCO arrays and YOLOv5's true positives both start from them.
    d, g = pairs_with_equal_keys(dt.cls * n_images + dt.image, gt_pair)
    if pair_iou is None:
        iou = coco_iou(dt.xywh[d], gt.xywh[g], gt.crowd[g])
    else:
        iou = np.asarray(pair_iou(dt_order[d], gt_order[g]), np.float64).reshape(len(d))
    precision, recall = _coco_arrays(n_images, n_classes, gt, dt, d, g, iou, boxes=pair_iou is None)
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
        class_images=np.bincount(runs_of(gt_pair[~gt.crowd])[0] // n_images, minlength=n_classes)[:n_classes],
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


def _protocol_order(n_images: int, n_classes: int, gt: Boxes, dt: Boxes) -> tuple[np.ndarray, ...]:
    """The orders of both sides: by class, then image, detections then by decreasing score; and the P/R curves'.

    Stable sorts keep ties in input order, as pycocotools does. The curves want detections by class, then
    decreasing score (images mixed): returned as positions in the sorted detections, sharing the score sort.
    """
    gt_order = np.argsort(gt.cls * n_images + gt.image, kind="stable")
    by_score = np.argsort(-dt.score, kind="stable")
    order = by_score[np.argsort((dt.cls * n_images + dt.image)[by_score], kind="stable")]
    by_class = by_score[np.argsort(dt.cls[by_score].astype(np.int16 if n_classes < 2**15 else np.int64), kind="stable")]
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return gt_order, order, position[by_class]


def _coco_arrays(
    n_images: int,
    n_classes: int,
    gt: Boxes,
    dt: Boxes,
    d: np.ndarray,
    g: np.ndarray,
    iou: np.ndarray,
    boxes: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's precision [T,R,K,A,M] and recall [T,K,A,M]: the C++ core when available, else the public API
    (boxes only: it computes its own box IoUs).

    The protocol only looks at the top MAX_DETS[-1] detections of each (image, class) pair.
    """
    if not _fast_core_available():
        if not boxes:
            raise MetricsError("mask metrics need faster-coco-eval's C++ core (faster-coco-eval 1.7 or later)")
        return _accumulate_public(n_images, n_classes, gt, dt)
    _, starts, counts = runs_of(dt.cls * n_images + dt.image)
    top = np.arange(len(dt)) - np.repeat(starts, counts) < MAX_DETS[-1]
    kept = np.cumsum(top) - 1  # new index of each kept detection
    edge = top[d]
    return _accumulate_fast(n_images, n_classes, gt, dt.take(top), kept[d[edge]], g[edge], iou[edge])


def _confusion_matrix(n_classes: int, gt: Boxes, counted: Boxes) -> np.ndarray:
    """YOLOv5's confusion matrix of the counted detections; crowd regions (and detections on them) stay out."""
    cm = ConfusionMatrix(n_classes)
    solid = ~gt.crowd
    cm.update(
        gt.image[solid],
        xywh_to_xyxy(gt.xywh[solid]),
        gt.cls[solid],
        counted.image,
        xywh_to_xyxy(counted.xywh),
        counted.score,
        counted.cls,
    )
    return cm.matrix
