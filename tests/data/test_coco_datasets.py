"""COCO JSON splits: labels converted in memory (crowd, clipping, bad entries), class names from the categories,
the val JSON as ann_json, the label cache, bad files as one line, and COCO128's JSON against its YOLO labels."""

import hashlib
import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from utils.data import coco_labels
from utils.data.annotations import AnnotatedSplit
from utils.data.config import load_data_config
from utils.data.dataset import LoadImagesAndLabels
from utils.data.loader import create_dataloader
from utils.errors import DatasetError

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder


def write_images(folder: Path, names: list[str], w: int = 100, h: int = 50) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        assert cv2.imwrite(str(folder / name), np.full((h, w, 3), 90, np.uint8))


def coco_json(path: Path, images: list, annotations: list, categories=None) -> Path:
    categories = categories or [{"id": 3, "name": "cat"}, {"id": 1, "name": "dog"}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def image(iid: int, name: str, w: int = 100, h: int = 50) -> dict:
    return {"id": iid, "file_name": name, "width": w, "height": h}


def ann(aid: int, iid: int, cid: int, bbox, crowd: int = 0) -> dict:
    return {"id": aid, "image_id": iid, "category_id": cid, "bbox": bbox, "iscrowd": crowd}


def data_yaml(root: Path, **content) -> Path:
    file = root / "data.yaml"
    file.write_text(yaml.safe_dump({"path": str(root), **content}, sort_keys=False))
    return file


@pytest.fixture
def small(tmp_path) -> Path:
    """3 images (c.jpg without annotations) and every kind of annotation to keep, clip, leave out or skip."""
    write_images(tmp_path / "images" / "train", ["a.jpg", "b.jpg", "c.jpg"])
    annotations = [
        ann(1, 1, 1, [10, 10, 20, 10]),  # dog: kept
        ann(2, 1, 3, [0, 0, 50, 50], crowd=1),  # crowd: left out of training
        ann(3, 2, 3, [90, 40, 20, 20]),  # cat overshooting the corner: clipped to (90, 40)-(100, 50)
        ann(4, 2, 3, [200, 10, 5, 5]),  # outside the image: no area left
        ann(5, 2, 1, [float("nan"), 1, 2, 2]),  # NaN
        ann(6, 2, 1, [5, 5, -3, 4]),  # negative width
        ann(7, 2, 9, [5, 5, 3, 4]),  # unknown category id
        ann(8, 77, 1, [5, 5, 3, 4]),  # unknown image id
    ]
    images = [image(1, "a.jpg"), image(2, "b.jpg"), image(3, "c.jpg"), image(4, "gone.jpg")]
    coco_json(tmp_path / "annotations" / "train.json", images, annotations)
    return tmp_path


def test_coco_split_labels_and_counts(small, log):
    cfg = load_data_config(data_yaml(small, train="annotations/train.json", images="images/train"))
    assert isinstance(cfg["train"], AnnotatedSplit) and cfg["names"] == ["dog", "cat"]  # categories in id order
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, nc=cfg["nc"])
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg", "c.jpg"]  # c.jpg: a background
    np.testing.assert_allclose(ds.labels[0], [[0, 0.2, 0.3, 0.2, 0.2]], atol=1e-7)
    np.testing.assert_allclose(ds.labels[1], [[1, 0.95, 0.9, 0.1, 0.2]], atol=1e-7)
    assert len(ds.labels[2]) == 0
    text = log.text
    assert "1 crowd annotations left out of training" in text and "1 boxes clipped" in text
    (warning,) = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    for part in (
        "1 images not found under",
        "1 boxes with no area inside their image",
        "2 annotations with a NaN, negative or empty bbox",
        "1 annotations of unknown category ids",
        "1 annotations of image ids not in 'images'",
    ):
        assert part in warning, warning
    assert "3 images, 1 backgrounds, 0 corrupt (2 boxes)" in text


def test_names_restrict_and_reorder_and_ann_json(small):
    cfg = load_data_config(data_yaml(small, train="annotations/train.json", val="annotations/train.json"))
    assert cfg["ann_json"] == cfg["val"]  # categories = classes: the val JSON scores as ann_json (crowd kept)
    cfg = load_data_config(data_yaml(small, train="annotations/train.json", names=["cat"], images="images/train"))
    assert cfg["ann_json"] is None  # a restricted class list cannot be scored against the JSON's categories
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, nc=1)
    assert [lb[:, 0].tolist() for lb in ds.labels] == [[], [0.0], []]  # the dog left out, the cat is class 0
    cfg = load_data_config(
        data_yaml(small, train="annotations/train.json", names=["cat", "dog"], images="images/train")
    )
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, nc=2)
    assert [lb[:, 0].tolist() for lb in ds.labels] == [[1.0], [0.0], []]
    cfg = load_data_config(data_yaml(small, train="annotations/train.json", names=["bird"], images="images/train"))
    with pytest.raises(DatasetError, match="class 'bird' is not a category"):
        LoadImagesAndLabels(cfg["train"], img_size=64, nc=1)


def test_images_folder_defaults_to_the_json_folder(tmp_path):
    write_images(tmp_path / "train", ["a.jpg"])  # Roboflow's layout: the JSON beside its images
    coco_json(tmp_path / "train" / "_annotations.coco.json", [image(5, "a.jpg")], [ann(1, 5, 1, [1, 1, 20, 20])])
    cfg = load_data_config(data_yaml(tmp_path, train="train/_annotations.coco.json"))
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, nc=cfg["nc"])
    assert len(ds.labels[0]) == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ("{oops", "is not valid JSON"),
        ('{"images": [{"id": 1, "file_name": "a.jpg"', "is not valid JSON"),  # truncated
        ("[1, 2]", "is not a COCO annotations file"),
        ('{"images": [], "categories": []}', "no 'categories'"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_broken_json_is_one_line(tmp_path, content, message):
    write_images(tmp_path / "images", ["a.jpg"])
    json_file = tmp_path / "train.json"
    json_file.write_bytes(content if isinstance(content, bytes) else content.encode())
    file = data_yaml(tmp_path, train="train.json", names=["a"], images="images")
    with pytest.raises(DatasetError, match=message) as e:
        LoadImagesAndLabels(load_data_config(file)["train"], img_size=64, nc=1)
    assert "\n" not in str(e.value)


def test_duplicate_image_ids_and_file_names_are_errors(tmp_path):
    write_images(tmp_path / "images", ["a.jpg", "b.jpg"])
    coco_json(tmp_path / "dup.json", [image(1, "a.jpg"), image(1, "b.jpg")], [])
    coco_json(tmp_path / "same.json", [image(1, "a.jpg"), image(2, "a.jpg")], [])
    for name, message in (("dup.json", "image id 1 appears twice"), ("same.json", "both have file_name 'a.jpg'")):
        cfg = load_data_config(data_yaml(tmp_path, train=name, images="images"))
        with pytest.raises(DatasetError, match=message):
            LoadImagesAndLabels(cfg["train"], img_size=64, nc=2)


def test_file_names_outside_the_images_folder_are_skipped(tmp_path, log):
    write_images(tmp_path / "images", ["a.jpg"])
    write_images(tmp_path, ["secret.jpg"])
    names = [image(1, "a.jpg"), image(2, "../secret.jpg"), image(3, str(tmp_path / "secret.jpg"))]
    coco_json(tmp_path / "train.json", names, [ann(1, 2, 1, [1, 1, 5, 5])])
    ds = LoadImagesAndLabels(load_data_config(data_yaml(tmp_path, train="train.json", images="images"))["train"], 64)
    assert [Path(f).name for f in ds.im_files] == ["a.jpg"]
    assert "2 images whose file_name is not a path inside" in log.text


def test_json_too_large_is_refused_before_reading(tmp_path, monkeypatch):
    write_images(tmp_path / "images", ["a.jpg"])
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: 3 GB on paper, nothing on disk
        f.write(b'{"images": [')
        f.truncate(3 << 30)
    monkeypatch.setattr(coco_labels, "read_json", coco_labels.read_json)  # the real bound, not a smaller test one
    cfg = load_data_config(data_yaml(tmp_path, train="big.json", names=["a"], images="images"))
    with pytest.raises(DatasetError, match=r"3221225472 bytes, more than the 2147483648"):
        LoadImagesAndLabels(cfg["train"], img_size=64, nc=1)


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def test_cache_beside_the_json_only_and_rebuilt_for_new_names(small, monkeypatch, log):
    monkeypatch.delenv("YOLO_CACHE_DIR")  # a writable dataset: the cache goes beside the JSON, under our name
    file = data_yaml(small, train="annotations/train.json", images="images/train")
    before = tree_digest(small)
    LoadImagesAndLabels(load_data_config(file)["train"], img_size=64, nc=2)
    added = set(tree_digest(small)) - set(before)
    assert added == {"annotations/train.yolo-labels.npz"} and "New cache created" in log.text
    log.clear()
    LoadImagesAndLabels(load_data_config(file)["train"], img_size=64, nc=2)
    assert "New cache created" not in log.text  # reused
    file = data_yaml(small, train="annotations/train.json", images="images/train", names=["cat", "dog"])
    ds = LoadImagesAndLabels(load_data_config(file)["train"], img_size=64, nc=2)
    assert "New cache created" in log.text and ds.labels[0][0, 0] == 1  # other names: other labels
    after = tree_digest(small)
    assert all(after[k] == v for k, v in before.items() if k != "data.yaml")  # nothing of the user's changed


def test_no_boxes_fails_without_leaving_a_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    write_images(tmp_path / "data" / "images" / "train", ["a.jpg", "b.jpg"])
    coco_json(tmp_path / "data" / "train.json", [image(1, "a.jpg")], [ann(1, 1, 1, [0, 0, 5, 5], crowd=1)])
    cfg = load_data_config(data_yaml(tmp_path / "data", train="train.json", images="images/train"))
    for split, message in (
        (cfg["train"], "no boxes in .*train.json for its 1 images"),
        (str(tmp_path / "data" / "images" / "train"), "no labels found in .*labels/train for the 2 images"),
    ):
        with pytest.raises(DatasetError, match=message):
            create_dataloader(split, 64, 2, 32, nc=2, require_labels=True, workers=0)
    assert sorted(p.name for p in (tmp_path / "data").rglob("*")) == [
        "a.jpg",
        "b.jpg",
        "data.yaml",
        "images",
        "train",
        "train.json",
    ]
    assert not (tmp_path / "xdg").exists()


def test_all_empty_label_files_are_told_so(tmp_path):
    write_images(tmp_path / "images" / "train", ["a.jpg", "b.jpg"])
    (tmp_path / "labels" / "train").mkdir(parents=True)
    for stem in ("a", "b"):
        (tmp_path / "labels" / "train" / f"{stem}.txt").write_text("")
    message = r"all 2 label files in .*labels/train are empty \(background images only, no box\)"
    with pytest.raises(DatasetError, match=message):
        create_dataloader(str(tmp_path / "images" / "train"), 64, 2, 32, require_labels=True, workers=0)


def test_coco128_json_matches_its_yolo_labels(shared, log, tmp_path):
    """COCO128 from its official JSON: the same 929 boxes as its YOLO labels (crowd left out), image by image."""
    coco = shared / "datasets" / "coco128"
    file = tmp_path / "coco128_json.yaml"
    file.write_text(
        yaml.safe_dump(
            {"path": str(coco), "train": "annotations/instances_train2017.json", "images": "images/train2017"}
        )
    )
    cfg = load_data_config(file)
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, nc=cfg["nc"])
    ref = LoadImagesAndLabels(str(coco / "images" / "train2017"), img_size=64, nc=80)
    assert [Path(f).name for f in ds.im_files] == [Path(f).name for f in ref.im_files]
    assert sum(map(len, ds.labels)) == sum(map(len, ref.labels)) == 929
    for a, b in zip(ds.labels, ref.labels):
        order_a, order_b = np.lexsort(a.T[::-1]), np.lexsort(b.T[::-1])
        np.testing.assert_allclose(a[order_a], b[order_b], atol=1e-6)  # the text labels have 6 digits
    assert "10 crowd annotations left out of training" in log.text


def test_read_only_annotations_folder_caches_in_the_user_folder(small, monkeypatch, log):
    monkeypatch.delenv("YOLO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(small / "xdg"))
    file = data_yaml(small, train="annotations/train.json", images="images/train")
    (small / "annotations").chmod(0o555)
    try:
        LoadImagesAndLabels(load_data_config(file)["train"], img_size=64, nc=2)
        assert sorted(p.name for p in (small / "annotations").iterdir()) == ["train.json"]  # honoured even as root
        assert len(list((small / "xdg" / "yolo").glob("*.yolo-labels.npz"))) == 1 and "not writable" in log.text
    finally:
        (small / "annotations").chmod(0o755)
