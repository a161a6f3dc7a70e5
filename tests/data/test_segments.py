"""Segment labels (polygon rows) in the dataset: checked and cached with the boxes, one mask per label row at the
prototype resolution, collated beside the targets; a detect dataset reads the same files as boxes."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from utils.data import label_loading
from utils.data.dataset import LoadImagesAndLabels
from utils.data.loader import create_dataloader
from utils.data.polygons import clip_polygon, polygons_to_masks
from utils.errors import DatasetError

pytestmark = pytest.mark.usefixtures("cache_dir")

TRIANGLE = np.array([[0.2, 0.1], [0.9, 0.4], [0.35, 0.8]])  # normalised vertices
SQUARE = np.array([[0.5, 0.5], [0.75, 0.5], [0.75, 0.75], [0.5, 0.75]])


def polygon_row(cls: int, points: np.ndarray) -> str:
    return f"{cls} " + " ".join(f"{v:.6f}" for v in np.asarray(points).ravel()) + "\n"


def drawn(h: int, w: int, polygons: list[np.ndarray]) -> np.ndarray:
    """A grey image with each normalised polygon filled white."""
    im = np.full((h, w, 3), 60, np.uint8)
    for points in polygons:
        cv2.fillPoly(im, [np.round(points * (w, h)).astype(np.int32)], (255, 255, 255))
    return im


def write_split(root: Path, images: dict[str, np.ndarray], labels: dict[str, str]) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir(parents=True)
    for name, im in images.items():
        assert cv2.imwrite(str(root / "images" / f"{name}.png"), im)
    for name, text in labels.items():
        (root / "labels" / f"{name}.txt").write_text(text)
    return root / "images"


def mask_box(mask: np.ndarray) -> np.ndarray:
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64)


def test_polygon_rows_give_boxes_segments_and_masks(tmp_path):
    images = write_split(
        tmp_path,
        {"a": drawn(120, 200, [TRIANGLE, SQUARE])},
        {"a": polygon_row(0, TRIANGLE) + polygon_row(1, SQUARE) + "2 0.1 0.9 0.1 0.1\n"},
    )
    ds = LoadImagesAndLabels(images, img_size=128, stride=32, label_rows="polygon")
    boxes = ds.labels[0]
    np.testing.assert_allclose(boxes[0], [0, 0.55, 0.45, 0.7, 0.7], atol=1e-6)  # the triangle's enclosing box
    assert [s.shape for s in ds.segments[0]] == [(3, 2), (4, 2), (0, 2)]
    np.testing.assert_allclose(ds.segments[0][0], TRIANGLE, atol=1e-6)
    image, labels, path, shapes, masks = ds[0]
    assert image.shape == (3, 128, 128) and labels.shape == (3, 6) and path.endswith("a.png")
    assert masks.shape == (3, 32, 32) and masks.dtype == torch.uint8 and set(masks.unique().tolist()) <= {0, 1}
    assert masks[2].sum() == 0  # the box-only row has no outline: an empty mask
    # the masks are where the shapes are in the letterboxed image, and their boxes are the labels' boxes
    white = cv2.resize((image[0].numpy() > 160).astype(np.float32), (32, 32), interpolation=cv2.INTER_AREA) >= 0.5
    for j in range(2):
        drawn_mask = white & (masks[j].numpy() | (masks[1 - j].numpy() == 0)).astype(bool)
        overlap = (masks[j].numpy().astype(bool) & drawn_mask).sum() / masks[j].sum().item()
        assert overlap > 0.9
        box = (labels[j, 2:].numpy() * [128, 128, 128, 128]) / 4
        xyxy = np.concatenate((box[:2] - box[2:] / 2, box[:2] + box[2:] / 2))
        np.testing.assert_allclose(mask_box(masks[j].numpy()), xyxy, atol=1.0)
    box_ds = LoadImagesAndLabels(images, img_size=128, stride=32)  # a detect model reads the same file as boxes
    assert box_ds.segments is None and len(box_ds[0]) == 4
    np.testing.assert_array_equal(box_ds.labels[0], ds.labels[0])


def test_segments_come_from_the_cache_and_follow_rect_order(tmp_path, monkeypatch):
    images = write_split(
        tmp_path,
        {"tall": drawn(160, 80, [SQUARE]), "wide": drawn(80, 160, [TRIANGLE])},
        {"tall": polygon_row(0, SQUARE), "wide": polygon_row(0, TRIANGLE)},
    )
    LoadImagesAndLabels(images, img_size=64, label_rows="polygon")

    def fail(*args):
        raise AssertionError("verified again although the cache is valid")

    monkeypatch.setattr(label_loading, "verify_image_label", fail)
    ds = LoadImagesAndLabels(images, img_size=64, batch_size=1, rect=True, label_rows="polygon")
    assert [Path(f).stem for f in ds.im_files] == ["wide", "tall"]  # sorted by aspect ratio, segments with them
    np.testing.assert_allclose(ds.segments[0][0], TRIANGLE, atol=1e-6)
    np.testing.assert_allclose(ds.segments[1][0], SQUARE, atol=1e-6)
    for i, shape in enumerate([(32, 64), (64, 32)]):
        image, labels, _, _, masks = ds[i]
        assert tuple(image.shape[1:]) == shape and masks.shape == (1, shape[0] // 4, shape[1] // 4)


def test_collate_and_loader_carry_masks(tmp_path):
    images = write_split(
        tmp_path,
        {f"{i}": drawn(64, 64, [SQUARE]) for i in range(3)},
        {"0": "", "1": polygon_row(0, SQUARE), "2": polygon_row(0, TRIANGLE) + polygon_row(1, SQUARE)},
    )
    loader, ds = create_dataloader(images, 64, 3, 32, workers=0, label_rows="polygon")
    imgs, targets, paths, shapes, masks = next(iter(loader))
    assert imgs.shape == (3, 3, 64, 64) and targets[:, 0].tolist() == [1, 2, 2]
    assert masks.shape == (3, 16, 16) and masks.dtype == torch.uint8
    for row, mask in zip(ds[2][4], masks[1:]):  # row j of masks belongs to row j of targets
        assert torch.equal(row, mask)
    with pytest.raises(DatasetError, match="has box labels only"):  # said before a segment model trains
        boxes = write_split(tmp_path / "boxes", {"a": drawn(64, 64, [])}, {"a": "0 0.5 0.5 0.2 0.2\n"})
        create_dataloader(boxes, 64, 1, 32, workers=0, label_rows="polygon", require_labels=True)
    with pytest.raises(DatasetError, match="--quad"):
        create_dataloader(images, 64, 4, 32, workers=0, quad=True, label_rows="polygon")
    with pytest.raises(DatasetError, match="label_rows"):
        LoadImagesAndLabels(images, img_size=64, label_rows="keypoints")


@pytest.mark.parametrize(
    "row, reason",
    [
        ("0 0.1 0.1\n", "a polygon of 1 vertices needs at least 3"),  # 2 vertices would be a box row, as in both peers
        ("0 0.1 0.1 0.5 0.1 0.3 0.6 0.2\n", "odd count"),
        ("0 0.1 0.1 0.5 nan 0.3 0.6\n", "non-finite"),
        ("0 10 10 500 10 300 600\n", "normalised"),
    ],
)
def test_bad_polygon_rows_are_one_line(tmp_path, log, row, reason):
    images = write_split(tmp_path, {"bad": drawn(64, 64, []), "good": drawn(64, 64, [SQUARE])}, {"bad": row})
    (tmp_path / "labels" / "good.txt").write_text(polygon_row(0, SQUARE))
    ds = LoadImagesAndLabels(images, img_size=64, label_rows="polygon")
    assert [Path(f).stem for f in ds.im_files] == ["good"]
    assert reason in log.text and "bad.png: ignoring corrupt image/label: line 1:" in log.text


def test_vertices_overshooting_the_edge_are_cut_and_counted(tmp_path, log):
    over = np.array([[-0.005, 0.2], [1.008, 0.2], [0.5, 0.9]])
    images = write_split(tmp_path, {"a": drawn(64, 64, [over])}, {"a": polygon_row(0, over)})
    ds = LoadImagesAndLabels(images, img_size=64, label_rows="polygon")
    assert "2 polygon vertices outside the image clipped to it" in log.text
    points = ds.segments[0][0]
    assert points.min() >= 0 and points.max() <= 1 and len(points) == 5  # the outline cut at both edges
    np.testing.assert_allclose(points, clip_polygon(over, 1, 1), atol=1e-6)
    np.testing.assert_allclose(ds.labels[0][0, 1:], [0.5, 0.55, 1.0, 0.7], atol=1e-6)


def test_polygons_to_masks_covers_half_pixels():
    square = np.array([[8, 8], [24, 8], [24, 24], [8, 24]], np.float64)  # pixels 8..23: mask pixels 2..5
    mask = polygons_to_masks([square, square + 1, square + 3], (32, 32))
    assert mask_box(mask[0]).tolist() == [2, 2, 6, 6] and mask[0].sum() == 16
    assert mask_box(mask[1]).tolist() == [2, 2, 6, 6]  # 9..25: block 2 is 3/4 covered, block 6 a quarter
    assert mask_box(mask[2]).tolist() == [3, 3, 7, 7]  # 11..27: block 2 a quarter, block 6 3/4


def test_mask_areas_are_unbiased():
    # OpenCV fills every pixel an outline touches: counted as filled, small shapes' masks came out 10% too large
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(300):
        centre, radius, n = rng.uniform(30, 90, 2), rng.uniform(3, 25), int(rng.integers(3, 33))
        angles = rng.uniform(0, 7) + np.arange(n) * 2 * np.pi / n
        points = centre + radius * np.stack((np.cos(angles), np.sin(angles)), 1)
        x, y = points.T
        area = abs((x * np.roll(y, -1) - np.roll(x, -1) * y).sum()) / 2 / 16  # in mask pixels (ratio 4)
        ratios.append(polygons_to_masks([points], (128, 128))[0].sum() / area)
    assert abs(np.mean(ratios) - 1) < 0.01


def coco_polygon_labels(shared: Path, root: Path, count: int) -> Path:
    """The first images of COCO128 with YOLO polygon rows written from the official instances JSON (the largest
    piece of each non-crowd object), images linked, not copied."""
    data = json.loads((shared / "datasets/coco128/annotations/instances_train2017.json").read_text())
    classes = {c["id"]: i for i, c in enumerate(sorted(data["categories"], key=lambda c: c["id"]))}
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for image in sorted(data["images"], key=lambda x: x["file_name"])[:count]:
        w, h, rows = image["width"], image["height"], []
        for a in data["annotations"]:
            if a["image_id"] == image["id"] and not a["iscrowd"]:
                piece = np.array(max(a["segmentation"], key=len), np.float64).reshape(-1, 2) / (w, h)
                rows.append(polygon_row(classes[a["category_id"]], piece.clip(0, 1)))
        (root / "images" / image["file_name"]).symlink_to(
            shared / "datasets/coco128/images/train2017" / image["file_name"]
        )
        (root / "labels" / image["file_name"].replace(".jpg", ".txt")).write_text("".join(rows))
    return root / "images"


def test_coco128_polygons_letterboxed_masks_match_boxes(shared, tmp_path):
    images = coco_polygon_labels(shared, tmp_path, 12)
    ds = LoadImagesAndLabels(images, img_size=320, stride=32, rect=True, batch_size=4, label_rows="polygon", nc=80)
    checked = 0
    for i in range(len(ds)):
        image, labels, _, _, masks = ds[i]
        h, w = image.shape[1:]
        assert masks.shape == (len(labels), h // 4, w // 4)
        for label, mask in zip(labels.numpy(), masks.numpy()):
            cx, cy, bw, bh = label[2:] * (w, h, w, h) / 4
            if bw < 2 or bh < 2 or not mask.any():
                continue  # objects under two mask pixels wide: the half-cover rule may leave them empty
            # a pointed end (a foot, a tail) covers under half of its last mask pixels: 1.33 at most here
            np.testing.assert_allclose(mask_box(mask), [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], atol=1.5)
            checked += 1
    assert checked > 30  # of the 54 objects of these 12 images


def test_a_cache_whose_polygons_do_not_fit_is_checked_again(tmp_path, cache_dir, log):
    images = write_split(tmp_path, {"a": drawn(64, 64, [SQUARE])}, {"a": polygon_row(0, SQUARE)})
    LoadImagesAndLabels(images, img_size=64, label_rows="polygon")
    (cache,) = cache_dir.glob("*.yolo-labels.npz")
    with np.load(cache, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["polygon_counts"] = np.array([10**9], np.int64)  # claims more vertices than the cache holds
    with open(cache, "wb") as f:
        np.savez(f, **arrays)
    ds = LoadImagesAndLabels(images, img_size=64, label_rows="polygon")
    assert "ignoring label cache" in log.text and "do not fit together" in log.text
    np.testing.assert_allclose(ds.segments[0][0], SQUARE, atol=1e-6)  # verified again from the label file
