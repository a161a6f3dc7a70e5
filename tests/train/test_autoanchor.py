"""AutoAnchor: best possible recall, k-means + evolution, and replacing the model's anchors only when better."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import utils.train.autoanchor as autoanchor
from models.nn.yolo import Model
from utils.train.autoanchor import anchor_metrics, check_anchors, kmean_anchors, kmeans
from utils.train.config import TrainConfig
from utils.train.setup import build_model

SHARED = Path(__file__).resolve().parents[3] / "shared"

DEFAULT_ANCHORS_PX = torch.tensor(
    [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]], dtype=torch.float32
).view(3, 3, 2)


def _dataset(wh_px: np.ndarray, img: int = 640) -> SimpleNamespace:
    """Square images of size img with one box of each given pixel size per image, as a dataset exposes them."""
    labels = [np.array([[0, 0.5, 0.5, w / img, h / img]], dtype=np.float32) for w, h in wh_px]
    return SimpleNamespace(labels=labels, shapes=np.full((len(labels), 2), img))


def test_anchor_metrics_by_hand():
    wh = torch.tensor([[10, 10], [39, 10], [41, 10], [2.6, 10]])
    # Worst-side ratios to a 10x10 anchor: 1, 10/39 = 0.256, 10/41 = 0.244, 0.26; must exceed 1/4.
    bpr, aat = anchor_metrics(torch.tensor([[10.0, 10.0]]), wh, thr=4.0)
    assert bpr == pytest.approx(0.75) and aat == pytest.approx(0.75)
    # A second 40x10 anchor also fits boxes 2 and 3 (and box 1 is 0.25, not above): 4 of 4 recalled,
    # anchors per target = (1 + 2 + 1 + 1) / 4.
    bpr, aat = anchor_metrics(torch.tensor([[10.0, 10.0], [40.0, 10.0]]), wh, thr=4.0)
    assert bpr == pytest.approx(1.0) and aat == pytest.approx(5 / 4)


def test_kmeans_finds_the_cluster_centres():
    rng = np.random.default_rng(1)
    centres = np.array([[1.0, 1.0], [5.0, 1.0], [3.0, 6.0]])
    x = np.concatenate([c + 0.1 * rng.standard_normal((50, 2)) for c in centres])
    found, dist = kmeans(x, 3, rng=np.random.default_rng(0))
    assert np.abs(found[np.argsort(found[:, 0] + 10 * found[:, 1])] - centres[[0, 1, 2]]).max() < 0.05
    assert dist < 0.2
    with pytest.raises(ValueError):
        kmeans(x[:2], 3)


def test_kmean_anchors_fit_clustered_box_sizes():
    rng = np.random.default_rng(0)
    centres = np.array([[20, 20], [60, 30], [150, 200]])
    wh = np.concatenate([c * np.exp(0.05 * rng.standard_normal((40, 2))) for c in centres])
    anchors = kmean_anchors(_dataset(wh), n=3, img_size=640, thr=4.0, gen=300, verbose=False)
    assert anchors.shape == (3, 2) and anchors.dtype == np.float32
    assert np.all(np.diff(anchors.prod(1)) > 0)  # sorted by area
    assert np.abs(anchors / centres - 1).max() < 0.25
    bpr, _ = anchor_metrics(torch.tensor(anchors), torch.tensor(wh, dtype=torch.float32))
    assert bpr == 1.0
    again = kmean_anchors(_dataset(wh), n=3, img_size=640, thr=4.0, gen=300, verbose=False)
    assert np.array_equal(anchors, again)  # seeded


def test_check_anchors_keeps_good_anchors(log):
    model = Model("yolov5n.yaml", nc=1)
    before = model.model[-1].anchors.clone()
    check_anchors(_dataset(DEFAULT_ANCHORS_PX.view(-1, 2).numpy().repeat(5, 0)), model, thr=4.0, imgsz=640)
    assert torch.equal(model.model[-1].anchors, before)
    line = next(m for m in log.messages if m.startswith("AutoAnchor: "))  # after the "cfg: using ..." line
    assert line.startswith("AutoAnchor: ") and "anchors/target, 1.000 Best Possible Recall (BPR)." in line


def test_check_anchors_replaces_poor_anchors(log):
    # Tall thin boxes (4 x 100 px) that no default anchor fits within a ratio of 4.
    rng = np.random.default_rng(0)
    wh = np.stack([4 * np.exp(0.1 * rng.standard_normal(60)), 100 * np.exp(0.1 * rng.standard_normal(60))], 1)
    model = Model("yolov5n.yaml", nc=1)
    detect = model.model[-1]
    bpr_before, _ = anchor_metrics(DEFAULT_ANCHORS_PX, torch.tensor(wh, dtype=torch.float32))
    assert bpr_before < 0.98
    check_anchors(_dataset(wh), model, thr=4.0, imgsz=640)
    new_px = detect.anchors * detect.stride.view(-1, 1, 1)
    assert not torch.allclose(new_px, DEFAULT_ANCHORS_PX)
    bpr_after, _ = anchor_metrics(new_px, torch.tensor(wh, dtype=torch.float32))
    assert bpr_after > bpr_before and bpr_after > 0.9
    areas = new_px.prod(-1).view(-1)
    assert torch.all(areas[1:] >= areas[:-1])  # smallest anchors on the finest level
    assert "poor fit" in log.text and "new anchors saved" in log.text


def test_check_anchors_keeps_originals_when_new_ones_are_worse(monkeypatch, log):
    rng = np.random.default_rng(0)
    wh = np.stack([4 * np.exp(0.1 * rng.standard_normal(30)), 100 * np.exp(0.1 * rng.standard_normal(30))], 1)
    wh[:10] = [33, 23]  # a third of the boxes fit the default anchors
    model = Model("yolov5n.yaml", nc=1)
    before = model.model[-1].anchors.clone()
    monkeypatch.setattr(autoanchor, "kmean_anchors", lambda *a, **k: np.full((9, 2), 1000.0, dtype=np.float32))
    check_anchors(_dataset(wh), model)
    assert torch.equal(model.model[-1].anchors, before)
    assert "original anchors better" in log.text


def test_check_anchors_without_labels_leaves_model_alone(log):
    model = Model("yolov5n.yaml", nc=1)
    before = model.model[-1].anchors.clone()
    empty = SimpleNamespace(labels=[np.zeros((0, 5), np.float32)] * 3, shapes=np.full((3, 2), 640))
    check_anchors(empty, model)
    assert torch.equal(model.model[-1].anchors, before) and "no labels" in log.text


def test_check_anchors_keeps_a_trained_heads_anchors(log):
    # The boxes of test_check_anchors_replaces_poor_anchors, but the head was trained with these anchors.
    rng = np.random.default_rng(0)
    wh = np.stack([4 * np.exp(0.1 * rng.standard_normal(60)), 100 * np.exp(0.1 * rng.standard_normal(60))], 1)
    model = Model("yolov5n.yaml", nc=1)
    before = model.model[-1].anchors.clone()
    check_anchors(_dataset(wh), model, thr=4.0, imgsz=640, refit=False)
    assert torch.equal(model.model[-1].anchors, before)
    assert "Anchors kept: the head from the weights was trained with them" in log.text and "poor fit" not in log.text


@pytest.mark.parametrize(
    "nc, cfg, expected",
    [(80, "", True), (3, "", False), (80, "yolov5n.yaml", False)],
    ids=["same classes", "other class count", "own --cfg"],
)
def test_head_transferred_from_yolov5n(nc, cfg, expected):
    """AutoAnchor keeps the anchors only when yolov5n.pt's head and anchors both came across."""
    weights = SHARED / "weights" / "yolov5n.pt"
    if not weights.is_file():
        pytest.skip(f"{weights} not found (../shared is absent)")
    config = TrainConfig(weights=str(weights), cfg=cfg, data="unused.yaml")
    model, trained = build_model(config, nc, {"anchors": 0}, torch.device("cpu"))
    assert trained is expected
    if not expected:
        assert model.model[-1].anchors.shape == (3, 3, 2)
