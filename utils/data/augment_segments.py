"""Training augmentation of segment labels: the polygons move with the pixels and the boxes are taken again from
the moved polygons, so that masks, boxes and labels stay in step (utils.data.augment does the pixels and the
box-only rows).

Targets are (n, 5) float32 [cls, x1, y1, x2, y2] in pixels with one float (k, 2) pixel polygon per row; a box-only
row has an empty polygon and moves as a box.
"""

import random

import numpy as np

from utils.data.augment import _warp_pixels, box_candidates, perspective_matrix, warp_targets
from utils.data.polygons import clip_polygon, fill_polygon, polygon_box

COPY_PASTE_MAX_IOA = 0.30  # a copy is pasted only where it covers less than this much of every object already there


def _with_polygon_boxes(labels: np.ndarray, before: list[np.ndarray], after: list[np.ndarray]) -> np.ndarray:
    """labels with each row's box taken from its moved and cut polygon (in place; returned): a row whose polygon
    was cut away (nothing left inside) gets an empty box, for the caller to drop; a box-only row keeps its box."""
    for row, old, new in zip(labels, before, after):
        if len(old):
            row[1:5] = polygon_box(new) if len(new) >= 3 else 0.0
    return labels


def _clipped(points: np.ndarray, width: float, height: float) -> np.ndarray:
    """A pixel polygon cut to [0, width] x [0, height] (polygons.clip_polygon). One wholly outside is empty at once:
    after mosaic and a warp, about a third of the polygons are, and cutting them edge by edge was most of a segment
    batch's loading time."""
    if not len(points):
        return points
    low, high = points.min(0), points.max(0)
    if high[0] <= 0 or high[1] <= 0 or low[0] >= width or low[1] >= height:
        return points[:0]
    return clip_polygon(points, width, height)


def place_polygons(polygons: list[list[np.ndarray]], places: list[tuple], canvas_size: int) -> list[np.ndarray]:
    """Each mosaic tile's pixel polygons moved onto the canvas (see augment._tile_places) and cut at its edges."""
    placed = []
    for tile, (x1a, y1a, _, _, x1b, y1b) in zip(polygons, places):
        shift = np.array([x1a - x1b, y1a - y1b], np.float64)
        placed += [_clipped(p + shift, canvas_size, canvas_size) for p in tile]
    return placed


def _moved(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(k, 2) points through a 3x3 affine or perspective matrix."""
    moved = points @ matrix[:2, :2].T + matrix[:2, 2]
    if matrix[2, 0] or matrix[2, 1]:
        moved /= (points @ matrix[2, :2] + matrix[2, 2])[:, None]
    return moved


def warp_polygons(
    labels: np.ndarray, polygons: list[np.ndarray], matrix: np.ndarray, s: float, out_shape: tuple[int, int]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Pixel targets and their polygons through a warp: each polygon moved and cut at the (h, w) output's edges,
    its box taken from what is left; rows the warp made too small, too thin or mostly cut off are dropped (the
    same rule as for boxes, augment.box_candidates, except that an object with a polygon stays while 1% of its box's
    area is left, not 10%, as in YOLOv5 and Ultralytics: its box is taken from what is left of the polygon itself,
    so a small remainder still labels real pixels)."""
    labels = np.asarray(labels, dtype=np.float32).reshape(-1, 5)
    if not len(labels):
        return labels, []
    new = warp_targets(labels, matrix, out_shape)
    warped = [_clipped(_moved(p, matrix), out_shape[1], out_shape[0]) if len(p) else p for p in polygons]
    _with_polygon_boxes(new, polygons, warped)
    area_thr = np.array([0.01 if len(p) else 0.10 for p in polygons])
    keep = box_candidates(labels[:, 1:5].T * s, new[:, 1:5].T, area_thr=area_thr)
    return new[keep], [warped[j] for j in np.flatnonzero(keep)]


def perspective_polygons(
    image: np.ndarray,
    labels: np.ndarray,
    polygons: list[np.ndarray],
    degrees: float = 10,
    translate: float = 0.1,
    scale: float = 0.1,
    shear: float = 10,
    perspective: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """augment.random_perspective (same random draws, same pixels) for targets with polygons."""
    out_shape = image.shape[:2]
    matrix, s = perspective_matrix(out_shape, out_shape, degrees, translate, scale, shear, perspective)
    if not np.array_equal(matrix, np.eye(3)):
        image = _warp_pixels(image, matrix, out_shape, bool(perspective))
    return (image, *warp_polygons(labels, polygons, matrix, s, out_shape))


def flip_polygons(
    image: np.ndarray, labels: np.ndarray, polygons: list[np.ndarray], fliplr: float = 0.5, flipud: float = 0.0
) -> np.ndarray:
    """augment.random_flip (same random draws) for normalised [cls, cx, cy, w, h] labels and normalised polygons,
    flipped in place; returns the image (a flipped view, or the same)."""
    for axis, gain in ((1, flipud), (0, fliplr)):  # up-down first, as random_flip
        if gain and random.random() < gain:
            image = np.flipud(image) if axis else np.fliplr(image)
            labels[:, 1 + axis] = 1 - labels[:, 1 + axis]
            for points in polygons:
                points[:, axis] = 1 - points[:, axis]
    return image


def _ioa(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection of one xyxy box with each of boxes, over the area of each of boxes."""
    iw = (np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])).clip(0)
    ih = (np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])).clip(0)
    return iw * ih / ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) + 1e-7)


def copy_paste(
    image: np.ndarray, labels: np.ndarray, polygons: list[np.ndarray], p: float
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Copy-paste (Ghiasi et al. 2021, as both peers do it): a share p of the objects with a polygon are mirrored
    left-right and pasted, pixels and label, where the copy covers less than COPY_PASTE_MAX_IOA of every object
    already there (the objects it then covers in part keep their full masks, as in both peers)."""
    candidates = [j for j, points in enumerate(polygons) if len(points) >= 3]
    if not p or not candidates:
        return image, labels, polygons
    w = image.shape[1]
    paste = np.zeros(image.shape[:2], np.uint8)
    labels, polygons = labels.copy(), list(polygons)
    for j in random.sample(candidates, k=round(p * len(candidates))):
        points = polygons[j].copy()
        points[:, 0] = w - points[:, 0]
        box = np.array([w - labels[j, 3], labels[j, 2], w - labels[j, 1], labels[j, 4]], np.float32)
        if _ioa(box, labels[:, 1:5]).max() < COPY_PASTE_MAX_IOA:
            labels = np.concatenate((labels, [[labels[j, 0], *box]]), 0)
            polygons.append(points)
            fill_polygon(paste, points)  # the pixels its mask will hold
    if paste.any():
        where = paste.astype(bool)
        image = image.copy() if not image.flags.writeable else image
        image[where] = image[:, ::-1][where]
    return image, labels.astype(np.float32), polygons
