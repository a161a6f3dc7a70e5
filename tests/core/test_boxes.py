"""Box conversions, letterbox geometry, rescaling to the original image, and NMS."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from utils.boxes import (
    first_kept,
    non_max_suppression,
    scale_boxes,
    torchvision_nms,
    xywh2xyxy,
    xywhn2xyxy,
    xyxy2xywh,
    xyxy2xywhn,
)
from utils.data.augment import letterbox


def test_conversions_round_trip_tensor_and_numpy():
    xyxy = torch.tensor([[10.0, 20.0, 50.0, 80.0]])
    xywh = xyxy2xywh(xyxy)
    assert xywh.tolist() == [[30.0, 50.0, 40.0, 60.0]]
    assert torch.equal(xywh2xyxy(xywh), xyxy)
    arr = np.array([[0.5, 0.5, 0.2, 0.4]])
    px = xywhn2xyxy(arr, w=200, h=100, padw=3, padh=5)
    np.testing.assert_allclose(px, [[83, 35, 123, 75]])
    np.testing.assert_allclose(xyxy2xywhn(px - [3, 5, 3, 5], w=200, h=100), arr)
    assert isinstance(px, np.ndarray) and arr.tolist() == [[0.5, 0.5, 0.2, 0.4]]  # input untouched


@pytest.mark.parametrize(
    ("shape", "expected", "pad"),
    [((1080, 810), (640, 480), (0, 0)), ((720, 1280), (384, 640), (0, 12)), ((100, 60), (640, 384), (0, 0))],
)
def test_letterbox_minimal_padding(shape, expected, pad):
    image = np.full((*shape, 3), 7, np.uint8)
    out, ratio, (dw, dh) = letterbox(image, 640, stride=32, auto=True)
    assert out.shape[:2] == expected
    assert (dw, dh) == pad
    if dh:  # padding rows carry the colour 114, content keeps its value
        assert (out[0] == 114).all() and (out[out.shape[0] // 2] == 7).all()


def test_letterbox_square_and_no_scaleup():
    image = np.zeros((200, 100, 3), np.uint8)
    out, ratio, (dw, dh) = letterbox(image, 320, auto=False, scaleup=False)
    assert out.shape == (320, 320, 3) and ratio == (1.0, 1.0) and (dw, dh) == (110.0, 60.0)


def test_scale_boxes_inverts_letterbox():
    original = (720, 1280)  # zidane-like: letterboxed to 384x640 with 12 px pad top and bottom
    boxes = torch.tensor([[100.0, 50.0, 400.0, 700.0], [0.0, 0.0, 1280.0, 720.0]])
    gain = 0.5
    letterboxed = boxes * gain
    letterboxed[:, [1, 3]] += 12
    back = scale_boxes((384, 640), letterboxed.clone(), original)
    torch.testing.assert_close(back, boxes)
    clipped = scale_boxes((384, 640), torch.tensor([[-10.0, 0.0, 700.0, 400.0]]), original)
    assert clipped.tolist() == [[0.0, 0.0, 1280.0, 720.0]]


def _raw_predictions(n=400, nc=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 300
    wh = torch.rand(n, 2, generator=g) * 60 + 5
    obj = torch.rand(n, 1, generator=g)
    cls = torch.rand(n, nc, generator=g)
    return torch.cat((xy, wh, obj, cls), 1)[None]


def test_nms_matches_reference_per_class():
    pred = _raw_predictions()
    out = non_max_suppression(pred, conf_thres=0.2, iou_thres=0.5)[0]
    x = pred[0]
    scores, cls = (x[:, 5:] * x[:, 4:5]).max(1)
    keep = scores > 0.2
    boxes, scores, cls = xywh2xyxy(x[keep, :4]), scores[keep], cls[keep]
    expected = []
    for c in cls.unique():  # plain per-class NMS, one class at a time
        idx = (cls == c).nonzero().view(-1)
        expected.extend(idx[torchvision.ops.nms(boxes[idx], scores[idx], 0.5)].tolist())
    assert sorted(out[:, 4].tolist()) == sorted(scores[expected].tolist())
    assert (out[:-1, 4] >= out[1:, 4]).all()  # sorted by confidence


def test_nms_agnostic_classes_and_max_det():
    pred = _raw_predictions()
    aware = non_max_suppression(pred, 0.2, 0.5)[0]
    agnostic = non_max_suppression(pred, 0.2, 0.5, agnostic=True)[0]
    assert len(agnostic) < len(aware)
    ious = torchvision.ops.box_iou(agnostic[:, :4], agnostic[:, :4]).fill_diagonal_(0)
    assert ious.max() <= 0.5
    only = non_max_suppression(pred, 0.2, 0.5, classes=[1, 3])[0]
    assert set(only[:, 5].tolist()) <= {1.0, 3.0} and len(only)
    assert len(non_max_suppression(pred, 0.2, 0.5, max_det=7)[0]) == 7
    multi = non_max_suppression(pred, 0.01, 0.6, multi_label=True, max_det=10_000)[0]
    assert len(multi) > len(non_max_suppression(pred, 0.01, 0.6, max_det=10_000)[0])


@pytest.mark.parametrize("case", ["spread", "clustered", "tied"])
def test_first_kept_equals_full_nms_cut_to_max_det(case):
    """NMS over the highest-scoring boxes alone gives the full NMS's first max_det kept boxes: spread boxes (few
    suppressed, the first try of 4 x max_det suffices), clustered ones (most suppressed: k has to double, down to all
    boxes) and scores with many exact ties (kept in the kernel's own order)."""
    g = torch.Generator().manual_seed(1)
    n = 12_000
    corners = torch.rand(n, 2, generator=g) * 600
    if case == "clustered":  # 49 spots of near-equal boxes: fewer than max_det survive, so every box has to be seen
        corners = (torch.rand(n, 2, generator=g) * 7).floor() * 90
    sizes = torch.rand(n, 2, generator=g) * (4 if case == "clustered" else 80) + 20
    boxes = torch.cat((corners, corners + sizes), 1)
    boxes += torch.randint(0, 3, (n, 1), generator=g) * 7680.0  # three classes, as non_max_suppression shifts them
    scores = torch.rand(n, generator=g)
    if case == "tied":
        scores = (scores * 40).round() / 40
    if case == "clustered":  # the spots on the left score low: their best boxes lie beyond the first tries' k
        scores = scores * (corners[:, 0] / 540 + 0.01)
    for max_det in (1, 30, 300):
        full = torchvision.ops.nms(boxes, scores, 0.5)[:max_det]
        assert torch.equal(first_kept(boxes, scores, 0.5, max_det), full)
    if case == "clustered":
        assert len(torchvision.ops.nms(boxes, scores, 0.5)) < 300


def test_nms_empty():
    pred = _raw_predictions()
    pred[..., 4] = 0
    out = non_max_suppression(pred, 0.25, 0.45)
    assert out[0].shape == (0, 6)


def test_nms_kernel_is_torchvisions_and_commands_start_without_the_package():
    torch.manual_seed(0)
    corners = torch.rand(2000, 2) * 600
    boxes = torch.cat((corners, corners + torch.rand(2000, 2) * 100 + 1), 1)
    scores = torch.rand(2000)
    assert torchvision_nms() is torch.ops.torchvision.nms  # the compiled operator, found without the package
    assert torch.equal(torchvision_nms()(boxes, scores, 0.45), torchvision.ops.nms(boxes, scores, 0.45))
    # importing torchvision would also import its models and torch._dynamo: seconds of every command's start-up
    loaded = "print('torchvision' in sys.modules, 'torch._dynamo' in sys.modules)"
    code = f"import sys, detect, test, train, export; {loaded}"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "False"], done.stderr[-2000:]


@pytest.mark.parametrize("multi_label", [False, True])
def test_nms_carries_extra_columns_with_their_boxes(multi_label):
    """A segment model's mask coefficients ride after the classes: the same boxes as without them, each with its
    own row's extra values (here the row's index, twice)."""
    pred = _raw_predictions()
    rows = torch.arange(pred.shape[1], dtype=torch.float32)[None, :, None]
    with_extra = torch.cat((pred, rows, rows * 2), 2)
    plain = non_max_suppression(pred, 0.1, 0.5, multi_label=multi_label)[0]
    out = non_max_suppression(with_extra, 0.1, 0.5, multi_label=multi_label, extra=2)[0]
    assert out.shape == (len(plain), 8) and torch.equal(out[:, :6], plain)
    source = xywh2xyxy(pred[0, out[:, 6].long(), :4])
    assert torch.equal(out[:, :4], source) and torch.equal(out[:, 7], out[:, 6] * 2)
    empty = with_extra.clone()
    empty[..., 4] = 0
    assert non_max_suppression(empty, 0.25, 0.45, extra=2)[0].shape == (0, 8)
