"""Training augmentation: mosaic tiling, perspective warps and their box geometry, colour, flips, mixup."""

import random

import cv2
import numpy as np
import pytest

from utils.boxes import xywhn2xyxy
from utils.data.augment import (
    augment_hsv,
    box_candidates,
    mixup,
    mosaic4,
    random_flip,
    random_perspective,
    warp_targets,
)
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import load_hyp


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_CACHE_DIR", str(tmp_path / "yolo-cache"))


def coordinate_image(h: int, w: int, tag: int) -> np.ndarray:
    """Pixels that say where they came from: B = x, G = y, R = tag."""
    im = np.empty((h, w, 3), np.uint8)
    im[..., 0] = np.arange(w)[None, :]
    im[..., 1] = np.arange(h)[:, None]
    im[..., 2] = tag
    return im


def rectangle_image(h: int, w: int, box: tuple[int, int, int, int]) -> np.ndarray:
    im = np.full((h, w, 3), 60, np.uint8)
    cv2.rectangle(im, box[:2], (box[2] - 1, box[3] - 1), (255, 255, 255), -1)
    return im


def white_extent(im: np.ndarray) -> np.ndarray:
    """Enclosing box (x1, y1, x2, y2) of the bright pixels."""
    ys, xs = np.nonzero(im[..., 0] > 160)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)


def test_mosaic4_tiles_and_boxes():
    sizes = [(40, 50), (60, 80), (30, 100), (64, 64)]  # (h, w) of top-left, top-right, bottom-left, bottom-right
    images = [coordinate_image(h, w, 50 * (i + 1)) for i, (h, w) in enumerate(sizes)]
    targets = [np.array([[i, 5, 6, 25, 26]], np.float32) for i in range(4)]
    canvas, out = mosaic4(images, targets, 64, (70, 50))
    assert canvas.shape == (128, 128, 3)
    # each tile touches the centre (70, 50); (dx, dy) maps image pixels to the canvas
    shifts = [(20, 10), (70, -10), (-30, 50), (70, 50)]
    for i, (dx, dy) in enumerate(shifts):
        h, w = sizes[i]
        x, y = max(dx, 0) + 1, max(dy, 0) + 1  # a canvas pixel inside the tile
        assert canvas[y, x].tolist() == [x - dx, y - dy, 50 * (i + 1)]
        expected = np.clip([5 + dx, 6 + dy, 25 + dx, 26 + dy], 0, 128)
        np.testing.assert_array_equal(out[i], [i, *expected])
    assert (canvas[:10, :70] == 114).all() and (canvas[114:, 70:] == 114).all()  # uncovered canvas stays grey
    assert out[2, 1] == 0  # box of the bottom-left tile cut at the canvas edge


def test_warp_targets_exact_scale_and_translation():
    matrix = np.array([[2.0, 0, 10], [0, 0.5, -5], [0, 0, 1]])
    targets = np.array([[3, 10, 20, 30, 60], [1, 50, 50, 90, 70]], np.float32)
    out = warp_targets(targets, matrix, (100, 150))
    np.testing.assert_allclose(out, [[3, 30, 5, 70, 25], [1, 110, 20, 150, 30]])  # second clipped at x = 150


def test_random_perspective_identity_crop():
    rng = np.random.default_rng(0)
    canvas = rng.integers(0, 255, (128, 128, 3), dtype=np.uint8)
    targets = np.array([[0, 40, 40, 80, 70], [1, 0, 0, 50, 50], [2, 0, 0, 33, 33]], np.float32)
    image, out = random_perspective(canvas, targets, degrees=0, translate=0, scale=0, shear=0, border=(-32, -32))
    np.testing.assert_array_equal(image, canvas[32:96, 32:96])  # the centre, exactly
    # moved by -32 and clipped; the third box would be 1 px wide and is dropped
    np.testing.assert_allclose(out, [[0, 8, 8, 48, 38], [1, 0, 0, 18, 18]])


@pytest.mark.parametrize("degrees", [0, 30])
def test_random_perspective_boxes_follow_content(degrees):
    box = (50, 60, 110, 90)
    image = rectangle_image(160, 160, box)
    random.seed(1)
    np.random.seed(1)
    checked = 0
    for _ in range(20):
        out, targets = random_perspective(
            image,
            np.array([[0, *box]], np.float32),
            degrees=degrees,
            translate=0.2,
            scale=0.5,
            shear=0,
            border=(-40, -40),
        )
        assert out.shape == (80, 80, 3)
        if len(targets) and (out[..., 0] > 160).any():
            extent = white_extent(out)
            np.testing.assert_allclose(targets[0, 1:], extent, atol=1.25)  # box == warped rectangle (+-interp.)
            checked += 1
    assert checked >= 8


def test_random_perspective_keeps_boxes_valid():
    random.seed(0)
    np.random.seed(0)
    rng = np.random.default_rng(0)
    for _ in range(30):
        xy = rng.uniform(0, 200, (20, 2))
        wh = rng.uniform(1, 120, (20, 2))
        targets = np.concatenate((rng.integers(0, 5, (20, 1)), xy, np.minimum(xy + wh, 256)), 1).astype(np.float32)
        image = np.zeros((256, 256, 3), np.uint8)
        out, kept = random_perspective(
            image, targets, degrees=20, translate=0.2, scale=0.6, shear=5, perspective=0.0005, border=(-64, -64)
        )
        assert out.shape == (128, 128, 3) and kept.dtype == np.float32
        w, h = kept[:, 3] - kept[:, 1], kept[:, 4] - kept[:, 2]
        assert (kept[:, 1:] >= 0).all() and (kept[:, [1, 3]] <= 128).all() and (kept[:, [2, 4]] <= 128).all()
        assert (w > 2).all() and (h > 2).all() and (np.maximum(w / h, h / w) < 100).all()
        assert set(kept[:, 0].tolist()) <= set(targets[:, 0].tolist())


def test_box_candidates():
    before = np.array(
        [[0, 0, 100, 100], [0, 0, 100, 100], [0, 0, 100, 100], [0, 0, 10, 10], [0, 0, 300, 3]], np.float32
    ).T
    after = np.array([[0, 0, 50, 50], [0, 0, 2, 50], [0, 0, 30, 30], [0, 0, 3, 9], [0, 0, 250, 2.4]], np.float32).T
    # kept / too narrow / 9% of the area left / small but mostly kept / aspect ratio over 100
    assert box_candidates(before, after).tolist() == [True, False, False, True, False]


def test_augment_hsv():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
    same = image.copy()
    augment_hsv(same, 0, 0, 0)
    np.testing.assert_array_equal(same, image)
    np.random.seed(0)
    changed = image.copy()
    augment_hsv(changed, 0.015, 0.7, 0.4)
    assert changed.dtype == np.uint8 and changed.shape == image.shape and not np.array_equal(changed, image)
    grey = np.full((8, 8, 3), 100, np.uint8)
    for seed in range(5):  # zero saturation stays zero whatever the gains
        np.random.seed(seed)
        augment_hsv(grey, 0.5, 0.7, 0)
        assert (grey == 100).all()


def test_random_flip():
    image = coordinate_image(20, 30, 0)
    labels = np.array([[1, 0.2, 0.3, 0.1, 0.2]], np.float32)
    flipped, out = random_flip(image, labels.copy(), fliplr=1.0, flipud=0.0)
    assert flipped[0, 0, 0] == 29
    np.testing.assert_allclose(out, [[1, 0.8, 0.3, 0.1, 0.2]])
    flipped, out = random_flip(image, labels.copy(), fliplr=0.0, flipud=1.0)
    assert flipped[0, 0, 1] == 19
    np.testing.assert_allclose(out, [[1, 0.2, 0.7, 0.1, 0.2]])
    flipped, out = random_flip(image, labels.copy(), fliplr=0.0, flipud=0.0)
    assert flipped is image and np.array_equal(out, labels)


def test_mixup():
    np.random.seed(0)
    a, b = np.full((16, 16, 3), 200, np.uint8), np.full((16, 16, 3), 100, np.uint8)
    la, lb = np.ones((2, 5), np.float32), np.zeros((1, 5), np.float32)
    image, labels = mixup(a, la, b, lb)
    assert image.shape == a.shape and image.dtype == np.uint8 and 120 < image[0, 0, 0] < 180
    assert labels.shape == (3, 5)


def test_dataset_mosaic_labels_match_pixels(tmp_path):
    """End to end: after mosaic + perspective + flips, every label box encloses its coloured rectangle."""
    colors = [(0, 0, 255), (0, 255, 0), (255, 0, 0)]  # BGR, one per class
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        h, w = int(rng.integers(80, 160)), int(rng.integers(80, 160))
        image = np.full((h, w, 3), 128, np.uint8)
        lines = []
        for cls in range(3):
            x1, y1 = int(w * cls / 3) + 2, int(rng.integers(0, h // 2))
            x2, y2 = x1 + w // 4, y1 + h // 3
            image[y1:y2, x1:x2] = colors[cls]
            lines.append(f"{cls} {(x1 + x2) / 2 / w} {(y1 + y2) / 2 / h} {(x2 - x1) / w} {(y2 - y1) / h}")
        cv2.imwrite(str(tmp_path / "images" / f"{i}.png"), image)
        (tmp_path / "labels" / f"{i}.txt").write_text("\n".join(lines))
    hyp = {**load_hyp("hyp.scratch.yaml"), "hsv_h": 0, "hsv_s": 0, "hsv_v": 0, "flipud": 0.5, "mixup": 0}
    ds = LoadImagesAndLabels(tmp_path / "images", img_size=128, augment=True, hyp=hyp, nc=3)
    random.seed(0)
    np.random.seed(0)
    n_boxes = 0
    for i in range(12):
        img, labels, _, shapes = ds[i % len(ds)]
        assert shapes is None and img.shape == (3, 128, 128)
        rgb = img.permute(1, 2, 0).numpy()
        boxes = xywhn2xyxy(labels[:, 2:].numpy(), 128, 128).round().astype(int)
        for cls, (x1, y1, x2, y2) in zip(labels[:, 1].int().tolist(), boxes):
            if min(x2 - x1, y2 - y1) < 5:
                continue
            crop = rgb[y1 + 1 : y2 - 1, x1 + 1 : x2 - 1].astype(int)
            target = np.array(colors[cls][::-1])  # RGB
            inside = (np.abs(crop - target).sum(-1) < 60).mean()
            assert inside > 0.9, (i, cls, inside)
            n_boxes += 1
    assert n_boxes > 30
