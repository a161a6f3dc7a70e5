"""The synthetic shapes dataset: deterministic, quick to make, valid labels that match the drawn shapes."""

from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from utils.data.dataset import LoadImagesAndLabels
from utils.data.shapes import CLASSES, COLORS, N_TRAIN, N_VAL, generate_shapes
from utils.errors import ShapesError
from utils.files import REPO_ROOT as ROOT


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def default_set(tmp_path_factory) -> Path:
    """The dataset with the shapes.yaml defaults (how fast it is made is for benchmarks, not tests)."""
    return generate_shapes(tmp_path_factory.mktemp("shapes") / "shapes")


@pytest.mark.slow
def test_default_dataset(default_set, tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_CACHE_DIR", str(tmp_path))
    root = default_set
    for split, n in (("train", N_TRAIN), ("val", N_VAL)):
        ds = LoadImagesAndLabels(root / "images" / split, img_size=256, nc=len(CLASSES))
        assert len(ds) == n and (ds.shapes == 256).all()  # nothing corrupt, every image 256x256
        counts = [len(lb) for lb in ds.labels]
        assert min(counts) >= 1 and max(counts) <= 5
        labels = np.concatenate(ds.labels)
        assert sorted(set(labels[:, 0].astype(int).tolist())) == list(range(len(CLASSES)))  # every class present
        assert labels[:, 3:].min() > 0.08 and labels[:, 3:].max() < 0.45  # not tiny, not huge


@pytest.mark.slow
def test_labels_match_drawn_shapes(default_set):
    root = default_set
    checked = 0
    for label_file in sorted((root / "labels" / "val").glob("*.txt"))[:20]:
        image = cv2.imread(str(root / "images" / "val" / f"{label_file.stem}.jpg")).astype(int)
        for line in label_file.read_text().splitlines():
            cls, cx, cy, w, h = (float(v) for v in line.split())
            x1, y1, x2, y2 = (round(v * 256) for v in (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
            crop = image[y1:y2, x1:x2]
            near = [(np.abs(crop - np.array(c)).sum(-1) < 110).mean() for c in COLORS]
            assert int(np.argmax(near)) == int(cls) and near[int(cls)] > 0.25, (label_file.name, line, near)
            # the shape reaches all four sides of its box (within 3 px: anti-aliased star tips are faint)
            mask = np.abs(crop - np.array(COLORS[int(cls)])).sum(-1) < 110
            assert mask[:3].any() and mask[-3:].any() and mask[:, :3].any() and mask[:, -3:].any()
            checked += 1
    assert checked >= 30


def test_deterministic_and_seeded(tmp_path):
    a = files(generate_shapes(tmp_path / "a", 12, 4, 128, seed=5))
    b = files(generate_shapes(tmp_path / "b", 12, 4, 128, seed=5))
    c = files(generate_shapes(tmp_path / "c", 12, 4, 128, seed=6))
    assert len(a) == 2 * (12 + 4) and a == b
    assert a.keys() == c.keys() and all(a[k] != c[k] for k in a if k.endswith(".jpg"))
    # val does not depend on the size of train
    d = files(generate_shapes(tmp_path / "d", 6, 4, 128, seed=5))
    assert {k: v for k, v in d.items() if "val" in k} == {k: v for k, v in a.items() if "val" in k}
    assert len(d) == 2 * (6 + 4)
    assert not list(tmp_path.glob(".*tmp*"))  # the staging folder is gone


def test_shapes_yaml_matches_generator():
    data = yaml.safe_load((ROOT / "data" / "shapes.yaml").read_text())
    assert data["generate"] == "shapes" and data["nc"] == len(CLASSES) and tuple(data["names"]) == CLASSES
    assert data["path"] == "../datasets/shapes" and (data["train"], data["val"]) == ("images/train", "images/val")


def test_generating_into_an_existing_dataset_changes_nothing(tmp_path):
    root = generate_shapes(tmp_path / "s", 2, 2, 64)
    (root / "labels" / "train.yolo-labels.npz").write_bytes(b"a cache")
    (root / "labels" / "train.cache").write_bytes(b"YOLOv5's own cache")
    before = files(root)
    with pytest.raises(ShapesError, match="not empty") as e:
        generate_shapes(root, 2, 2, 64)  # regenerating was a delete-and-replace: now refused, in one line
    assert "\n" not in str(e.value) and files(root) == before
    assert not list(tmp_path.glob(".*tmp*"))
    (tmp_path / "empty").mkdir()
    assert len(files(generate_shapes(tmp_path / "empty", 2, 2, 64))) == 8  # an empty folder is fine


def test_polygon_set_labels_the_same_images_with_outlines(tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_CACHE_DIR", str(tmp_path / "cache"))
    boxes = generate_shapes(tmp_path / "boxes", 6, 2, 128, seed=3)
    polygons = generate_shapes(tmp_path / "polygons", 6, 2, 128, seed=3, polygons=True)
    a, b = files(boxes), files(polygons)
    assert {k: v for k, v in a.items() if k.endswith(".jpg")} == {k: v for k, v in b.items() if k.endswith(".jpg")}
    rows = [line.split() for k, v in b.items() if k.endswith(".txt") for line in v.decode().splitlines()]
    assert rows and all(len(r) in (1 + 2 * 3, 1 + 2 * 4, 1 + 2 * 10, 1 + 2 * 12, 1 + 2 * 32) for r in rows)
    seg = LoadImagesAndLabels(polygons / "images" / "train", img_size=128, nc=5, label_rows="polygon")
    det = LoadImagesAndLabels(boxes / "images" / "train", img_size=128, nc=5)
    for seg_labels, det_labels in zip(seg.labels, det.labels):  # a polygon's box is the shape's box
        np.testing.assert_allclose(seg_labels, det_labels, atol=2e-6)
    for i in range(len(seg)):  # each mask lies on its class's colour in the image, and its box is the label's
        image, labels, _, _, masks = seg[i]
        small = cv2.resize(image.numpy().transpose(1, 2, 0)[..., ::-1], (32, 32), interpolation=cv2.INTER_AREA)
        for label, mask in zip(labels.numpy(), masks.numpy().astype(bool)):
            distance = [np.abs(small[mask].astype(int) - c).sum(-1) for c in COLORS]
            assert (np.argmin(distance, 0) == label[1]).mean() > 0.8
            ys, xs = np.nonzero(mask)
            cx, cy, w, h = label[2:] * 32
            # atol 1.5: a triangle's tip covers under half of its last mask pixel, which is left out (1.2 here)
            np.testing.assert_allclose(
                [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1],
                [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2],
                atol=1.5,
            )


def test_shapes_seg_yaml_generates_polygons():
    data = yaml.safe_load((ROOT / "data" / "shapes-seg.yaml").read_text())
    assert data["generate"] == "shapes-seg" and tuple(data["names"]) == CLASSES[: data["nc"]]  # the quickstart's 3
    assert data["path"] == "../datasets/shapes-seg3" and (data["train"], data["val"]) == ("images/train", "images/val")
