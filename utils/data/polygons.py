"""Polygon geometry for segment labels: a polygon cut to a rectangle, its enclosing box, and polygons drawn as
binary masks at the prototype resolution.

A polygon is a float (k, 2) array of (x, y) vertices, in pixels or normalised, the last vertex joined to the first.
"""

import cv2
import numpy as np

MASK_RATIO = 4  # masks are drawn at 1/4 of the image side: the prototype resolution of every segment head
SUBPIXEL_BITS = 4  # vertices are drawn with 1/16 pixel precision (cv2.fillPoly's shift)


def _cut(points: np.ndarray, axis: int, bound: float, keep_below: bool) -> np.ndarray:
    """The part of a closed polygon on one side of the line points[:, axis] == bound (one Sutherland-Hodgman step,
    vectorised): each vertex on the kept side, then the crossing point of each edge that crosses the line."""
    if not len(points):
        return points
    side = points[:, axis] - bound
    inside = side <= 0 if keep_below else side >= 0
    if inside.all():  # nothing to cut (what the steps below return too, only slower)
        return points
    after = np.arange(1, len(points) + 1) % len(points)  # each vertex's successor (np.roll, without its overhead)
    following, side_next = points[after], side[after]
    crossing = inside != inside[after]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(crossing, side / (side - side_next), 0.0)
    cross_points = points + t[:, None] * (following - points)
    cross_points[:, axis] = np.where(crossing, bound, cross_points[:, axis])  # exactly on the line
    both = np.stack((points, cross_points), 1).reshape(-1, 2)
    return both[np.stack((inside, crossing), 1).reshape(-1)]


def clip_polygon(points: np.ndarray, width: float, height: float) -> np.ndarray:
    """The part of a polygon inside the rectangle [0, width] x [0, height] (a polygon, possibly empty). A vertex
    outside is not just moved to the edge: the outline is cut where it leaves the rectangle, so the clipped
    polygon covers exactly the original's area inside it."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if not len(points) or (points.min(0) >= 0).all() and points[:, 0].max() <= width and points[:, 1].max() <= height:
        return points
    for axis, bound, keep_below in ((0, 0.0, False), (0, width, True), (1, 0.0, False), (1, height, True)):
        points = _cut(points, axis, bound, keep_below)
    return points


def polygon_box(points: np.ndarray) -> np.ndarray:
    """(x1, y1, x2, y2) enclosing the vertices; zeros for an empty polygon."""
    if not len(points):
        return np.zeros(4)
    return np.concatenate((points.min(0), points.max(0)))


def polygons_to_masks(polygons: list[np.ndarray], shape: tuple[int, int], ratio: int = MASK_RATIO) -> np.ndarray:
    """One uint8 (0/1) mask per polygon at (h // ratio, w // ratio) for pixel polygons of an (h, w) image. Each
    polygon is filled at full resolution inside its box only, then a mask pixel is set where the fill covers at
    least half of its ratio x ratio block (never n full-size masks). An empty polygon (a box-only label) gives an
    empty mask; a self-intersecting one is filled as OpenCV fills it (docs/datasets.md)."""
    h, w = shape[0] // ratio, shape[1] // ratio
    masks = np.zeros((len(polygons), h, w), np.uint8)
    for mask, points in zip(masks, polygons):
        if len(points) >= 3:
            fill_polygon(mask, np.asarray(points, np.float64), ratio)
    return masks


def fill_polygon(mask: np.ndarray, points: np.ndarray, ratio: int = 1) -> None:
    """Set (to 1) the pixels of a (h, w) uint8 mask that a pixel polygon of the ratio-times larger image covers by
    half; the others are left as they are. ratio 1: every pixel the polygon touches (OpenCV's fill)."""
    h, w = mask.shape
    x1, y1 = (int(np.clip(np.floor(v / ratio), 0, n)) for v, n in zip(points.min(0), (w, h)))
    x2, y2 = (int(np.clip(np.ceil(v / ratio), 0, n)) for v, n in zip(points.max(0), (w, h)))
    if x2 <= x1 or y2 <= y1:
        return
    full = np.zeros(((y2 - y1) * ratio, (x2 - x1) * ratio), np.uint8)
    # OpenCV puts pixel centres on integer coordinates: pixel-edge coordinates move by half a pixel
    fixed = np.round((points - (x1 * ratio + 0.5, y1 * ratio + 0.5)) * (1 << SUBPIXEL_BITS)).astype(np.int32)
    # OpenCV fills every pixel the outline touches, ~half a pixel beyond it all round (+10% area for a shape of
    # 7x7 mask pixels drawn 4x larger, and a model learns masks that much too large): the outline's own pixels,
    # half inside on average, count as half covered (2 inside, 1 on the outline), which makes the area unbiased
    cv2.fillPoly(full, [fixed], 2, lineType=cv2.LINE_8, shift=SUBPIXEL_BITS)
    cv2.polylines(full, [fixed], True, 1, lineType=cv2.LINE_8, shift=SUBPIXEL_BITS)
    covered = full.reshape(y2 - y1, ratio, x2 - x1, ratio).sum((1, 3), dtype=np.int32)  # in half pixels
    mask[y1:y2, x1:x2] |= (covered >= ratio * ratio).astype(mask.dtype)  # |=: several polygons, one mask
