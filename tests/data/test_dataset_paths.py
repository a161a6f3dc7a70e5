"""No path built from dataset content leaves its root: COCO file_names, VOC ids and <filename>s in relative ('..'),
absolute, backslash and mixed-separator forms, and through a link inside the dataset that points out of it, neither
read (training's split) nor written (the converter's --out)."""

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from utils.data.annotation_rows import path_inside
from utils.data.config import load_data_config
from utils.data.convert import ConvertOptions, convert_dataset

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder

# Each form reaches tmp/outside/x.jpg (or outside/x.xml) from the images folder root/<sub>: `up` climbs from
# there to tmp. The absolute form is filled in per test; 'linked' goes through root/<sub>/link -> tmp/outside.
FORMS = {
    "relative": "{up}/outside/x",
    "absolute": "{tmp}/outside/x",
    "backslash": "{upb}\\outside\\x",
    "mixed": "sub/..\\{upb}\\outside/x",
    "linked": "link/x",
}


def _name(form: str, tmp: Path, depth: int) -> str:
    return FORMS[form].format(up="/".join([".."] * depth), upb="\\".join([".."] * depth), tmp=tmp)


def _jpg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((50, 100, 3), 90, np.uint8))


def _outside(tmp: Path) -> Path:
    """tmp/outside: an image and a VOC XML a hostile name points at, which nothing may read or replace."""
    folder = tmp / "outside"
    _jpg(folder / "x.jpg")
    (folder / "x.xml").write_text(
        "<annotation><filename>x.jpg</filename><size><width>100</width><height>50</height></size><object>"
        "<name>dog</name><bndbox><xmin>2</xmin><ymin>2</ymin><xmax>40</xmax><ymax>40</ymax></bndbox></object>"
        "</annotation>\n"
    )
    (folder / "x.txt").write_text("a user's own file\n")  # where an escaped label would be written
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("form", FORMS)
def test_path_inside_refuses_every_form(tmp_path, form):
    folder = tmp_path / "root" / "images"
    folder.mkdir(parents=True)
    _outside(tmp_path)
    (folder / "link").symlink_to(tmp_path / "outside")
    assert path_inside(folder, _name(form, tmp_path, 2) + ".jpg") is None
    assert path_inside(folder, "a/b.jpg") == folder / "a" / "b.jpg"
    assert path_inside(folder, "a\\b.jpg") == folder / "a" / "b.jpg"  # Windows separators, inside: kept


def test_a_linked_images_folder_is_still_inside(tmp_path):
    _jpg(tmp_path / "real" / "a.jpg")
    (tmp_path / "images").symlink_to(tmp_path / "real")
    assert path_inside(tmp_path / "images", "a.jpg") == tmp_path / "images" / "a.jpg"


def _coco(tmp: Path, form: str) -> Path:
    root = tmp / "coco"
    _jpg(root / "images" / "a.jpg")
    (root / "images" / "link").symlink_to(tmp / "outside")
    names = ["a.jpg", _name(form, tmp, 2) + ".jpg"]
    images = [{"id": i, "file_name": n, "width": 100, "height": 50} for i, n in enumerate(names)]
    anns = [{"id": i, "image_id": i, "category_id": 1, "bbox": [2, 2, 30, 30], "iscrowd": 0} for i in range(2)]
    (root / "ann.json").write_text(
        json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "dog"}]})
    )
    file = tmp / "coco.yaml"
    file.write_text(yaml.safe_dump({"path": str(root), "train": "ann.json", "val": "ann.json", "images": "images"}))
    return file


def _voc(tmp: Path, form: str, where: str) -> Path:
    """A VOC root whose second id (where='id') or second XML's <filename> (where='filename') takes the form."""
    root = tmp / "VOC"
    for sub in ("Annotations", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    _jpg(root / "JPEGImages" / "a.jpg")
    _jpg(root / "JPEGImages" / "b.jpg")
    for sub in ("Annotations", "JPEGImages"):
        (root / sub / "link").symlink_to(tmp / "outside")
    xml = (tmp / "outside" / "x.xml").read_text()
    (root / "Annotations" / "a.xml").write_text(xml.replace("x.jpg", "a.jpg"))
    hostile = _name(form, tmp, 2)
    if where == "id":
        ids = ["a", hostile]
    else:
        (root / "Annotations" / "b.xml").write_text(xml.replace("x.jpg", hostile + ".jpg"))
        os.remove(root / "JPEGImages" / "b.jpg")  # nor does the id's own image stand in
        ids = ["a", "b"]
    (root / "ImageSets" / "Main" / "train.txt").write_text("\n".join(ids) + "\n")
    file = tmp / "voc.yaml"
    file.write_text(yaml.safe_dump({"path": str(root), "train": "ImageSets/Main/train.txt", "names": ["dog"]}))
    return file


DATASETS = {
    "coco file_name": lambda tmp, form: _coco(tmp, form),
    "voc id": lambda tmp, form: _voc(tmp, form, "id"),
    "voc filename": lambda tmp, form: _voc(tmp, form, "filename"),
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", DATASETS)
def test_no_dataset_path_leaves_its_root(tmp_path, kind, form, log):
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    data = DATASETS[kind](tmp_path, form)
    split = load_data_config(data)["train"]
    found = split.annotations()
    read = found.images + found.sources
    assert all(str(outside) not in os.path.realpath(p) for p in read), read  # nothing read from outside
    assert [Path(p).name for p in found.images] == ["a.jpg"]
    assert "WARNING" in log.text and "skipped" in log.text  # the hostile entry is said, not silently dropped

    existing = {str(p) for p in tmp_path.rglob("*")}
    out = tmp_path / "out" / "converted"
    convert_dataset(ConvertOptions(data=data, out=out))
    convert_dataset(ConvertOptions(data=data, out=tmp_path / "out" / "copied", copy=True))
    assert _snapshot(outside) == before  # no label (or link) written over the user's file
    new = [p for p in tmp_path.rglob("*") if str(p) not in existing]
    assert new and all(p.relative_to(tmp_path).parts[0] in ("out", "yolo-cache") for p in new), new
    for folder in (out, tmp_path / "out" / "copied"):
        labels = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.txt"))
        assert labels == ["labels/train/a.txt"]
        assert all(os.path.realpath(p).startswith(str(folder)) for p in folder.rglob("*") if not p.is_symlink())
