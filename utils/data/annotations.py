"""Splits labelled by an annotation file instead of YOLO text labels: a COCO JSON or Pascal VOC XML, named by a
data YAML and converted to YOLO label rows in memory (utils.data.coco_labels, utils.data.voc_labels).

A split stays a path (a str) everywhere the rest of the code passes splits around; an AnnotatedSplit is that
path carrying how to read its labels: the dataset, the image listing and the converter ask it for them.
"""

import os
from collections import Counter
from pathlib import Path

import numpy as np

from utils.data.annotation_rows import SplitAnnotations
from utils.data.coco_labels import read_coco_split
from utils.data.voc_labels import read_voc_split
from utils.errors import DatasetError
from utils.log import LOGGER

COCO, VOC = "coco", "voc"


class AnnotatedSplit(str):
    """A split path (a COCO JSON, a VOC image-set list or folder) that knows how to read its labels.

    kind: 'coco' or 'voc'; images: the folder a COCO entry's file_name is found under (None: the JSON's folder);
    names: the data's classes, in order (annotation categories of other names are left out); keep_difficult: VOC
    objects marked difficult are trained on too (VOC leaves them out, as its evaluation ignores them)."""

    kind: str
    images: str | None
    names: tuple[str, ...]
    keep_difficult: bool

    def __new__(cls, path: str, kind: str, images: str | None, names, keep_difficult: bool = False):
        split = super().__new__(cls, path)
        split.kind, split.images, split.names, split.keep_difficult = kind, images, tuple(names), keep_difficult
        split._memo = None
        return split

    def __reduce__(self):  # workers started by spawn get the description, not a parsed copy of the annotations
        return AnnotatedSplit, (str(self), self.kind, self.images, self.names, self.keep_difficult)

    def recipe(self, polygons: bool = False) -> str:
        """What besides the files decides the labels: part of the label cache's fingerprint."""
        # sizes: each image's annotated size is checked against the file (caches from before are not reused)
        recipe = f"{self.kind} images={self.images} difficult={self.keep_difficult} names={'|'.join(self.names)}"
        return recipe + " sizes" + (" polygons" if polygons else "")

    def image_folder(self) -> str:
        """The folder the split's images are named under: a COCO split's images folder (or its JSON's folder), a
        VOC root's JPEGImages."""
        path = Path(self)
        if self.kind == COCO:
            return self.images or str(path.parent)
        return str((path if path.is_dir() else path.parents[2]) / "JPEGImages")

    def cache_source(self) -> Path:
        """What the label cache is named after: the JSON or image-set list (annotations/x.json ->
        annotations/x.yolo-labels.npz), or a VOC root's Annotations folder."""
        path = Path(self)
        return path / "Annotations" if path.is_dir() else path

    def annotations(self, polygons: bool = False) -> SplitAnnotations:
        """The split's images and labels, read once per state of the annotation file (then kept in memory); with
        polygons (segment training) each row's outline too, read only then (COCO's outlines are most of its
        JSON). A split read with polygons serves box reads as well."""
        try:
            st = os.stat(self)
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = None
        if self._memo is None or self._memo[0] != stamp or polygons and self._memo[1].polygons is None:
            self._memo = (stamp, _read(self, polygons))
        return self._memo[1]


def _read(split: AnnotatedSplit, polygons: bool) -> SplitAnnotations:
    found = read_coco_split(split, polygons) if split.kind == COCO else read_voc_split(split)
    if polygons and found.polygons is None:  # VOC: boxes only
        found.polygons = [[np.zeros((0, 2), np.float32) for _ in rows] for rows in found.rows]
    log_summary(split, found)
    return found


NOTICES = {  # reasons counted while converting that are expected and only said, not warned about
    "crowd": "crowd annotations left out of training (kept for evaluation)",
    "difficult": "difficult objects left out of training (keep_difficult: true keeps them)",
    "other_class": "annotations of categories not in the data's names left out",
    "clipped": "boxes clipped to their image",
}


def log_summary(split: AnnotatedSplit, found: SplitAnnotations) -> None:
    """One info line (images, boxes, what was left out as intended) and a warning for anything left out as bad."""
    said = [f"{n} {NOTICES[k]}" for k, n in found.counts.items() if n and k in NOTICES]
    bad = [
        f"{n} {k}" + (f" (e.g. {found.examples[k]})" if k in found.examples else "")
        for k, n in found.counts.items()
        if n and k not in NOTICES
    ]
    LOGGER.info(
        f"{Path(split).name}: {len(found.images)} images, {found.boxes} boxes"
        + (f"; {', '.join(said)}" if said else "")
    )
    if bad:
        LOGGER.warning(f"WARNING: {split}: skipped {', '.join(bad)}")


def is_voc_split(path: Path) -> bool:
    """A Pascal VOC split: a VOC root (Annotations/ beside JPEGImages/), or an ImageSets/<task>/<set>.txt id list
    under one."""
    if path.is_dir():
        return (path / "Annotations").is_dir() and (path / "JPEGImages").is_dir()
    return path.suffix == ".txt" and path.parent.parent.name == "ImageSets" and is_voc_split(path.parents[2])


def annotated_split(value, key: str, data: dict, root: Path, names: list[str], file: Path):
    """A split of the data YAML as an AnnotatedSplit when it is a COCO JSON or VOC split, else the value as is.
    The folder of a COCO split's images is the YAML's `<split>_images`, else `images`, else the JSON's folder."""
    if not isinstance(value, str):
        if isinstance(value, list) and any(is_annotation_path(Path(v)) for v in value):
            raise DatasetError(f"{file}: '{key}' lists several paths: a COCO JSON or VOC split must be the only one")
        return value
    if is_annotation_path(Path(value)) and len(set(names)) < len(names):  # annotations name their classes
        twice = next(n for n, count in Counter(names).items() if count > 1)
        raise DatasetError(f"{file}: the class name {twice!r} is given twice: {key} finds its classes by name"[:300])
    path = Path(value)
    if path.suffix.lower() == ".json":
        images = data.get(f"{key}_images", data.get("images"))
        folder = _images_folder(images, root, file, key) if images else None
        return AnnotatedSplit(value, COCO, folder, names)
    if is_voc_split(path):
        keep = data.get("keep_difficult", False)
        if not isinstance(keep, bool):
            raise DatasetError(f"{file}: 'keep_difficult' must be true or false, got {keep!r}"[:300])
        return AnnotatedSplit(value, VOC, None, names, keep)
    return value


def is_annotation_path(path: Path) -> bool:
    return path.suffix.lower() == ".json" or is_voc_split(path)


def _images_folder(value, root: Path, file: Path, key: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise DatasetError(f"{file}: '{key}_images' / 'images' must be a folder path (text), got {value!r}"[:300])
    folder = Path(value).expanduser()
    folder = folder if folder.is_absolute() else (root / folder).resolve()
    if not folder.is_dir():
        raise DatasetError(f"{file}: the images folder {folder} of '{key}' does not exist")
    return str(folder)
