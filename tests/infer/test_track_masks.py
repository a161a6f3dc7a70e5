"""Masks through tracking: each tracked box keeps the mask of the detection the tracker matched it to, in the
Detector's track() and detect.py --track (drawn, and written as polygon rows ending with the track's id)."""

import cv2
import numpy as np
import pytest
import torch

import detect
from models.api.detector import Detector
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint
from utils.infer.masks import InstanceMasks
from utils.infer.track_inputs import tracked_masks
from utils.track.session import TrackingSession


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.clip(np.minimum(a[2:4], b[2:4]) - np.maximum(a[:2], b[:2]), 0, None).prod()
    return float(inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter))


def test_tracked_masks_follow_the_detection_rows():
    crops = [np.full((2, 3), i % 2 == 0) for i in range(3)]
    masks = InstanceMasks((50, 60), [(1, 2), (10, 20), (30, 5)], crops)
    picked = tracked_masks(masks, np.array([2, -1, 0]))
    assert picked.origins == [(30, 5), (0, 0), (1, 2)]
    assert picked.crops[0] is crops[2] and picked.crops[2] is crops[0]
    assert picked.crops[1].shape == (0, 0) and not picked.full(1).any()  # a recovered box: no mask computed


@pytest.mark.parametrize("tracker", ["bytetrack.yaml", "ocsort.yaml", "tracktrack.yaml"])
def test_session_names_each_tracked_boxs_detection_row(tracker):
    """Three objects moving steadily, given in a shuffled order each frame: every tracked box's detection row is
    the input row of that object (its box and class)."""
    session, rng = TrackingSession(tracker), np.random.default_rng(0)
    starts = np.array([[10, 10, 50, 60], [100, 30, 150, 90], [200, 120, 260, 200]], np.float32)
    for t in range(6):
        boxes = np.concatenate([starts + 3 * t, [[0.95, 0], [0.9, 1], [0.85, 2]]], 1).astype(np.float32)
        order = rng.permutation(3)
        tracked, ids = session.update("v", boxes[order], None)
        rows = session.detections
        assert len(rows) == len(tracked) == len(ids)
        for box, row in zip(tracked, rows):
            assert row >= 0 and box[5] == boxes[order][row, 5]
            assert _iou(box[:4], boxes[order][row, :4]) > 0.9
    assert len(tracked) == 3


@pytest.fixture(scope="module")
def confident_seg():
    """A 2-class yolov8n-seg with random weights whose class logits are pushed up: it detects boxes (random ones,
    the same on the same image) that the trackers take as confident, which a random model's do not reach."""
    torch.manual_seed(4)
    model = Model("yolov8n-seg.yaml", nc=2).eval()
    model.names = ["a", "b"]
    for branch in model.model[-1].cv3:
        torch.nn.init.constant_(branch[-1].bias, 4.0)
    return model


def _frame() -> np.ndarray:
    rng = np.random.default_rng(5)
    image = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
    cv2.rectangle(image, (20, 20), (70, 80), (255, 255, 255), -1)
    return image


def test_detector_track_keeps_each_boxs_own_mask(confident_seg):
    detector = Detector(confident_seg, img_size=128, max_det=8)
    image = _frame()
    (plain,) = detector(image)
    for _ in range(3):
        (result,) = detector.track(image)
    assert result.id is not None and len(result.masks) == len(result.boxes) > 0
    boxes, plain_boxes = result.boxes.numpy(), plain.boxes.numpy()
    for i, box in enumerate(boxes):  # a still frame: each track sits on its detection, and has that one's mask
        j = int(np.argmax([_iou(box[:4], p[:4]) for p in plain_boxes]))
        assert _iou(box[:4], plain_boxes[j, :4]) > 0.95
        assert result.masks.origins[i] == plain.masks.origins[j]
        assert np.array_equal(result.masks.crops[i], plain.masks.crops[j])


def test_detect_track_draws_masks_and_writes_polygon_rows_with_ids(confident_seg, tmp_path):
    weights = tmp_path / "seg.pt"
    save_checkpoint(checkpoint_dict(confident_seg), weights)
    frames = tmp_path / "frames"
    frames.mkdir()
    for k in range(3):
        cv2.imwrite(str(frames / f"{k:06d}.png"), _frame())
    run = detect.run(
        weights=weights, source=frames, imgsz=128, max_det=8, track="bytetrack.yaml", save_txt=True,
        project=tmp_path / "runs", name="t",
    )  # fmt: skip
    last = run.results[-1]
    assert last.ids is not None and len(last.masks) == len(last.boxes) > 0
    rows = [line.split() for line in (run.save_dir / "labels" / "000002.txt").read_text().splitlines()]
    assert len(rows) == len(last.boxes)
    assert sorted(int(r[-1]) for r in rows) == sorted(last.ids.tolist())  # each row ends with its track's id
    assert all(len(r) >= 8 and len(r) % 2 == 0 for r in rows)  # class, 3+ vertices, id: polygon rows, not boxes
    drawn = cv2.imread(str(run.save_dir / "000002.png"))
    assert drawn is not None and not np.array_equal(drawn, _frame())
