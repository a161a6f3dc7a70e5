"""The Python API on a segment model: Results.masks (at the original size, inside each box), outlines in to_dict,
masks drawn by plot."""

import numpy as np
import pytest
import torch

from models.api.detector import Detector
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint


@pytest.fixture(scope="module")
def seg_weights(tmp_path_factory):
    torch.manual_seed(3)
    model = Model("yolov8n-seg.yaml", nc=2)
    model.names = ["a", "b"]
    path = tmp_path_factory.mktemp("seg") / "seg.pt"
    save_checkpoint(checkpoint_dict(model), path)
    return path


def test_results_carry_masks_outlines_and_drawing(seg_weights):
    rng = np.random.default_rng(1)
    image = rng.integers(0, 255, (120, 170, 3), dtype=np.uint8)
    results = Detector(str(seg_weights), img_size=128, conf_thres=0.0, max_det=6)(image)[0]
    masks = results.masks
    assert masks is not None and len(masks) == len(results) == 6 and masks.shape == (120, 170)
    outlined = [i for i in range(6) if len(masks.polygon(i)) >= 3]
    assert outlined  # random weights still outline some
    for i, box in enumerate(results.to_dict()["boxes"]):
        x1, y1, x2, y2 = box["xyxy"]
        full = masks.full(i)
        ys, xs = np.nonzero(full)
        assert not len(xs) or (xs.min() + 0.5 >= x1 and xs.max() + 0.5 <= x2 and ys.min() + 0.5 >= y1)
        polygon = np.asarray(box["polygon"]).reshape(-1, 2)
        assert len(polygon) == len(masks.polygon(i))
    drawn = results.plot(labels=False)
    inside = masks.full(outlined[0])
    assert (drawn != image).any(2)[inside].mean() > 0.9  # the mask is tinted
