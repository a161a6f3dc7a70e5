"""--quad: the 4-image collate (2x upsample or 2x2 tiling) on synthetic and COCO128 images, its batch rules, and
one quad batch through the model and the loss."""

import random
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from models.nn.yolo import Model
from utils.boxes import xywhn2xyxy
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import load_hyp
from utils.data.loader import create_dataloader
from utils.errors import DatasetError
from utils.train.loss import ComputeLoss

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder

# one colour per image (BGR as written; the loader gives RGB) and its one box (x1, y1, x2, y2) in a 64x64 image
COLOURS = ((0, 0, 255), (0, 255, 0), (255, 0, 0), (255, 255, 255), (0, 255, 255))
BOXES = ((8, 8, 40, 24), (32, 16, 56, 56), (4, 30, 20, 60), (24, 24, 48, 40), (10, 10, 30, 30))


def coloured_boxes(root: Path, n: int = 4) -> Path:
    """n grey 64x64 images, image k with one filled rectangle of COLOURS[k] at BOXES[k] labelled class k."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for k in range(n):
        im = np.full((64, 64, 3), 114, np.uint8)
        x1, y1, x2, y2 = BOXES[k % len(BOXES)]
        im[y1:y2, x1:x2] = COLOURS[k % len(COLOURS)]
        assert cv2.imwrite(str(root / "images" / f"{k}.png"), im)
        cx, cy, w, h = (x1 + x2) / 128, (y1 + y2) / 128, (x2 - x1) / 64, (y2 - y1) / 64
        (root / "labels" / f"{k}.txt").write_text(f"{k} {cx} {cy} {w} {h}\n")
    return root / "images"


def collate_with(batch, draw: float, monkeypatch):
    """collate_quad with random.random() fixed: below 0.5 upsamples, from 0.5 tiles."""
    monkeypatch.setattr(random, "random", lambda: draw)
    return LoadImagesAndLabels.collate_quad(batch)


def box_pixels(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The (3, h, w) pixels inside a target's [i, cls, cx, cy, w, h] box, shrunk by one pixel on each side."""
    h, w = image.shape[1:]
    x1, y1, x2, y2 = xywhn2xyxy(target[None, 2:6], w, h)[0].round().int().tolist()
    return image[:, y1 + 1 : y2 - 1, x1 + 1 : x2 - 1]


def test_tiled_boxes_cover_their_objects(tmp_path, monkeypatch):
    ds = LoadImagesAndLabels(coloured_boxes(tmp_path), img_size=64, nc=4)
    batch = [ds[k] for k in range(4)]
    images, targets, paths, shapes = collate_with(batch, 0.9, monkeypatch)
    assert images.shape == (1, 3, 128, 128) and images.dtype == torch.uint8
    assert targets.shape == (4, 6) and targets[:, 0].tolist() == [0] * 4 and targets[:, 1].tolist() == [0, 1, 2, 3]
    assert len(paths) == 1 and Path(paths[0]).name == "0.png" and shapes == (None,)
    for k, target in enumerate(targets):
        rgb = torch.tensor(COLOURS[k][::-1], dtype=torch.uint8)
        assert (box_pixels(images[0], target) == rgb[:, None, None]).all()  # the box holds its object's colour only
        x1, y1, x2, y2 = (v + 64 * (k % 2 if i % 2 == 0 else k // 2) for i, v in enumerate(BOXES[k]))
        np.testing.assert_allclose(xywhn2xyxy(target[None, 2:6], 128, 128)[0].numpy(), [x1, y1, x2, y2], atol=1e-4)
    top_left, bottom_right = images[0, :, :64, :64], images[0, :, 64:, 64:]
    assert torch.equal(top_left, batch[0][0]) and torch.equal(bottom_right, batch[3][0])  # reading order


def test_upsampled_image_keeps_its_labels(tmp_path, monkeypatch):
    ds = LoadImagesAndLabels(coloured_boxes(tmp_path), img_size=64, nc=4)
    images, targets, _, _ = collate_with([ds[k] for k in range(4)], 0.1, monkeypatch)
    assert images.shape == (1, 3, 128, 128) and images.dtype == torch.uint8
    assert targets.tolist() == ds[0][1].tolist()  # only the first image's labels, unchanged
    x1, y1, x2, y2 = (2 * v for v in BOXES[0])
    np.testing.assert_allclose(xywhn2xyxy(targets[:, 2:6], 128, 128)[0].numpy(), [x1, y1, x2, y2], atol=1e-4)
    assert (box_pixels(images[0], targets[0]) == torch.tensor([255, 0, 0], dtype=torch.uint8)[:, None, None]).all()
    assert (images[0, :, : y1 - 1] == 114).all()  # grey above the box (at 2x): bilinear kept the flat areas exact


def test_dataloader_batches_and_remainder(tmp_path, log):
    path = coloured_boxes(tmp_path, 10)
    loader, _ = create_dataloader(path, 64, 8, 32, workers=0, quad=True, nc=10)
    sizes = [(tuple(images.shape), len(paths)) for images, _, paths, _ in loader]
    assert sizes == [((2, 3, 128, 128), 2), ((1, 3, 128, 128), 1)]  # 8 -> 2, the last 2 images -> 1 upsampled
    loader, _ = create_dataloader(path, 64, 16, 32, workers=0, quad=True, nc=10)  # clipped to 10, then to 8
    assert loader.batch_size == 8 and "--quad: batch size 8, a multiple of 4" in log.text
    with pytest.raises(DatasetError, match=r"--quad needs a batch size that is a multiple of 4 \(per device\), got 6"):
        create_dataloader(path, 64, 6, 32, workers=0, quad=True)
    with pytest.raises(DatasetError, match="--quad needs at least 4 images, .* has 3"):
        create_dataloader(coloured_boxes(tmp_path / "three", 3), 64, 4, 32, workers=0, quad=True)


def coco128_subset(shared: Path, folder: Path, n: int = 8) -> Path:
    """A .txt list of the first n COCO128 images that have labels (the data stays read-only in ../shared)."""
    root = shared / "datasets" / "coco128"
    images = sorted((root / "images" / "train2017").glob("*.jpg"))
    labelled = [p for p in images if (root / "labels" / "train2017" / f"{p.stem}.txt").is_file()][:n]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "subset.txt").write_text("".join(f"{p}\n" for p in labelled))
    return folder / "subset.txt"


def test_coco128_tiles_land_on_the_source_pixels(shared, tmp_path, monkeypatch):
    ds = LoadImagesAndLabels(coco128_subset(shared, tmp_path), img_size=128, nc=80)
    batch = [ds[k] for k in range(4)]
    images, targets, _, _ = collate_with(batch, 0.9, monkeypatch)
    side = 128
    assert images.shape == (1, 3, 2 * side, 2 * side)
    assert len(targets) == sum(len(b[1]) for b in batch)
    start = 0
    for k, (image, labels, _, _) in enumerate(batch):
        col, row = k % 2, k // 2
        assert torch.equal(images[0, :, row * side : (row + 1) * side, col * side : (col + 1) * side], image)
        mine = targets[start : start + len(labels)]
        start += len(labels)
        assert torch.equal(mine[:, 1], labels[:, 1])  # same classes, same order
        src = xywhn2xyxy(labels[:, 2:6], side, side) + torch.tensor([col, row, col, row]) * side
        np.testing.assert_allclose(xywhn2xyxy(mine[:, 2:6], 2 * side, 2 * side).numpy(), src.numpy(), atol=1e-3)


def test_quad_batch_through_model_and_loss(shared, tmp_path):
    hyp = load_hyp("hyp.scratch.yaml")
    loader, _ = create_dataloader(
        coco128_subset(shared, tmp_path), 64, 8, 32, hyp=hyp, augment=True, workers=0, quad=True, nc=80
    )
    images, targets, _, _ = next(iter(loader))
    assert images.shape == (2, 3, 128, 128) and len(targets) and set(targets[:, 0].tolist()) <= {0.0, 1.0}
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=80)
    model.hyp = hyp
    model.train()
    loss, items = ComputeLoss(model, hyp)(model(images.float() / 255), targets)
    loss.backward()
    assert torch.isfinite(loss) and loss.item() > 0 and items.shape == (3,)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
