"""models/api/tta.py: three views (as is, 0.83x flipped, 0.67x), boxes mapped back to the input, levels clipped."""

import cv2
import numpy as np
import pytest
import torch
from torch import nn
from torchvision.ops import box_iou

from models.api.ensemble import load_models
from models.api.tta import PAD_VALUE, TTAModel, scale_and_pad
from models.nn.family import YOLOV5
from utils.boxes import non_max_suppression
from utils.data.augment import letterbox


def bus_tensor(shared, size: int = 320) -> torch.Tensor:
    """../shared/images/bus.jpg letterboxed to size as a (1, 3, H, W) float tensor in [0, 1]."""
    image = letterbox(cv2.imread(str(shared / "images/bus.jpg")), size, stride=32)[0]
    return torch.from_numpy(np.ascontiguousarray(image[:, :, ::-1].transpose(2, 0, 1))).float()[None] / 255


class BrightPatchFinder(nn.Module):
    """A stub detector: one box (xywh, input pixels) around the pixels brighter than 0.9, confidence 1, one class."""

    names = ["patch"]
    stride = torch.tensor([8.0, 16.0, 32.0])
    family, imgsz = YOLOV5, None

    def forward(self, x):
        boxes = []
        for image in x:
            ys, xs = torch.nonzero(image.mean(0) > 0.9, as_tuple=True)
            x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
            boxes.append(torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, x1 * 0 + 1, x1 * 0 + 1]))
        return torch.stack(boxes).float()[:, None], None


def patch_image() -> torch.Tensor:
    """A (1, 3, 96, 160) grey image with a white patch at x 20..60, y 30..50 (left of centre, so a flip moves it)."""
    x = torch.full((1, 3, 96, 160), 0.3)
    x[..., 30:50, 20:60] = 1.0
    return x


def test_every_view_maps_the_patch_back_to_its_place():
    predictions, extra = TTAModel(BrightPatchFinder())(patch_image())
    assert extra is None and predictions.shape == (1, 3, 6)  # one box per view; a stub head is not clipped
    expected = torch.tensor([40.0, 40.0, 40.0, 20.0])  # xywh of the patch in the input
    for view in predictions[0]:
        torch.testing.assert_close(view[:4], expected, atol=2.0, rtol=0)  # within the resize's rounding
    flipped = predictions[0, 1]
    assert abs(flipped[0] - 40) < 2 and abs(flipped[0] - (160 - 40)) > 70  # de-flipped, not left mirrored


def test_views_are_scaled_and_padded_with_grey_to_the_stride():
    x = torch.rand(2, 3, 96, 160)
    assert scale_and_pad(x, 1.0, 32) is x
    view = scale_and_pad(x, 0.67, 32)
    assert view.shape == (2, 3, 96, 128)  # 64 x 107 resized, padded to multiples of 32 above 64.32 x 107.2
    assert torch.all(view[..., 107:] == PAD_VALUE) and torch.all(view[..., 64:, :] == PAD_VALUE)
    assert not torch.any(view[..., :64, :107] == PAD_VALUE)
    assert scale_and_pad(x, 0.83, 32).shape == (2, 3, 96, 160)  # 79 x 132 -> 96 x 160


@pytest.mark.slow
def test_rows_are_the_three_views_less_the_clipped_levels(shared):
    model = load_models(shared / "weights/yolov5n.pt")
    x = torch.rand(1, 3, 256, 320)
    with torch.no_grad():
        plain = model(x)[0]
        augmented = TTAModel(model)(x)[0]
    # 3 anchors per cell at strides 8, 16, 32: full view 256x320 less its stride-32 level, 0.83x view padded to
    # 224x288 whole, 0.67x view padded to 192x224 less its stride-8 level
    full = 3 * (32 * 40 + 16 * 20)
    scaled = 3 * (28 * 36 + 14 * 18 + 7 * 9)
    small = 3 * (12 * 14 + 6 * 7)
    assert plain.shape[1] == 3 * (32 * 40 + 16 * 20 + 8 * 10)
    assert augmented.shape == (1, full + scaled + small, 85)


@pytest.mark.slow
def test_augmented_model_finds_the_bus(shared):
    """On a real image the augmented detections agree with plain inference on the main objects."""
    model = load_models(shared / "weights/yolov5n.pt")
    tta = TTAModel(model)
    assert tta.names == model.names and torch.equal(tta.stride, model.stride)
    x = bus_tensor(shared)
    with torch.no_grad():
        plain = non_max_suppression(model(x)[0], 0.25, 0.45)[0]
        augmented = non_max_suppression(tta(x)[0], 0.25, 0.45)[0]
    bus = model.names.index("bus")
    plain_bus, augmented_bus = plain[plain[:, 5] == bus][:1], augmented[augmented[:, 5] == bus][:1]
    assert len(plain_bus) == len(augmented_bus) == 1
    assert float(box_iou(plain_bus[:, :4], augmented_bus[:, :4])) > 0.9
    persons = [int((d[:, 5] == model.names.index("person")).sum()) for d in (plain, augmented)]
    assert persons[0] >= 3 and abs(persons[0] - persons[1]) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("members", [1, 2])
def test_ensembles_are_augmented_member_by_member(shared, members):
    weights = str(shared / "weights/yolov5n.pt")
    x = torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        single = TTAModel(load_models(weights))(x)[0]
        ensemble = TTAModel(load_models([weights] * members))(x)[0]
    assert ensemble.shape[1] == members * single.shape[1]
    torch.testing.assert_close(ensemble[:, : single.shape[1]], single)
