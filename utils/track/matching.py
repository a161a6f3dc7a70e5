"""Association costs between tracks and detections, and the assignment that pairs them (scipy's solver)."""

import numpy as np
from scipy.optimize import linear_sum_assignment


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (n, m) of (n, 4) and (m, 4) x1, y1, x2, y2 boxes."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def iou_cost(track_boxes: np.ndarray, det_boxes: np.ndarray, det_scores: np.ndarray | None = None) -> np.ndarray:
    """1 - IoU between tracks (rows) and detections (columns); with det_scores, 1 - IoU * score (ByteTrack's
    fuse_score: a confident detection wins a tie between two overlapping ones)."""
    iou = box_iou(track_boxes, det_boxes)
    if det_scores is not None and iou.size:
        iou = iou * np.asarray(det_scores, np.float64)[None, :]
    return 1.0 - iou


def assign(cost: np.ndarray, max_cost: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pairs (row, column) of least total cost with each pair's cost <= max_cost, then the rows and columns left.
    Costs above max_cost are made prohibitive before solving, so a forbidden pair never displaces an allowed one."""
    rows, cols = cost.shape
    if cost.size == 0:
        return [], list(range(rows)), list(range(cols))
    allowed = cost <= max_cost
    bounded = np.where(allowed, cost, max_cost + 1e4)
    r, c = linear_sum_assignment(bounded)
    pairs = [(int(i), int(j)) for i, j in zip(r, c) if allowed[i, j]]
    matched_rows, matched_cols = {i for i, _ in pairs}, {j for _, j in pairs}
    return pairs, [i for i in range(rows) if i not in matched_rows], [j for j in range(cols) if j not in matched_cols]
