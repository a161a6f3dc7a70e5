"""A checkpoint's recorded family is checked against its network (issue 35, class 4): a family entry that is no name
(a list, a mapping, a number, bytes) or names another family than the one its config builds is one CheckpointError
line, never a TypeError; a true entry, or none (files written before families were recorded), loads."""

import pytest
import torch

from models.weights.checkpoint import load_checkpoint, model_from_checkpoint
from utils.errors import CheckpointError


@pytest.fixture(scope="module")
def checkpoints(shared):
    v8 = shared / "reference" / "ultralytics" / "yolov8n_random.pt"
    if not v8.is_file():
        pytest.skip(f"{v8} not found")
    return {"yolov5": load_checkpoint(shared / "weights" / "yolov5n.pt"), "yolov8": load_checkpoint(v8)}


def _saved(tmp_path, ckpt: dict, family) -> str:
    path = tmp_path / "edited.pt"
    torch.save({**ckpt, "family": family}, path)
    return str(path)


@pytest.mark.parametrize(
    "network, family, words",
    [
        ("yolov8", ["yolov8"], "'family' entry is a list"),
        ("yolov8", {"name": "yolov8"}, "'family' entry is a dict"),
        ("yolov8", 8, "'family' entry is a int"),
        ("yolov5", b"yolov5", "'family' entry is a bytes"),
        ("yolov8", "yolov5", "says its model is YOLOv5 but its network is YOLOv8/YOLO11's"),
        ("yolov8", "yolo26", "says its model is YOLO26 but its network is YOLOv8/YOLO11's"),
        ("yolov5", "yolov8", "says its model is YOLOv8/YOLO11 but its network is YOLOv5's"),
        ("yolov5", "yolov9", "unknown model family 'yolov9'"),
    ],
)
def test_a_wrong_or_lying_family_is_one_line(tmp_path, checkpoints, network, family, words):
    with pytest.raises(CheckpointError, match=words) as e:
        load_checkpoint(_saved(tmp_path, checkpoints[network], family))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("network", ["yolov5", "yolov8"])
def test_a_true_or_absent_family_loads(tmp_path, checkpoints, network):
    for family in (network, None):
        ckpt = load_checkpoint(_saved(tmp_path, checkpoints[network], family))
        assert ckpt["family"] == network
        assert model_from_checkpoint(ckpt).family.name == network
