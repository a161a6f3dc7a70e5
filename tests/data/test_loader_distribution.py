"""The faster training loader keeps the augmentation's distribution: the mosaic built in one pass and the
decoded-image buffer against the straightforward path (a 2x canvas, then a 3-channel warp; partners drawn from all
images), kept here as the reference."""

import random

import cv2
import numpy as np
import pytest

from utils.boxes import xywhn2xyxy
from utils.data.augment import augment_hsv, box_candidates, perspective_matrix, warp_targets
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import load_hyp

SIZE = 96  # --img of the generated datasets: small, so that hundreds of samples take about a second


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_CACHE_DIR", str(tmp_path / "yolo-cache"))


def make_dataset(folder, n: int, seed: int = 0):
    """n images of random sizes, each with its own class, colour and 1-3 boxes of it on textured grey."""
    (folder / "images").mkdir(parents=True)
    (folder / "labels").mkdir()
    rng = np.random.default_rng(seed)
    for k in range(n):
        h, w = int(rng.integers(40, 140)), int(rng.integers(40, 140))
        image = rng.integers(90, 140, (h, w, 3), dtype=np.uint8)
        colour = rng.integers(0, 256, 3).tolist()
        lines = []
        for _ in range(int(rng.integers(1, 4))):
            bw, bh = int(rng.integers(8, w // 2)), int(rng.integers(8, h // 2))
            x1, y1 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            image[y1 : y1 + bh, x1 : x1 + bw] = colour
            lines.append(f"{k} {(x1 + bw / 2) / w} {(y1 + bh / 2) / h} {bw / w} {bh / h}")
        cv2.imwrite(str(folder / "images" / f"{k}.png"), image)
        (folder / "labels" / f"{k}.txt").write_text("\n".join(lines) + "\n")
    return folder / "images"


def reference_mosaic(ds: LoadImagesAndLabels, index: int) -> tuple[np.ndarray, np.ndarray]:
    """The mosaic as it was built before: partners drawn from all images, the four tiled on a grey 2x canvas,
    then the whole canvas warped (3 channels) into the output. Same random draws in the same order."""
    s = ds.img_size
    xc, yc = (int(random.uniform(-b, 2 * s + b)) for b in ds.mosaic_border)
    indices = [index] + random.choices(ds.indices, k=3)
    random.shuffle(indices)
    canvas = np.full((2 * s, 2 * s, 3), 114, np.uint8)
    placed = []
    for k, i in enumerate(indices):
        im, _, (h, w) = ds.load_image(i)
        x1a, x2a = (max(xc - w, 0), xc) if k in (0, 2) else (xc, min(xc + w, 2 * s))
        y1a, y2a = (max(yc - h, 0), yc) if k in (0, 1) else (yc, min(yc + h, 2 * s))
        x1b = w - (x2a - x1a) if k in (0, 2) else 0
        y1b = h - (y2a - y1a) if k in (0, 1) else 0
        canvas[y1a:y2a, x1a:x2a] = im[y1b : y1b + y2a - y1a, x1b : x1b + x2a - x1a]
        labels = ds.labels[i].copy()
        labels[:, 1:] = xywhn2xyxy(labels[:, 1:], w, h, padw=x1a - x1b, padh=y1a - y1b)
        placed.append(labels)
    labels = np.concatenate(placed, 0)
    np.clip(labels[:, 1:], 0, 2 * s, out=labels[:, 1:])
    warp = {k: ds.hyp[k] for k in ("degrees", "translate", "scale", "shear", "perspective")}
    matrix, gain = perspective_matrix((2 * s, 2 * s), (s, s), **warp)
    if warp["perspective"]:
        out = cv2.warpPerspective(canvas, matrix, dsize=(s, s), borderValue=(114, 114, 114))
    else:
        out = cv2.warpAffine(canvas, matrix[:2], dsize=(s, s), borderValue=(114, 114, 114))
    new = warp_targets(labels, matrix, (s, s))
    return out, new[box_candidates(labels[:, 1:5].T * gain, new[:, 1:5].T, area_thr=0.1)]


@pytest.mark.parametrize("extra", [{}, {"degrees": 10.0, "shear": 3.0, "perspective": 0.0005}])
def test_one_pass_mosaic_equals_the_canvas_path(tmp_path, extra):
    """Same seed, same draws: the same boxes exactly and the same pixels, to one grey level on a few of them
    (OpenCV computes the sampling positions in float, and the window shifts them by whole pixels)."""
    hyp = {**load_hyp("hyp.scratch.yaml"), **extra}
    ds = LoadImagesAndLabels(make_dataset(tmp_path, 10), img_size=SIZE, augment=True, hyp=hyp, nc=10)
    assert ds.buffer_size == 10  # the dataset fits the buffer: partners are drawn from all images, as before
    off = 0
    for index in range(60):
        random.seed(index)
        np.random.seed(index)
        new_image, new_labels = ds.load_mosaic(index % 10)
        random.seed(index)
        np.random.seed(index)
        ref_image, ref_labels = reference_mosaic(ds, index % 10)
        np.testing.assert_array_equal(new_labels, ref_labels)
        diff = np.abs(new_image.astype(int) - ref_image)
        assert diff.max() <= 1, index
        off += int((diff > 0).sum())
    assert off <= 0.005 * 60 * SIZE * SIZE * 3


def test_hsv_lookup_in_one_pass_equals_per_channel_tables():
    rng = np.random.default_rng(3)
    for seed in range(20):
        image = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
        expected = image.copy()
        np.random.seed(seed)
        gains = np.random.uniform(-1, 1, 3) * (0.5, 0.9, 0.9) + 1
        hue, sat, val = cv2.split(cv2.cvtColor(expected, cv2.COLOR_BGR2HSV))
        x = np.arange(256, dtype=np.float32)
        tables = ((x * gains[0]) % 180, np.clip(x * gains[1], 0, 255), np.clip(x * gains[2], 0, 255))
        planes = [cv2.LUT(p, t.astype(np.uint8)) for p, t in zip((hue, sat, val), tables)]
        expected = cv2.cvtColor(cv2.merge(planes), cv2.COLOR_HSV2BGR)
        np.random.seed(seed)
        augment_hsv(image, 0.5, 0.9, 0.9)
        np.testing.assert_array_equal(image, expected)


def sample_statistics(samples) -> dict[str, np.ndarray]:
    """Box count, centre, size and class spread per sample, and pixel mean and spread per channel."""
    images = np.stack([img.numpy() for img, *_ in samples]).astype(np.float32)
    labels = [lb.numpy() for _, lb, *_ in samples]
    boxes = np.concatenate(labels, 0)
    return {
        "boxes per image": np.array([np.mean([len(lb) for lb in labels])]),
        "box cx cy w h": boxes[:, 2:6].mean(0),
        "box w h spread": boxes[:, 4:6].std(0),
        "classes per image": np.array([np.mean([len(np.unique(lb[:, 1])) for lb in labels])]),
        "pixel mean": images.mean((0, 2, 3)),
        "pixel spread": images.std((0, 2, 3)),
    }


def epochs_of_samples(ds: LoadImagesAndLabels, epochs: int, seed: int) -> list:
    """Full training samples (mosaic, warp, HSV, flips) over shuffled epochs, as a loader worker makes them."""
    random.seed(seed)
    np.random.seed(seed)
    order = np.random.default_rng(seed)
    return [ds[int(i)] for _ in range(epochs) for i in order.permutation(len(ds))]


@pytest.mark.slow  # about 3 s of CPU: 2 x 288 full training samples
def test_buffered_partners_keep_the_sample_distribution(tmp_path):
    """A dataset larger than the buffer: once it is full, a mosaic's partners are distinct buffered images. Each
    image is still a tile as often, and the boxes and pixels of the samples are distributed as with partners
    drawn from all images (the reference: the same dataset with the buffer turned off)."""
    folder = make_dataset(tmp_path, 48)
    hyp = load_hyp("hyp.scratch.yaml")
    buffered = LoadImagesAndLabels(folder, img_size=64, batch_size=2, augment=True, hyp=hyp, nc=48)
    reference = LoadImagesAndLabels(folder, img_size=64, batch_size=2, augment=True, hyp=hyp, nc=48)
    reference.buffer_size = 0
    assert buffered.buffer_size == 16
    partners = []
    drawn = buffered._mosaic_partners
    buffered._mosaic_partners = lambda index: partners.append([index, *drawn(index)]) or partners[-1][1:]
    new = sample_statistics(epochs_of_samples(buffered, 6, seed=1))
    ref = sample_statistics(epochs_of_samples(reference, 6, seed=1))
    assert len(buffered._buffer) == 16  # bounded
    buffered.close_mosaic()  # the last epochs of the anchor-free models: no mosaic, no buffer
    assert buffered.buffer_size == 0 and not buffered._buffer
    full = partners[48:]  # after the first epoch the buffer is full: partners come from it
    assert all(len(set(p)) == 4 for p in full)
    counts = np.bincount(np.array(full)[:, 1:].ravel(), minlength=48)
    # each image a partner about as often: chi-square per degree of freedom near 1 (uniform; samples of one epoch
    # are a little correlated), far above it when some images are favoured
    assert ((counts - counts.mean()) ** 2 / counts.mean()).sum() / 47 < 3
    for name, tol in {
        "boxes per image": 0.08,
        "box cx cy w h": 0.04,
        "box w h spread": 0.06,
        "classes per image": 0.08,
        "pixel mean": 0.03,
        "pixel spread": 0.05,
    }.items():
        np.testing.assert_allclose(new[name], ref[name], rtol=tol, err_msg=name)
