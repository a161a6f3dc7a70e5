"""Instance masks in the COCO protocol's 'segm' evaluation: the ground truth rasterised exactly as pycocotools
rasterises it (its frPyObjects on the polygons, merged per object; crowd RLEs as they are), each detection's mask
as a COCO RLE at the original resolution, and the mask IoUs of one image's same-class pairs (pycocotools' mask.iou:
a crowd region divides by the detection's area, as COCO does).

Only the masks of detections that can be matched (detections_that_can_match) are made and encoded: the others'
IoUs count as 0. predictions.json wants every detection's.

Memory: a detection's mask exists only as its box's boolean crop, one at a time, then as its RLE (a few hundred
bytes); the evaluator keeps the pairs' IoUs, and the RLEs only when predictions.json is written. Peak memory per
image is one box's crop and float logits (at most 5 bytes per pixel of the largest box), whatever the number of
detections; over a run it grows with the number of same-class (detection, ground truth) pairs (16 bytes each).
"""

from __future__ import annotations

import math

import numpy as np

from utils.errors import MetricsError


def _mask_utils():
    from pycocotools import mask as mask_utils  # a requirement; imported late as the rest of utils/eval does

    return mask_utils


def rle_area(rles: list[dict]) -> np.ndarray:
    """Pixel areas of COCO RLEs (float64, as COCO files store areas). One RLE a call: pycocotools 2.0.11's area() of
    a list of 256 or more raises OverflowError (it counts them in a uint8) under NumPy 2."""
    area = _mask_utils().area
    return np.asarray([area(rle) for rle in rles], np.float64).reshape(len(rles))


def rle_json(rle: dict) -> dict:
    """An RLE as a COCO JSON file holds it: counts as text."""
    counts = rle["counts"]
    return {"size": [int(v) for v in rle["size"]], "counts": counts.decode() if isinstance(counts, bytes) else counts}


def box_polygon(box) -> list[float]:
    """The outline of an x1, y1, x2, y2 box as a COCO polygon (what pycocotools gives a result without one)."""
    x1, y1, x2, y2 = (float(v) for v in box[:4])
    return [x1, y1, x1, y2, x2, y2, x2, y1]


def segmentation_rle(segmentation, height: int, width: int) -> dict:
    """pycocotools' annToRLE: polygons (one or several pieces) rasterised and merged, an uncompressed RLE compressed,
    a compressed one as it is. MetricsError for anything else, for non-finite vertices or an RLE of another size."""
    mask_utils = _mask_utils()
    if isinstance(segmentation, list):
        pieces = [p for p in segmentation if isinstance(p, list)]
        if not pieces or len(pieces) != len(segmentation) or not all(len(p) >= 4 for p in pieces):
            raise MetricsError("a polygon segmentation needs lists of at least 2 x, y pairs")
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for p in pieces for v in p):
            raise MetricsError("a polygon segmentation holds a vertex that is not a finite number")
        return _pycocotools(lambda: mask_utils.merge(mask_utils.frPyObjects(pieces, height, width)))
    if isinstance(segmentation, dict) and {"size", "counts"} <= set(segmentation):
        size = segmentation["size"]
        if not isinstance(size, list) or [int(v) for v in size] != [height, width]:
            raise MetricsError(f"an RLE segmentation of size {str(size)[:30]} on an image of {height}x{width}")
        counts = segmentation["counts"]
        if isinstance(counts, list):
            if not all(isinstance(c, int) and c >= 0 for c in counts) or sum(counts) != height * width:
                raise MetricsError(f"an RLE segmentation whose counts do not cover its {height}x{width} image")
            return _pycocotools(lambda: mask_utils.frPyObjects(segmentation, height, width))
        if isinstance(counts, str):
            return {"size": [height, width], "counts": counts.encode()}
    raise MetricsError(f"a segmentation that is neither polygons nor an RLE: {str(segmentation)[:40]}")


def _pycocotools(call):
    """call() with whatever pycocotools raises on a shape it does not take as one MetricsError line."""
    try:
        return call()
    except Exception as e:  # pycocotools raises bare Exceptions ("input type is not supported")
        raise MetricsError(f"pycocotools cannot read a segmentation: {str(e)[:80]}") from None


def label_segmentations(segments: list[np.ndarray] | None, boxes: np.ndarray, shape: tuple[int, int]) -> list:
    """COCO polygons (original pixels) of an image's label rows: each row's polygon (normalised to the image, as
    dataset.segments holds them), or its box's outline for a row without one (a box-only row)."""
    height, width = shape
    out = []
    for i, box in enumerate(np.asarray(boxes, np.float64).reshape(-1, 4)):
        polygon = None if segments is None or i >= len(segments) else np.asarray(segments[i], np.float64)
        if polygon is None or len(polygon) < 3:
            out.append([box_polygon(box)])
        else:
            out.append([(polygon.reshape(-1, 2) * (width, height)).reshape(-1).tolist()])
    return out


def rle_rectangles(rles: list[dict]) -> np.ndarray:
    """(n, 4) int x1, y1, x2, y2 (exclusive ends) of the pixels of each RLE's mask, read from the runs (pycocotools'
    toBbox; an empty mask is 0, 0, 0, 0)."""
    xywh = np.asarray(_mask_utils().toBbox(rles) if rles else np.zeros((0, 4)), np.int64).reshape(-1, 4)
    return np.concatenate((xywh[:, :2], xywh[:, :2] + xywh[:, 2:]), 1)


def detections_that_can_match(det_bounds: np.ndarray, det_cls, gt_rles: list[dict], gt_cls, gt_crowd) -> np.ndarray:
    """Indices of the detections whose masks can reach IoU 0.5, COCO's lowest threshold, with a ground truth of their
    class: the others are never matched (their IoUs count as 0), so their masks need not be made. A detection's mask
    lies in its pixel rectangle ((n, 4) x1, y1, x2, y2, exclusive ends), so its intersection with a mask is at most
    where that rectangle meets the mask's own, and the union at least the mask's area: IoU 0.5 needs that overlap to
    be half the mask's area. A crowd region (intersection over the detection's area) needs the rectangles to meet.
    From the RLEs' runs alone: nothing is decoded; 4096 ground truths at a time."""
    det = np.asarray(det_bounds, np.int64).reshape(-1, 4)[:, :, None]  # (n, 4, 1)
    det_cls, gt_cls, gt_crowd = np.asarray(det_cls, np.int64), np.asarray(gt_cls, np.int64), np.asarray(gt_crowd, bool)
    gt, gt_area = rle_rectangles(gt_rles), rle_area(gt_rles)
    can = np.zeros(len(det), bool)
    for start in range(0, len(gt), 4096):
        x1, y1, x2, y2 = gt[start : start + 4096, :, None].transpose(1, 2, 0)  # each (1, k)
        width = (np.minimum(det[:, 2], x2) - np.maximum(det[:, 0], x1)).clip(0)
        overlap = width * (np.minimum(det[:, 3], y2) - np.maximum(det[:, 1], y1)).clip(0)
        crowd, area = gt_crowd[start : start + 4096], gt_area[start : start + 4096]
        enough = np.where(crowd, overlap > 0, (overlap > 0) & (2 * overlap >= area))
        can |= (enough & (det_cls[:, None] == gt_cls[None, start : start + 4096])).any(1)
    return np.flatnonzero(can)


def same_class_ious(det_rles: dict, det_cls, gt_rles: list[dict], gt_cls, gt_crowd) -> tuple[np.ndarray, ...]:
    """Mask IoU of the (detection, ground truth) pairs of one image sharing a class: (det index, gt index, IoU), with
    pycocotools' mask.iou (crowd regions: intersection over the detection's area). det_rles maps detection indices
    to their RLEs; a detection left out has IoU 0 with every ground truth."""
    det_cls, gt_cls = np.asarray(det_cls, np.int64), np.asarray(gt_cls, np.int64)
    gt_crowd = np.asarray(gt_crowd, bool)
    given = np.fromiter(det_rles, np.int64, len(det_rles))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for c in np.intersect1d(det_cls[given], gt_cls).tolist():
        d, g = given[det_cls[given] == c], np.flatnonzero(gt_cls == c)
        iou = _mask_utils().iou([det_rles[i] for i in d], [gt_rles[j] for j in g], gt_crowd[g].astype(np.uint8))
        iou = np.asarray(iou, np.float64).reshape(len(d), len(g))
        parts.append((np.repeat(d, len(g)), np.tile(g, len(d)), iou.reshape(-1)))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return tuple(np.concatenate(p) for p in zip(*parts))


class PairIous:
    """The mask IoUs of same-class pairs, gathered image by image, looked up by (detection, ground truth) index."""

    def __init__(self):
        self.det: list[np.ndarray] = []
        self.gt: list[np.ndarray] = []
        self.iou: list[np.ndarray] = []

    def add(self, det_index: np.ndarray, gt_index: np.ndarray, iou: np.ndarray) -> None:
        self.det.append(np.asarray(det_index, np.int64))
        self.gt.append(np.asarray(gt_index, np.int64))
        self.iou.append(np.asarray(iou, np.float64))

    def lookup(self, n_gt: int):
        """A function (det indices, gt indices) -> their IoUs (0 for a pair never added) over n_gt ground truth."""
        width = max(n_gt, 1)
        keys = np.concatenate([np.zeros(0, np.int64), *(d * width + g for d, g in zip(self.det, self.gt))])
        values = np.concatenate([np.zeros(0), *self.iou])
        order = np.argsort(keys, kind="stable")
        keys, values = np.append(keys[order], -1), np.append(values[order], 0.0)  # a sentinel for misses

        def ious(d: np.ndarray, g: np.ndarray) -> np.ndarray:
            wanted = np.asarray(d, np.int64) * width + np.asarray(g, np.int64)
            pos = np.minimum(np.searchsorted(keys[:-1], wanted), len(keys) - 1)
            return np.where(keys[pos] == wanted, values[pos], 0.0)

        return ious


class MaskGroundTruth:
    """Each image's ground-truth segmentations and their RLEs: from a COCO JSON (its annotations' segmentations, at
    its images' sizes, as pycocotools reads them) or from the dataset's polygons (dataset.segments, normalised to the
    original image, one per label row; a box-only row is its box)."""

    def __init__(self, files: list[str], segments: list | None = None, json_gt=None):
        self.json_gt = json_gt  # utils.eval.coco_json.JsonGroundTruth
        self.segments = None if segments is None else dict(zip(files, segments))

    def image(self, path: str, image_id: int, boxes: np.ndarray, shape: tuple[int, int]) -> tuple[list, list[dict]]:
        """(COCO segmentations, RLEs) of one image's ground truth, in the order of its boxes (corner boxes in
        original pixels); MetricsError naming the file for a segmentation pycocotools could not read."""
        if self.json_gt is None:
            segmentations, (height, width), source = label_segmentations(self.segments[path], boxes, shape), shape, path
        else:
            gt, source = self.json_gt.gt, self.json_gt.path
            height, width = gt.sizes.get(image_id, shape)
            if (height, width) != tuple(shape):
                raise MetricsError(
                    f"{source}: image {image_id} is {height}x{width} there but {path} is {shape[0]}x{shape[1]}: "
                    "its masks cannot be scored"
                )
            found = gt.image_segmentations(image_id)
            segmentations = [[box_polygon(b)] if s is None else s for s, b in zip(found, boxes)]
        try:
            return segmentations, [segmentation_rle(s, height, width) for s in segmentations]
        except MetricsError as e:
            raise MetricsError(f"{source}: image {image_id}: {e}") from None
