"""COCO JSON `segmentation` for segment training: polygons (several pieces of one object joined), RLE masks
(checked before pycocotools decodes them), crowd regions out of training, and the converter's polygon rows."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from pycocotools import mask as coco_mask

from utils.data.coco_segments import join_pieces
from utils.data.config import load_data_config
from utils.data.convert import ConvertOptions, convert_dataset
from utils.data.dataset import LoadImagesAndLabels
from utils.data.polygons import polygons_to_masks

pytestmark = pytest.mark.usefixtures("cache_dir")


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return (a & b).sum() / max((a | b).sum(), 1)


def test_join_pieces_fills_as_the_pieces_do():
    a = np.array([[10, 10], [30, 10], [30, 30], [10, 30]], np.float64)
    b = a + (40, 20)
    c = np.array([[5, 50], [20, 50], [12, 62]], np.float64)
    joined = join_pieces([a, b, c])
    assert len(joined) == 4 + (4 + 2) + (3 + 2)  # each other piece: its vertices, back to its start, the bridge
    one = polygons_to_masks([joined], (80, 80), ratio=1)[0]
    apart = polygons_to_masks([a, b, c], (80, 80), ratio=1).max(0)
    assert not (apart & ~one).any()  # all of each piece
    bridges = np.linalg.norm(a[2] - b[0]) + np.linalg.norm(a[3] - c[1])  # the closest vertices
    # and a line of pixels along each bridge (it has no area), and OpenCV's edge pixels taken a pixel further out
    assert (one & ~cv2.dilate(apart, np.ones((3, 3), np.uint8))).sum() <= bridges + 4
    # at the prototype resolution the bridges' pixels count as outline (half covered): a mask pixel whose cover is
    # at the half-way mark may tip, nothing more
    at_ratio = polygons_to_masks([joined], (80, 80))[0], polygons_to_masks([a, b, c], (80, 80)).max(0)
    assert not (at_ratio[1] & ~at_ratio[0]).any() and (at_ratio[0] != at_ratio[1]).sum() <= 2


@pytest.fixture
def coco128(shared, tmp_path) -> Path:
    root = shared / "datasets" / "coco128"
    return _yaml(
        tmp_path, path=str(root), train="annotations/instances_train2017.json", train_images="images/train2017"
    )


def _yaml(folder: Path, **content) -> Path:
    file = folder / "data.yaml"
    file.write_text(yaml.safe_dump(content, sort_keys=False))
    return file


def test_coco128_outlines_cover_the_official_masks(coco128, shared, log):
    cfg = load_data_config(coco128)
    ds = LoadImagesAndLabels(cfg["train"], img_size=320, label_rows="polygon", nc=cfg["nc"])
    assert sum(len(x) for x in ds.labels) == 929 and all(len(s) >= 3 for image in ds.segments for s in image)
    assert "10 crowd annotations left out of training" in log.text
    data = json.loads((shared / "datasets/coco128/annotations/instances_train2017.json").read_text())
    by_file = {i["file_name"]: i for i in data["images"]}
    ious, pieces = [], 0
    for file, segments in zip(ds.im_files[:40], ds.segments[:40]):
        info = by_file[Path(file).name]
        w, h = info["width"], info["height"]
        objects = [a for a in data["annotations"] if a["image_id"] == info["id"] and not a["iscrowd"]]
        objects.sort(key=lambda a: a["id"])
        for a, points in zip(objects, segments):  # annotation order is row order
            pieces += len(a["segmentation"]) > 1
            official = coco_mask.decode(coco_mask.frPyObjects(a["segmentation"], h, w)).max(-1).astype(bool)
            ours = polygons_to_masks([points.astype(np.float64) * (w, h)], (h, w), ratio=1)[0].astype(bool)
            if official.sum() > 400:
                ious.append(iou(ours, official))
    # the rest is where pycocotools and OpenCV put a boundary pixel: it weighs most in thin objects
    assert pieces > 5 and len(ious) > 100 and min(ious) > 0.75 and np.median(ious) > 0.95


def rle_json(tmp_path: Path, segmentation, size=(60, 40)) -> Path:
    (tmp_path / "images").mkdir()
    assert cv2.imwrite(str(tmp_path / "images" / "a.png"), np.full((size[1], size[0], 3), 90, np.uint8))
    anns = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 5, 20, 20], "iscrowd": 0, "segmentation": seg}
        for seg in segmentation
    ]
    info = {"id": 1, "file_name": "a.png", "width": size[0], "height": size[1]}
    data = {"images": [info], "annotations": anns, "categories": [{"id": 1, "name": "thing"}]}
    (tmp_path / "a.json").write_text(json.dumps(data))
    return _yaml(tmp_path, path=str(tmp_path), train="a.json", train_images="images")


def square_mask(h: int = 40, w: int = 60) -> np.ndarray:
    mask = np.zeros((h, w), np.uint8)
    mask[5:25, 10:30] = 1
    mask[30:36, 40:50] = 1  # a second piece
    return mask


def test_rle_masks_become_outlines(tmp_path):
    mask = square_mask()
    compressed = coco_mask.encode(np.asfortranarray(mask))
    compressed["counts"] = compressed["counts"].decode()
    flat = mask.T.ravel()  # uncompressed RLE: runs over the column-major pixels, starting with zeros
    change = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate(([0], change, [flat.size]))).tolist()
    uncompressed = {"size": [40, 60], "counts": runs if flat[0] == 0 else [0, *runs]}
    cfg = load_data_config(rle_json(tmp_path, [compressed, uncompressed]))
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, label_rows="polygon", nc=1)
    assert len(ds.segments[0]) == 1  # the two annotations are the same object twice: a duplicate row is dropped
    ours = polygons_to_masks([ds.segments[0][0].astype(np.float64) * (60, 40)], (40, 60), ratio=1)[0]
    assert iou(ours.astype(bool), mask.astype(bool)) > 0.9


@pytest.mark.parametrize(
    "rle, reason",
    [
        ({"size": [41, 60], "counts": [2460]}, "RLE masks whose size disagrees with their image (box only)"),
        ({"size": [40, 60], "counts": [100, 2000]}, "RLE masks whose runs do not cover their size exactly"),
        ({"size": [40, 60], "counts": "0`0"}, "RLE masks whose runs do not cover their size exactly"),
        ({"size": [40, 60]}, "RLE masks whose runs do not cover their size exactly"),
        ({"counts": [2400]}, "RLE masks without a [height, width] size"),
    ],
)
def test_bad_rle_is_counted_and_the_box_kept(tmp_path, log, rle, reason):
    cfg = load_data_config(rle_json(tmp_path, [rle]))
    ds = LoadImagesAndLabels(cfg["train"], img_size=64, label_rows="polygon", nc=1)
    assert f"skipped 1 {reason}" in log.text
    assert ds.segments[0][0].shape == (0, 2)  # trains as a box-only row: an empty mask
    np.testing.assert_allclose(ds.labels[0], [[0, 20 / 60, 15 / 40, 20 / 60, 20 / 40]], atol=1e-6)


def test_converter_writes_polygon_rows_that_train_the_same(coco128, tmp_path):
    out = tmp_path / "converted"
    result = convert_dataset(ConvertOptions(data=coco128, out=out, segments=True))
    rows = [line.split() for f in (out / "labels" / "train").glob("*.txt") for line in f.read_text().splitlines()]
    assert len(rows) == 929 and all(len(r) >= 7 and len(r) % 2 == 1 for r in rows)  # every object a polygon
    direct_cfg, converted_cfg = load_data_config(coco128), load_data_config(result.yaml_file)
    direct = LoadImagesAndLabels(direct_cfg["train"], img_size=320, label_rows="polygon", nc=80)
    converted = LoadImagesAndLabels(converted_cfg["train"], img_size=320, label_rows="polygon", nc=80)
    assert [Path(f).name for f in direct.im_files] == [Path(f).name for f in converted.im_files]
    for a, b, sa, sb in zip(direct.labels, converted.labels, direct.segments, converted.segments):
        np.testing.assert_array_equal(a, b)
        assert all(np.array_equal(x, y) for x, y in zip(sa, sb))
