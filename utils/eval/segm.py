"""Instance masks in the COCO protocol's 'segm' evaluation: the ground truth rasterised exactly as pycocotools
rasterises it (its frPyObjects on the polygons, merged per object; crowd RLEs as they are), each detection's mask
as a COCO RLE at the original resolution, and the mask IoUs of one image's same-class pairs (pycocotools' mask.iou:
a crowd region divides by the detection's area, as COCO does).

The mask IoUs are counted on the pixels (the detection's crop against the ground truth's, where their rectangles
meet), the numbers pycocotools' mask.iou gives on their RLEs; a detection's RLE is made only when predictions.json
is to be written.

Memory: a detection's mask exists only as its box's boolean crop, one at a time (then as its RLE, a few hundred
bytes, when kept); the ground truth as the crops of its masks' bounding boxes. Peak memory per image is one box's
crop and float logits (at most 5 bytes per pixel of the largest box) and one decoded ground-truth frame, whatever
the number of detections; over a run it grows with the number of same-class (detection, ground truth) pairs whose
masks meet (16 bytes each).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from utils.errors import MetricsError


def _mask_utils():
    from pycocotools import mask as mask_utils  # a requirement; imported late as the rest of utils/eval does

    return mask_utils


def rle_area(rles: list[dict]) -> np.ndarray:
    """Pixel areas of COCO RLEs (float64, as COCO files store areas)."""
    return np.asarray(_mask_utils().area(rles), np.float64).reshape(len(rles)) if rles else np.zeros(0)


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


# The decoded ground-truth crops one image keeps for reuse: beyond this, a crop is decoded again each time it is
# needed (a hostile label file may hold many full-frame polygons; COCO images hold a few frames' worth at most).
GT_CROP_BYTES = 1 << 28


class GroundTruthMasks:
    """One image's ground-truth masks: their RLEs, the rectangles (x, y, width, height) of their pixels and their
    areas (read from the RLEs), and each mask as the boolean crop of its rectangle, decoded when first asked for."""

    def __init__(self, rles: list[dict]):
        mask_utils = _mask_utils()
        self.rles = rles
        self.rectangles = np.asarray(mask_utils.toBbox(rles) if rles else np.zeros((0, 4)), np.int64).reshape(-1, 4)
        self.areas = np.asarray(mask_utils.area(rles) if rles else [], np.int64).reshape(-1)
        self._crops: dict[int, np.ndarray] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self.rles)

    def crop(self, g: int) -> np.ndarray:
        """Mask g inside its rectangle (a frame decoded at a time; kept while the image's crops fit GT_CROP_BYTES)."""
        if g in self._crops:
            return self._crops[g]
        x, y, w, h = self.rectangles[g].tolist()
        crop = _mask_utils().decode(self.rles[g])[y : y + h, x : x + w].astype(bool)
        if self._bytes + crop.nbytes <= GT_CROP_BYTES:
            self._crops[g], self._bytes = crop, self._bytes + crop.nbytes
        return crop


def _overlap(a: tuple, b: tuple) -> tuple[slice, slice, slice, slice] | None:
    """The rows and columns of rectangle a and of rectangle b (each x, y, width, height) that cover the same image
    pixels; None where the two do not meet."""
    (ax, ay, aw, ah), (bx, by, bw, bh) = a, b
    x0, y0, x1, y1 = max(ax, bx), max(ay, by), min(ax + aw, bx + bw), min(ay + ah, by + bh)
    if x1 <= x0 or y1 <= y0:
        return None
    return slice(y0 - ay, y1 - ay), slice(x0 - ax, x1 - ax), slice(y0 - by, y1 - by), slice(x0 - bx, x1 - bx)


def detections_that_can_match(det_bounds: np.ndarray, det_cls, gt: GroundTruthMasks, gt_cls, gt_crowd) -> np.ndarray:
    """Indices of the detections whose masks can reach IoU 0.5, COCO's lowest threshold, with a ground truth of their
    class: the others are never matched (their IoUs count as 0), so their masks need not be made. A detection's mask
    lies in its pixel rectangle ((n, 4) x1, y1, x2, y2, exclusive ends), so its intersection with a mask is at most
    that mask's pixels inside the rectangle, and the union at least the mask's area: IoU 0.5 needs half of the mask
    inside. A crowd region (intersection over the detection's area) only needs the rectangles to meet."""
    det = np.asarray(det_bounds, np.int64).reshape(-1, 4)
    det_cls, gt_cls = np.asarray(det_cls, np.int64), np.asarray(gt_cls, np.int64)
    can = np.zeros(len(det), bool)
    for g in range(len(gt)):
        x, y, w, h = gt.rectangles[g].tolist()
        x1, x2 = np.clip(det[:, 0] - x, 0, w), np.clip(det[:, 2] - x, 0, w)  # in the mask's rectangle
        y1, y2 = np.clip(det[:, 1] - y, 0, h), np.clip(det[:, 3] - y, 0, h)
        meets = (det_cls == gt_cls[g]) & (x1 < x2) & (y1 < y2)
        if bool(gt_crowd[g]) or not meets.any():
            can |= meets
            continue
        sums = np.zeros((h + 1, w + 1), np.int64)  # sums[r, c]: the mask's pixels above row r and left of column c
        sums[1:, 1:] = gt.crop(g).cumsum(0, dtype=np.int64).cumsum(1)
        inside = sums[y2, x2] - sums[y1, x2] - sums[y2, x1] + sums[y1, x1]
        can |= meets & (2 * inside >= gt.areas[g])
    return np.flatnonzero(can)


def same_class_ious(det_masks: Iterable, det_cls, gt: GroundTruthMasks, gt_cls, gt_crowd) -> tuple[np.ndarray, ...]:
    """Mask IoU of one image's same-class (detection, ground truth) pairs whose masks meet: (det index, gt index,
    IoU). det_masks gives (detection index, (origin, crop)) pairs, taken one at a time. A detection left out, like a
    pair left out, has IoU 0. pycocotools' mask.iou from the pixels: intersection over union, and over the
    detection's area for a crowd region (the same integer counts, the same division)."""
    det_cls, gt_cls, gt_crowd = np.asarray(det_cls, np.int64), np.asarray(gt_cls, np.int64), np.asarray(gt_crowd, bool)
    d_out, g_out, iou_out = [], [], []
    for d, ((x, y), crop) in det_masks:
        det_area = None
        for g in np.flatnonzero(gt_cls == det_cls[d]).tolist():
            overlap = _overlap((x, y, crop.shape[1], crop.shape[0]), gt.rectangles[g].tolist())
            if overlap is None:
                continue
            det_rows, det_columns, gt_rows, gt_columns = overlap
            inter = int(np.count_nonzero(crop[det_rows, det_columns] & gt.crop(g)[gt_rows, gt_columns]))
            if inter:
                det_area = int(np.count_nonzero(crop)) if det_area is None else det_area
                union = det_area if gt_crowd[g] else det_area + int(gt.areas[g]) - inter
                d_out.append(d), g_out.append(g), iou_out.append(inter / union)
    return np.asarray(d_out, np.int64), np.asarray(g_out, np.int64), np.asarray(iou_out, np.float64)


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
