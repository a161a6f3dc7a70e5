"""A COCO annotation's `segmentation` as one outline (a normalised (k, 2) polygon) for segment training: polygon
lists (several pieces of one object joined into one outline) and RLE masks (checked, decoded with pycocotools,
traced with OpenCV). Bad ones are counted and the object keeps its box without an outline.
"""

import cv2
import numpy as np
from pycocotools import mask as coco_mask

from utils.data.annotation_rows import SplitAnnotations, skip

SEGMENT_KEYS = frozenset(("segmentation", "size", "counts"))  # read from the JSON only for segment training
MAX_MASK_PIXELS = 1 << 27  # an RLE mask is decoded only up to 134 M pixels (134 MB): 16x a 4K frame
MAX_OUTLINE_VERTICES = 1 << 20  # one object's outline: at most this many vertices (in all its pieces)
BRIDGE_CANDIDATES = 256  # two pieces are joined at their closest vertices among this many of each


def coco_outline(segmentation, size: tuple[float, float], found: SplitAnnotations, example: str) -> np.ndarray:
    """The outline of an object, its vertices normalised by the image's (w, h); an empty (0, 2) array, counted under
    a reason, when there is none or it cannot be used (the object then trains as a box-only row)."""
    if isinstance(segmentation, dict):
        pieces = _rle_pieces(segmentation, size, found, example)
    elif isinstance(segmentation, list) and segmentation:
        pieces = _polygon_pieces(segmentation, found, example)
    else:
        skip(found, "objects without a segmentation (box only)", example)
        return np.zeros((0, 2), np.float32)
    if not pieces:
        return np.zeros((0, 2), np.float32)
    return (join_pieces(pieces) / np.array(size, np.float64)).astype(np.float32)


def _polygon_pieces(segmentation: list, found: SplitAnnotations, example: str) -> list[np.ndarray]:
    """The pieces of a polygon-list segmentation as (k, 2) pixel arrays; bad pieces counted and left out."""
    pieces, total = [], 0
    for piece in segmentation:
        ok = isinstance(piece, list) and len(piece) % 2 == 0 and len(piece) >= 6
        if not ok or not all(not isinstance(v, bool) and isinstance(v, (int, float)) for v in piece):
            skip(found, "polygon pieces that are not 3 or more x, y pairs of numbers (left out)", example)
            continue
        points = np.array(piece, np.float64).reshape(-1, 2)
        if not np.isfinite(points).all():
            skip(found, "polygon pieces with NaN or infinite coordinates (left out)", example)
            continue
        total += len(points)
        if total > MAX_OUTLINE_VERTICES:
            skip(found, f"outlines of more than {MAX_OUTLINE_VERTICES} vertices (box only)", example)
            return []
        pieces.append(points)
    return pieces


def _rle_counts(rle: dict) -> list[int] | None:
    """The run lengths of an RLE (a list of counts, or COCO's compressed string), or None when malformed."""
    counts = rle.get("counts")
    if isinstance(counts, list):
        ok = all(not isinstance(c, bool) and isinstance(c, int) and c >= 0 for c in counts)
        return counts if ok else None
    if not isinstance(counts, str) or not counts.isascii():
        return None
    runs, value, shift, more = [], 0, 0, False
    for ch in counts:  # COCO's string: 5 bits per character, 0x20 continues, 0x10 is the sign of the last one
        c = ord(ch) - 48
        if not 0 <= c < 64:
            return None
        value |= (c & 0x1F) << shift
        shift, more = shift + 5, bool(c & 0x20)
        if not more:
            if c & 0x10:
                value -= 1 << shift
            runs.append(value + (runs[-2] if len(runs) > 2 else 0))  # from the fourth on: a difference
            value, shift = 0, 0
    return None if more or any(r < 0 for r in runs) else runs


def _rle_pieces(rle: dict, size: tuple[float, float], found: SplitAnnotations, example: str) -> list[np.ndarray]:
    """The outer contours of an RLE mask as pixel polygons. Its size must be the image's and its runs must cover
    exactly its pixels (pycocotools does not check: a longer run would write past the mask)."""
    shape = rle.get("size")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(v, int) for v in shape)):
        skip(found, "RLE masks without a [height, width] size (box only)", example)
        return []
    h, w = shape
    if (w, h) != (round(size[0]), round(size[1])):
        skip(found, "RLE masks whose size disagrees with their image (box only)", f"{example}: {h}x{w} (h x w)")
        return []
    if h * w > MAX_MASK_PIXELS:
        skip(found, f"RLE masks over {MAX_MASK_PIXELS} pixels (box only)", example)
        return []
    runs = _rle_counts(rle)
    if runs is None or sum(runs) != h * w:
        skip(found, "RLE masks whose runs do not cover their size exactly (box only)", example)
        return []
    encoded = coco_mask.frPyObjects({"size": [h, w], "counts": runs}, h, w)
    mask = np.ascontiguousarray(coco_mask.decode(encoded))
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    # contour points are pixel centres; the outline of a pixel's area is half a pixel further out on average
    pieces = [c.reshape(-1, 2).astype(np.float64) + 0.5 for c in contours if len(c) >= 3]
    if not pieces:
        skip(found, "RLE masks with no region of 3 or more pixels (box only)", example)
    return pieces


def _closest(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """Indices of the closest vertices of a and b, among at most BRIDGE_CANDIDATES evenly spread ones of each."""
    ia = np.linspace(0, len(a) - 1, min(len(a), BRIDGE_CANDIDATES)).astype(int)
    ib = np.linspace(0, len(b) - 1, min(len(b), BRIDGE_CANDIDATES)).astype(int)
    d = ((a[ia, None, :] - b[None, ib, :]) ** 2).sum(-1)
    i, j = np.unravel_index(int(d.argmin()), d.shape)
    return int(ia[i]), int(ib[j])


def join_pieces(pieces: list[np.ndarray]) -> np.ndarray:
    """Several pieces of one object as one outline (as both peers' converters join them): the first piece, with
    each other piece inserted at the first piece's vertex closest to it, reached and left along the same bridge
    (a bridge has no area: the fill is the pieces')."""
    first, rest = pieces[0], pieces[1:]
    if not rest:
        return first
    inserts: dict[int, list[np.ndarray]] = {}
    for piece in rest:
        i, j = _closest(first, piece)
        loop = np.concatenate((np.roll(piece, -j, 0), piece[j : j + 1], first[i : i + 1]), 0)
        inserts.setdefault(i, []).append(loop)
    out = []
    for i, vertex in enumerate(first):
        out.append(vertex[None])
        out += inserts.get(i, [])
    return np.concatenate(out, 0)
