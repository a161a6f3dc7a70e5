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


def rle_crops(rles: list[dict]) -> list[tuple[tuple[int, int], np.ndarray]]:
    """Each RLE as (origin (x, y), boolean crop of its bounding box): the mask decoded one frame at a time (an
    empty mask is a 0x0 crop at the origin)."""
    mask_utils, crops = _mask_utils(), []
    for rle in rles:
        x, y, w, h = (int(v) for v in mask_utils.toBbox(rle))
        crops.append(((x, y), mask_utils.decode(rle)[y : y + h, x : x + w].astype(bool)))
    return crops


def _overlap(a: tuple, b: tuple) -> tuple[slice, slice, slice, slice] | None:
    """The rows and columns of crop a and of crop b (each (origin, crop)) that cover the same image pixels; None
    where the two rectangles do not meet."""
    ((ax, ay), a_crop), ((bx, by), b_crop) = a, b
    x0, y0 = max(ax, bx), max(ay, by)
    x1, y1 = min(ax + a_crop.shape[1], bx + b_crop.shape[1]), min(ay + a_crop.shape[0], by + b_crop.shape[0])
    if x1 <= x0 or y1 <= y0:
        return None
    return slice(y0 - ay, y1 - ay), slice(x0 - ax, x1 - ax), slice(y0 - by, y1 - by), slice(x0 - bx, x1 - bx)


def detections_meeting(det_bounds: np.ndarray, det_cls, gt_masks: list, gt_cls) -> np.ndarray:
    """Indices of the detections whose pixel rectangles ((n, 4) x1, y1, x2, y2, exclusive ends) meet the rectangle
    of a same-class ground-truth mask: only these can have a mask IoU above 0."""
    gt = np.array([(x, y, x + c.shape[1], y + c.shape[0]) for (x, y), c in gt_masks], np.int64).reshape(-1, 4)
    det = np.asarray(det_bounds, np.int64).reshape(-1, 4)
    meet = np.asarray(det_cls, np.int64)[:, None] == np.asarray(gt_cls, np.int64)[None]
    meet &= (det[:, None, 0] < gt[None, :, 2]) & (gt[None, :, 0] < det[:, None, 2])
    meet &= (det[:, None, 1] < gt[None, :, 3]) & (gt[None, :, 1] < det[:, None, 3])
    return np.flatnonzero(meet.any(1))


def same_class_ious(det_masks: Iterable, det_cls, gt_masks: list, gt_cls, gt_crowd) -> tuple[np.ndarray, ...]:
    """Mask IoU of one image's same-class (detection, ground truth) pairs whose masks meet: (det index, gt index,
    IoU). det_masks gives (detection index, (origin, crop)) pairs, taken one at a time; gt_masks lists the ground
    truth's (origin, crop). A detection left out, like a pair left out, has IoU 0. pycocotools' mask.iou from the
    pixels: intersection over union, and over the detection's area for a crowd region (the same integer counts,
    the same division)."""
    det_cls, gt_cls, gt_crowd = np.asarray(det_cls, np.int64), np.asarray(gt_cls, np.int64), np.asarray(gt_crowd, bool)
    gt_area = [int(np.count_nonzero(crop)) for _, crop in gt_masks]
    d_out, g_out, iou_out = [], [], []
    for d, det in det_masks:
        det_area = None
        for g in np.flatnonzero(gt_cls == det_cls[d]).tolist():
            overlap = _overlap(det, gt_masks[g])
            if overlap is None:
                continue
            det_rows, det_columns, gt_rows, gt_columns = overlap
            inter = int(np.count_nonzero(det[1][det_rows, det_columns] & gt_masks[g][1][gt_rows, gt_columns]))
            if inter:
                det_area = int(np.count_nonzero(det[1])) if det_area is None else det_area
                union = det_area if gt_crowd[g] else det_area + gt_area[g] - inter
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
