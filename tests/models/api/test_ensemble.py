"""models/api/ensemble.py: one weights file is the plain Model, several an Ensemble whose boxes NMS merges."""

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from models import Model
from models.api.ensemble import Ensemble, load_models
from models.nn.family import YOLOV5
from models.weights.checkpoint import checkpoint_dict, save_checkpoint
from utils.boxes import non_max_suppression
from utils.data.augment import letterbox
from utils.errors import CheckpointError


def bus_tensor(shared, size: int = 320) -> torch.Tensor:
    """../shared/images/bus.jpg letterboxed to size as a (1, 3, H, W) float tensor in [0, 1]."""
    image = letterbox(cv2.imread(str(shared / "images/bus.jpg")), size, stride=32)[0]
    return torch.from_numpy(np.ascontiguousarray(image[:, :, ::-1].transpose(2, 0, 1))).float()[None] / 255


def test_one_file_is_the_plain_model(shared):
    weights = shared / "weights/yolov5n.pt"
    assert type(load_models(weights)) is Model
    assert type(load_models([str(weights)])) is Model


@pytest.mark.slow
def test_same_weights_twice_give_the_same_detections(shared):
    weights = str(shared / "weights/yolov5n.pt")
    single, pair = load_models(weights), load_models([weights, weights])
    assert isinstance(pair, Ensemble) and pair.names == single.names
    assert torch.equal(pair.stride, single.stride)
    x = bus_tensor(shared)
    with torch.no_grad():
        one, two = single(x)[0], pair(x)
    assert two[1] is None and two[0].shape == (1, 2 * one.shape[1], one.shape[2])
    for multi_label, conf in ((False, 0.25), (True, 0.001)):  # detect.py's and test.py's NMS
        expected = non_max_suppression(one, conf, 0.45, multi_label=multi_label)[0]
        merged = non_max_suppression(two[0], conf, 0.45, multi_label=multi_label)[0]
        assert len(expected) > 3
        torch.testing.assert_close(merged, expected)  # NMS removes every duplicate


def test_different_class_lists_are_refused(shared, tmp_path):
    other = tmp_path / "three.pt"
    save_checkpoint(checkpoint_dict(Model("yolov5n.yaml", nc=3).eval()), other)
    weights = str(shared / "weights/yolov5n.pt")
    with pytest.raises(CheckpointError) as e:
        load_models([weights, other])
    message = str(e.value)
    assert "\n" not in message and weights in message and str(other) in message
    assert "80 classes" in message and "3 classes" in message


def test_empty_list_is_refused():
    with pytest.raises(CheckpointError, match="no weights"):
        load_models([])


class StrideStub(nn.Module):
    """A model of the interface an Ensemble needs: names, stride, family, imgsz, forward -> (predictions, extra)."""

    def __init__(self, strides: list[float], rows: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))
        self.names = ["a", "b"]
        self.family, self.imgsz = YOLOV5, None
        self.register_buffer("stride", torch.tensor(strides))
        self.rows = rows

    def forward(self, x):
        return self.weight * torch.ones(x.shape[0], self.rows, 7), "raw maps"


def test_ensemble_takes_the_largest_stride_and_converts_like_a_model():
    pair = Ensemble([StrideStub([8, 16, 32], 2), StrideStub([8, 16, 32, 64], 3)])
    assert float(pair.stride.max()) == 64
    predictions, extra = pair(torch.zeros(2, 3, 64, 64))
    assert predictions.shape == (2, 5, 7) and extra is None
    pair.half().to(memory_format=torch.channels_last)  # what prepare_for_inference does to a model
    assert all(p.dtype == torch.float16 for p in pair.parameters())
    with pytest.raises(ValueError):
        Ensemble([StrideStub([8], 1)])
