"""What converting annotations into YOLO label rows shares (utils.data.coco_labels, utils.data.voc_labels): the
converted split's record, counted skips, a pixel box as a clipped YOLO row, image names kept inside their folder.
"""

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class SplitAnnotations:
    """A split's images and their labels as YOLO rows, converted from its annotation file(s)."""

    images: list[str]  # the split's image files, sorted (the order a folder of them would be listed in)
    rows: list[np.ndarray]  # per image: (n, 5) float32 [cls, cx, cy, w, h] normalised, the rows a label file holds
    sources: list[str]  # the annotation files read: fingerprinted with the images for the label cache
    counts: Counter = field(default_factory=Counter)  # what was left out or changed, by reason
    examples: dict[str, str] = field(default_factory=dict)  # reason -> its first case, for the warning
    sizes: list[tuple[float, float]] = field(default_factory=list)  # per image: the (w, h) its annotation gives
    # per image, when read for segment training: each row's outline, normalised (k, 2) float32, (0, 2) if none
    polygons: list[list[np.ndarray]] | None = None

    @property
    def boxes(self) -> int:
        return sum(len(r) for r in self.rows)


def safe_relative(name: str) -> str | None:
    """A name from a dataset (an image's file_name, a VOC id) as a relative path, or None when it is absolute,
    climbs ('..'), in either separator, or is not a usable name. Lexical only: see path_inside."""
    if not isinstance(name, str) or not name or "\0" in name:
        return None
    parts = Path(name.replace("\\", "/")).parts
    if not parts or Path(name).is_absolute() or name.startswith("/") or ".." in parts:
        return None
    return os.path.join(*parts)


def path_inside(folder: str | Path, name) -> Path | None:
    """folder/name for a name read from a dataset (a file_name, a VOC id or <filename>, a converted image's path),
    or None when it would leave folder: absolute, '..' in either separator, or through a link inside folder that
    points out of it. The folder itself may be a link (the images folder often is): it is resolved first. The one
    check every path built from dataset content passes, for reading and for writing."""
    relative = safe_relative(name)
    if relative is None:
        return None
    path = Path(folder) / relative
    inside, real = os.path.realpath(folder), os.path.realpath(path)
    return path if real == inside or real.startswith(os.path.join(inside, "")) else None


def skip(found: SplitAnnotations, reason: str, example: str = "") -> None:
    """Count one thing left out (a bad annotation, image or file), keeping the first example of each reason."""
    found.counts[reason] += 1
    if example and reason not in found.examples:
        found.examples[reason] = example[:200]


def yolo_row(cls: int, box, size: tuple[float, float], found: SplitAnnotations) -> list[float] | None:
    """A pixel box (x1, y1, x2, y2) of an image of size (w, h) as a YOLO row [cls, cx, cy, w, h], clipped to the
    image (counted); None, counted, when nothing of it is inside the image."""
    x1, y1, x2, y2 = box
    w, h = size
    c = (min(max(x1, 0.0), w), min(max(y1, 0.0), h), min(max(x2, 0.0), w), min(max(y2, 0.0), h))
    if c[2] <= c[0] or c[3] <= c[1]:
        skip(found, "boxes with no area inside their image")
        return None
    if c != (x1, y1, x2, y2):
        found.counts["clipped"] += 1
    return [cls, (c[0] + c[2]) / 2 / w, (c[1] + c[3]) / 2 / h, (c[2] - c[0]) / w, (c[3] - c[1]) / h]


def as_rows(rows: list[list[float]]) -> np.ndarray:
    return np.array(rows, dtype=np.float32).reshape(-1, 5)
