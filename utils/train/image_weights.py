"""--image-weights: draw each epoch's training images by how rare and how badly detected their classes are.

A class weighs the inverse of its box count (normalised), times (1 - its validation mAP)^2; an image weighs the sum
of its boxes' class weights; the epoch's n images are drawn from the n with replacement in proportion to that, as
YOLOv5 does. The dataset then loads image indices[i] at position i (LoadImagesAndLabels.indices).
"""

import random

import numpy as np

from utils.errors import ImageWeightsError
from utils.train.distributed import MAIN_PROCESS, from_main_process


def _first_column(rows: np.ndarray) -> np.ndarray:
    """Column 0 of (n, k) rows; empty for no rows, however the empty array is shaped."""
    return rows[:, 0] if rows.ndim == 2 and len(rows) and rows.shape[1] else np.zeros(0)


def _class_ids(labels: list[np.ndarray], nc: int) -> list[np.ndarray]:
    """The integer class column of each image's (n, 5+) labels, checked to lie in [0, nc)."""
    if isinstance(nc, bool) or not isinstance(nc, (int, np.integer)) or nc < 1:
        raise ImageWeightsError(f"nc must be a positive integer, got {nc!r}")
    ids = [_first_column(np.asarray(lb, dtype=np.float64)).astype(np.int64) for lb in labels]
    bad = [c for c in ids if len(c) and (c.min() < 0 or c.max() >= nc)]
    if bad:
        raise ImageWeightsError(f"label classes must be in [0, {nc}), found {int(np.concatenate(bad).max())}")
    return ids


def class_weights(labels: list[np.ndarray], nc: int) -> np.ndarray:
    """(nc,) inverse class frequency over all labels, summing to 1; a class without boxes counts as one box."""
    ids = _class_ids(labels, nc)
    counts = np.bincount(np.concatenate(ids), minlength=nc) if ids else np.zeros(nc, np.int64)
    inverse = 1.0 / np.maximum(counts, 1)  # no boxes -> counted once, as YOLOv5: finite, and the highest weight
    return inverse / inverse.sum()


def image_weights(labels: list[np.ndarray], nc: int, class_weights: np.ndarray) -> np.ndarray:
    """(n_images,) the sum over each image's boxes of their class weight; 0 for an image without boxes."""
    weights = np.asarray(class_weights, dtype=np.float64).reshape(-1)
    if len(weights) != nc:
        raise ImageWeightsError(f"class_weights has {len(weights)} entries for {nc} classes")
    return np.array([weights[c].sum() for c in _class_ids(labels, nc)], dtype=np.float64)


def sample_indices(
    labels: list[np.ndarray], nc: int, maps: np.ndarray, rng: random.Random | np.random.Generator
) -> list[int]:
    """The epoch's n image indices, drawn with replacement by image weight from class weights times
    (1 - per-class mAP)^2. Images without boxes are never drawn (as YOLOv5); when no image weighs anything (no
    boxes, or every class at mAP 1) the draw is uniform."""
    maps = np.asarray(maps, dtype=np.float64).reshape(-1)
    if len(maps) != nc:
        raise ImageWeightsError(f"maps has {len(maps)} per-class mAPs for {nc} classes")
    maps = np.clip(np.nan_to_num(maps, nan=0.0), 0.0, 1.0)  # NaN (class absent from val): weighted as unlearnt
    weights = image_weights(labels, nc, class_weights(labels, nc) * (1.0 - maps) ** 2)
    n = len(weights)
    total = weights.sum()
    if n == 0:
        return []
    if not total > 0:
        weights, total = np.ones(n), float(n)
    if isinstance(rng, np.random.Generator):
        return rng.choice(n, size=n, replace=True, p=weights / total).tolist()
    return rng.choices(range(n), weights=weights.tolist(), k=n)


def draw_epoch_images(labels: list[np.ndarray], nc: int, maps: np.ndarray, seed: int, epoch: int) -> list[int]:
    """The epoch's image indices, drawn on the main process from the latest per-class mAPs (seeded by run and epoch),
    the same on every process: the DistributedSampler then splits the drawn positions between them."""
    drawn = None
    if MAIN_PROCESS:
        drawn = sample_indices(labels, nc, maps, np.random.default_rng((seed, epoch)))
    return list(from_main_process(drawn))
