"""What an export's output may be, given what its metadata claims: the check every backend runs on every output.

An export's metadata is a file's word: its names and end2end flag could be edited, and the output's width alone cannot
tell. An end-to-end output is (B, k, 6) whatever the class count, so a list of 3 names for an 80-class YOLO26 export
passes the width check and fails later on class 57; with end2end: false and 1 name, the same (B, 300, 6) passes as
"5 + 1 classes" and its boxes are decoded as cx, cy, w, h, objectness, class score. What the output itself shows
settles it: an end-to-end row's last column is a class id below the class count, and its rows come sorted by score; a
raw output has one row per anchor of the input's grid (1 or 3 per cell, at each stride), in grid order, and scores that
are probabilities.
"""

import math

import torch

SCORE_SLACK = 0.01  # an INT8 export's dequantized sigmoid may land a step outside [0, 1]
MIN_SORTED_ROWS = 16  # raw outputs of at least this many rows are never in descending score order by chance


def anchor_rows(height: int, width: int, strides: list[float]) -> tuple[int, int]:
    """The rows of a raw (not end-to-end) output for an input of this size: one per grid cell at each stride for an
    anchor-free head, three for YOLOv5's anchors."""
    cells = sum(math.ceil(height / s) * math.ceil(width / s) for s in strides)
    return cells, 3 * cells


def _end2end_problem(out: torch.Tensor, classes: int) -> str | None:
    ids = out[..., 5]
    bad = (ids < 0) | (ids >= classes) | (ids != ids.round())
    if bool(bad.any()):
        return (
            f"it output class {float(ids[bad][0]):g}, but its metadata names {classes} classes (ids 0..{classes - 1}): "
            "the model predicts more classes than its metadata lists"
        )
    return None


def _rows_problem(rows: int, input_hw: tuple[int, int], strides: list[float], anchors: bool | None) -> str | None:
    """Why a raw output's row count does not fit the metadata: not one per anchor at all (an end-to-end model), or
    one per cell where the family recorded has three anchors per cell (YOLOv5), or the other way round (anchors None:
    either is taken)."""
    per_cell = anchor_rows(*input_hw, strides)
    if rows not in per_cell:
        return (
            f"it gave {rows} rows for a {input_hw[0]}x{input_hw[1]} input, not one per anchor ({per_cell[0]} or "
            f"{per_cell[1]}): the final detections of an end-to-end model, which its metadata says it is not (end2end: "
            "false)"
        )
    if anchors is not None and rows != per_cell[1 if anchors else 0]:
        shown, claimed = (
            ("three per grid cell", "one per cell") if rows == per_cell[1] else ("one per grid cell", "three")
        )
        return (
            f"its {rows} rows for a {input_hw[0]}x{input_hw[1]} input are {shown} (a network of another family), "
            f"but the family its metadata names has {claimed}: its thresholds and decoding would be wrong"
        )
    return None


def _raw_problem(
    out: torch.Tensor, input_hw: tuple[int, int], strides: list[float], anchors: bool | None = None
) -> str | None:
    problem = _rows_problem(out.shape[1], input_hw, strides, anchors)
    if problem:
        return problem
    if out.shape[1] >= MIN_SORTED_ROWS:
        step = out[:, 1:, 4] - out[:, :-1, 4]
        if bool((step <= 0).all()) and bool((step < 0).any()):  # the anchor-free head's objectness is constant 1
            return (
                f"its {out.shape[1]} rows come sorted by score, as an end-to-end model's final detections do, not in "
                "anchor order: its metadata says end2end: false, but the model is end-to-end"
            )
    scores = out[..., 4:]
    if scores.numel() and (float(scores.min()) < -SCORE_SLACK or float(scores.max()) > 1 + SCORE_SLACK):
        low, high = float(scores.min()), float(scores.max())
        return (
            f"its objectness and class scores span [{low:.3g}, {high:.3g}], not probabilities in [0, 1]: not the raw "
            "output its metadata describes (end2end: false)"
        )
    return None


def output_problem(
    out: torch.Tensor,
    input_hw: tuple[int, int],
    classes: int,
    end2end: bool,
    strides: list[float],
    anchors: bool | None = None,
) -> str | None:
    """None when a (B, N, width) output (width already checked) fits what the metadata claims, else why not;
    anchors, the recorded family's (None: not known), settles how many rows per grid cell a raw output has."""
    if not torch.isfinite(out).all():
        return "its output holds NaN or infinite values (a damaged export)"
    if end2end:
        return _end2end_problem(out, classes)
    return _raw_problem(out, input_hw, strides, anchors)
