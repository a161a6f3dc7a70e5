"""Association costs between tracks and detections, and the assignment that pairs them (scipy's solver)."""

import numpy as np


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (n, m) of (n, 4) and (m, 4) x1, y1, x2, y2 boxes."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    w = np.maximum(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0)
    h = np.maximum(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0)
    inter = w * h
    area_a = np.maximum(a[:, 2] - a[:, 0], 0) * np.maximum(a[:, 3] - a[:, 1], 0)
    area_b = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
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

    Leaving a row or a column unpaired costs max_cost / 2 (so a pair is worth making only below max_cost), which is
    the extended problem of LAPJV's cost_limit that ByteTrack's assignment solves: when two objects cross, one good
    pair and two unpaired ones beat two poor pairs. Solved exactly by scipy on the matrix extended with one
    "unpaired" column per row and one "unpaired" row per column."""
    rows, cols = cost.shape
    if not cost.size:
        return [], list(range(rows)), list(range(cols))
    allowed = cost <= max_cost
    per_row, per_col = allowed.sum(1), allowed.sum(0)
    # a row and a column allowed only with each other are paired outright (the usual case for objects apart);
    # the solver sees only the rows and columns that compete
    first = allowed.argmax(axis=1)
    sole = (per_row == 1) & (per_col[first] == 1)
    pairs = [(int(i), int(first[i])) for i in np.flatnonzero(sole)]
    competing_cols = per_col > 0
    competing_cols[first[sole]] = False
    r_idx = np.flatnonzero((per_row > 0) & ~sole).tolist()
    c_idx = np.flatnonzero(competing_cols).tolist()
    if r_idx and c_idx:
        pairs += _solve(cost[np.ix_(r_idx, c_idx)], max_cost, r_idx, c_idx)
    row_left, col_left = np.ones(rows, bool), np.ones(cols, bool)
    if pairs:
        row_left[[i for i, _ in pairs]] = col_left[[j for _, j in pairs]] = False
    return pairs, np.flatnonzero(row_left).tolist(), np.flatnonzero(col_left).tolist()


def _solve(cost: np.ndarray, max_cost: float, row_ids: list, col_ids: list) -> list[tuple[int, int]]:
    """The extended problem (see assign) on a sub-matrix; pairs in the full matrix's indices."""
    rows, cols = cost.shape
    forbidden = max_cost + 1e4
    extended = np.full((rows + cols, cols + rows), forbidden)
    extended[:rows, :cols] = np.where(cost <= max_cost, cost, forbidden)
    extended[np.arange(rows), cols + np.arange(rows)] = max_cost / 2
    extended[rows + np.arange(cols), np.arange(cols)] = max_cost / 2
    extended[rows:, cols:] = 0
    # imported here, not with the module: scipy.optimize was a fifth of every detect.py's start-up
    from scipy.optimize import linear_sum_assignment

    r, c = linear_sum_assignment(extended)
    return [
        (int(row_ids[i]), int(col_ids[j])) for i, j in zip(r, c) if i < rows and j < cols and cost[i, j] <= max_cost
    ]
