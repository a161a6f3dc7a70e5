"""The converter: COCO JSON / VOC splits written as YOLO labels into a new folder, the same labels as training on
the annotations directly, never into or over the source."""

import hashlib
import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

import convert_dataset
from utils.data.config import load_data_config
from utils.data.convert import ConvertOptions
from utils.data.convert import convert_dataset as convert
from utils.data.dataset import LoadImagesAndLabels
from utils.errors import DatasetError

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder


@pytest.fixture
def source(tmp_path) -> Path:
    """A COCO dataset (images in a subfolder, one background) and its data YAML; returns the YAML."""
    root = tmp_path / "src"
    (root / "images" / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("a.jpg", "b.jpg", "sub/c.jpg"):
        assert cv2.imwrite(str(root / "images" / name), rng.integers(0, 255, (50, 100, 3), dtype=np.uint8))
    images = [
        {"id": i, "file_name": n, "width": 100, "height": 50} for i, n in enumerate(["a.jpg", "b.jpg", "sub/c.jpg"])
    ]
    boxes = [
        (0, 1, [10.3, 10.7, 20.1, 10.9]),
        (0, 2, [33.3, 1, 40, 30]),
        (2, 1, [90, 40, 20, 20]),
        (2, 1, [1, 2, 3, 4]),
    ]
    anns = [{"id": k, "image_id": i, "category_id": c, "bbox": b, "iscrowd": 0} for k, (i, c, b) in enumerate(boxes)]
    cats = [{"id": 1, "name": "dog"}, {"id": 2, "name": "cat"}]
    (root / "ann.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    file = tmp_path / "src.yaml"
    file.write_text(yaml.safe_dump({"path": str(root), "train": "ann.json", "val": "ann.json", "images": "images"}))
    return file


def digest(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("copy", [False, True])
def test_converted_labels_equal_direct_ones(source, tmp_path, copy):
    before = digest(source.parent / "src")
    out = tmp_path / "out"
    result = convert(ConvertOptions(data=source, out=out, copy=copy))
    assert result.yaml_file == out / "data.yaml" and result.images == {"train": 3, "val": 3}
    assert digest(source.parent / "src") == before  # the source is only read
    image = out / "images" / "train" / "sub" / "c.jpg"
    assert image.is_symlink() != copy and image.read_bytes() == (source.parent / "src/images/sub/c.jpg").read_bytes()
    assert (out / "labels" / "train" / "b.txt").read_text() == ""  # a background keeps an empty label file
    converted = load_data_config(result.yaml_file)
    assert (
        converted["names"] == ["dog", "cat"]
        and Path(converted["ann_json"]).read_bytes() == (source.parent / "src" / "ann.json").read_bytes()
    )
    direct = LoadImagesAndLabels(load_data_config(source)["train"], img_size=64, nc=2)
    again = LoadImagesAndLabels(converted["train"], img_size=64, nc=2)
    assert [os.path.relpath(f, out / "images" / "train") for f in again.im_files] == ["a.jpg", "b.jpg", "sub/c.jpg"]
    assert len(direct.labels) == 3 and all(np.array_equal(a, b) for a, b in zip(direct.labels, again.labels))


def test_target_must_be_new_and_outside_the_source(source, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    for out, message in (
        (tmp_path / "full", "exists and is not an empty folder"),
        (tmp_path / "full" / "keep.txt", "exists and is not an empty folder"),
        (source.parent / "src" / "yolo", "overlaps the source"),
        (source.parent, "overlaps the source"),
    ):
        with pytest.raises(DatasetError, match=message):
            convert(ConvertOptions(data=source, out=out))
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine" and not (source.parent / "src" / "yolo").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    convert(ConvertOptions(data=source, out=empty))  # an empty folder is fine
    assert (empty / "data.yaml").is_file()


def test_failure_leaves_nothing_and_cli_is_one_line(source, tmp_path, log):
    plain = tmp_path / "plain.yaml"
    (tmp_path / "plain" / "images").mkdir(parents=True)
    plain.write_text(yaml.safe_dump({"path": str(tmp_path / "plain"), "train": "images", "names": ["a"]}))
    assert convert_dataset.main(["--data", str(plain), "--out", str(tmp_path / "new")]) == 1
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new.*"))
    assert "ERROR: " in log.text and "names no COCO JSON or VOC split" in log.text
