"""Hostile or inconsistent datasets as training and the converter read them: numbers out of range, class names
that would forge log lines, one stem for two images, one name for two categories, annotated sizes that are not the
image's, files that are not images, a killed conversion's leftovers and a conversion that writes nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from utils.data.config import load_data_config
from utils.data.convert import OWNER, ConvertOptions, convert_dataset
from utils.data.dataset import LoadImagesAndLabels
from utils.errors import DatasetError

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder


def _jpg(path: Path, w: int = 100, h: int = 50) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((h, w, 3), 90, np.uint8))


def _dataset(tmp: Path, files: list[str], images=None, categories=None, names=None, raw: str | None = None) -> Path:
    """A COCO dataset of 100x50 images (one dog box each) and its data YAML; images/categories replace the JSON's."""
    root = tmp / "src"
    for name in files:
        _jpg(root / "images" / name)
    images = images or [{"id": i, "file_name": n, "width": 100, "height": 50} for i, n in enumerate(files)]
    anns = [{"id": i, "image_id": im["id"], "category_id": 1, "bbox": [2, 2, 30, 20]} for i, im in enumerate(images)]
    content = {"images": images, "annotations": anns, "categories": categories or [{"id": 1, "name": "dog"}]}
    (root / "ann.json").write_text(raw if raw is not None else json.dumps(content))
    data = {"path": str(root), "train": "ann.json", "val": "ann.json", "images": "images"}
    file = tmp / "data.yaml"
    file.write_text(yaml.safe_dump({**data, **({"names": names} if names is not None else {})}))
    return file


@pytest.mark.parametrize(
    "field", ['"id": %s', '"width": %s', '"bbox": [1, 2, 3, %s]', '"category_id": %s', '"iscrowd": %s']
)
@pytest.mark.parametrize("number", ["1" + "0" * 400, "9" * 5000, "1e400"], ids=["beyond-float", "5000-digits", "1e400"])
def test_a_number_python_cannot_convert_in_any_field_is_one_line(tmp_path, field, number):
    good = '{"id": 1, "file_name": "a.jpg", "width": 100, "height": 50}'
    ann = '{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "iscrowd": 0}'
    key = field.split(":")[0]
    text = f'{{"images": [{good}], "annotations": [{ann}], "categories": [{{"id": 1, "name": "dog"}}]}}'
    target = ann if key in ('"bbox"', '"category_id"', '"iscrowd"') else good
    changed = target.replace(next(p for p in target[1:-1].split(", ") if p.startswith(key)), field % number, 1)
    file = _dataset(tmp_path, ["a.jpg"], raw=text.replace(target, changed), names=["dog"])
    with pytest.raises(DatasetError, match="outside the range|beyond the range of a float") as e:
        convert_dataset(ConvertOptions(data=file, out=tmp_path / "out"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "name", ["dog\nERROR: forged", "dog\x1b[2J", "dog\u202eevil", "x" * 300], ids=["newline", "escape", "bidi", "long"]
)
@pytest.mark.parametrize("where", ["yaml", "json"])
def test_class_names_from_datasets_are_checked_where_read(tmp_path, name, where):
    categories = [{"id": 1, "name": name if where == "json" else "dog"}]
    file = _dataset(tmp_path, ["a.jpg"], categories=categories, names=[name] if where == "yaml" else None)
    with pytest.raises(DatasetError, match="class name 0") as e:
        load_data_config(file)
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value)


def test_two_categories_of_one_name_and_names_given_twice_are_errors(tmp_path):
    cats = [{"id": 1, "name": "dog"}, {"id": 2, "name": "dog"}]
    with pytest.raises(DatasetError, match="categories 1 and 2 are both named 'dog'"):
        load_data_config(_dataset(tmp_path, ["a.jpg"], categories=cats))
    with pytest.raises(DatasetError, match="'dog' is given twice"):
        load_data_config(_dataset(tmp_path, ["a.jpg"], names=["dog", "dog"]))


def test_two_images_of_one_stem_are_refused_by_the_converter(tmp_path):
    file = _dataset(tmp_path, ["x.jpg", "x.png", "y.jpg"])
    with pytest.raises(DatasetError, match=r"x.jpg and .*x.png would share the label file labels/train/x.txt"):
        convert_dataset(ConvertOptions(data=file, out=tmp_path / "out"))
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("size", [(200, 100), (100, 60), (50, 100)], ids=["doubled", "taller", "swapped"])
def test_an_annotated_size_that_is_not_the_images_is_left_out(tmp_path, size, log):
    images = [
        {"id": 1, "file_name": "a.jpg", "width": 100, "height": 50},
        {"id": 2, "file_name": "b.jpg", "width": size[0], "height": size[1]},
    ]
    file = _dataset(tmp_path, ["a.jpg", "b.jpg"], images=images)
    dataset = LoadImagesAndLabels(load_data_config(file)["train"], img_size=64, nc=1)
    assert [Path(f).name for f in dataset.im_files] == ["a.jpg"]
    assert f"gives its size as {size[0]}x{size[1]} but the image is 100x50" in log.text
    result = convert_dataset(ConvertOptions(data=file, out=tmp_path / "out"))
    assert result.images["train"] == 1 and sorted(p.name for p in (tmp_path / "out" / "labels").rglob("*")) == [
        "a.txt",
        "train",
    ]
    assert "left out 1 images training would not use" in log.text


@pytest.mark.parametrize("copy", [False, True])
def test_files_that_are_not_images_are_checked_before_copying(tmp_path, copy, log):
    file = _dataset(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])
    images = tmp_path / "src" / "images"
    with open(images / "b.jpg", "r+b") as f:
        f.truncate(2 << 30)  # sparse: 2 GB on paper, nothing on disk
    (images / "c.jpg").write_bytes(b"not an image at all")
    result = convert_dataset(ConvertOptions(data=file, out=tmp_path / "out", copy=copy))
    assert result.images["train"] == 1
    written = sorted(p.name for p in (tmp_path / "out" / "images").rglob("*.jpg"))
    assert written == ["a.jpg"] and "left out 2 images" in log.text
    assert sum(p.stat().st_blocks for p in (tmp_path / "out").rglob("*") if p.is_file()) < 2048  # under 1 MB


def test_a_conversion_that_writes_no_image_is_an_error(tmp_path):
    file = _dataset(tmp_path, ["a.jpg"])
    (tmp_path / "src" / "images" / "a.jpg").write_bytes(b"broken")
    with pytest.raises(DatasetError, match="no image of the train split"):
        convert_dataset(ConvertOptions(data=file, out=tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    cli = [sys.executable, "convert_dataset.py", "--data", str(file), "--out", str(tmp_path / "out")]
    run = subprocess.run(cli, capture_output=True, text=True, cwd=Path(__file__).parents[2], check=False)
    assert run.returncode == 1 and run.stdout.count("ERROR:") == 1, run.stdout + run.stderr


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_conversions_private_folder_is_removed_by_the_next(tmp_path, log):
    file = _dataset(tmp_path, ["a.jpg"])
    me = {"host": os.uname().nodename, "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    left = {
        "killed": {**me, "pid": _dead_pid()},
        "running": {**me, "pid": os.getpid()},
        "foreign": {**me, "host": "elsewhere", "pid": _dead_pid()},
    }
    for name, owner in left.items():
        (tmp_path / f".out.{name}.tmp").mkdir()
        (tmp_path / f".out.{name}.tmp" / OWNER).write_text(json.dumps(owner))
    (tmp_path / ".out.mine.tmp").mkdir()  # no owner file: not ours to remove
    convert_dataset(ConvertOptions(data=file, out=tmp_path / "out"))
    assert sorted(p.name for p in tmp_path.glob(".out.*")) == [".out.foreign.tmp", ".out.mine.tmp", ".out.running.tmp"]
    assert "left by a conversion that was killed" in log.text
    assert not list((tmp_path / "out").rglob(OWNER))
