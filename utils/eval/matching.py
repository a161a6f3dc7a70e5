"""Box sets as flat numpy arrays and their matching: COCO's IoU (crowd boxes included) computed with
pycocotools' float operations, one-to-one matching, and the confusion matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Boxes:
    """Flat box arrays of many images: COCO xywh boxes in original-image pixels."""

    image: np.ndarray  # (n,) int64 image ids (indices among the sorted ids once evaluated)
    cls: np.ndarray  # (n,) int64 class index
    xywh: np.ndarray  # (n, 4) float64 top-left x, y, width, height
    area: np.ndarray  # (n,) float64 area for the COCO area ranges
    crowd: np.ndarray  # (n,) bool, ground truth only (False for detections)
    score: np.ndarray  # (n,) float64, detections only (zeros for ground truth)

    def take(self, index: np.ndarray) -> Boxes:
        return Boxes(*(a[index] for a in (self.image, self.cls, self.xywh, self.area, self.crowd, self.score)))

    def __len__(self) -> int:
        return len(self.image)


def box_set(image, cls, xywh, area=None, crowd=None, score=None) -> Boxes:
    xywh = np.asarray(xywh, np.float64).reshape(-1, 4)
    n = len(xywh)
    return Boxes(
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


def runs_of(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values of a sorted array with the start and length of each run (np.unique without the sort)."""
    n = len(sorted_keys)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) if n else np.zeros(0, np.int64)
    return sorted_keys[starts], starts, np.diff(np.r_[starts, n])


def pairs_with_equal_keys(a_keys: np.ndarray, b_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j) with a_keys[i] == b_keys[j], ordered by i then j; b_keys must be sorted."""
    lo = np.searchsorted(b_keys, a_keys, "left")
    n = np.searchsorted(b_keys, a_keys, "right") - lo
    return np.repeat(np.arange(len(a_keys)), n), _expand_ranges(lo, n)


def coco_iou(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
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


def match_one_to_one(det: np.ndarray, gt: np.ndarray, iou: np.ndarray, gt_prefers_iou: bool) -> tuple[np.ndarray, ...]:
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

        d, g = pairs_with_equal_keys(det_image, gt_image)
        iou = _iou_xyxy(det_xyxy[d], gt_xyxy[g])
        hit = iou > self.iou_thres
        d, g, _ = match_one_to_one(d[hit], g[hit], iou[hit], gt_prefers_iou=True)
        np.add.at(self.matrix, (det_cls[d], gt_cls[g]), 1)
        missed = np.ones(len(gt_cls), bool)
        missed[g] = False
        np.add.at(self.matrix, (self.nc, gt_cls[missed]), 1)
        unmatched = np.ones(len(det_cls), bool)
        unmatched[d] = False
        np.add.at(self.matrix, (det_cls[unmatched], self.nc), 1)


def xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    return np.concatenate((b[:, :2], b[:, :2] + b[:, 2:]), 1)
