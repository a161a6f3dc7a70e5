"""Segment models in ensembles and through torch.hub: an ensemble of segment models gives each detection its own
model's mask; with a detection model among them it is a detector (one warning); hub's custom entry segments."""

from pathlib import Path

import numpy as np
import pytest
import torch

from models.api.detector import Detector
from models.api.ensemble import Ensemble
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint

ROOT = Path(__file__).resolve().parents[3]
NAMES = ["a", "b"]


def _model(cfg: str, seed: int) -> Model:
    torch.manual_seed(seed)
    model = Model(cfg, nc=2).eval()
    model.names = list(NAMES)
    return model


@pytest.fixture(scope="module")
def members() -> list[Model]:
    return [_model("yolov8n-seg.yaml", 1), _model("yolov5n-seg.yaml", 2)]


def test_each_ensembled_prediction_keeps_its_own_models_mask_logits(members):
    x = torch.rand(1, 3, 64, 96)
    with torch.no_grad():
        out = Ensemble(members)(x)
        own = [m(x) for m in members]
    assert out.protos.shape[1] == sum(o.protos.shape[1] for o in own)
    row = 0
    for o in own:  # coefficients @ prototypes of the ensemble = of the member the row came from
        rows = o.coefficients.shape[1]
        mine = torch.einsum("nc,chw->nhw", o.coefficients[0, :5], o.protos[0])
        merged = torch.einsum("nc,chw->nhw", out.coefficients[0, row : row + 5], out.protos[0])
        assert torch.allclose(mine, merged, atol=1e-4)
        row += rows
    assert row == out[0].shape[1] == out.coefficients.shape[1]


def test_detector_of_segment_weights_gives_masks(members, tmp_path):
    paths = []
    for i, model in enumerate(members):
        paths.append(tmp_path / f"m{i}.pt")
        save_checkpoint(checkpoint_dict(model), paths[-1])
    image = np.random.default_rng(0).integers(0, 255, (80, 120, 3), dtype=np.uint8)
    (result,) = Detector(paths, img_size=96, conf_thres=0.0, max_det=10)(image)
    assert len(result.masks) == len(result.boxes) == 10
    hub = torch.hub.load(str(ROOT), "custom", path=str(paths[0]), source="local", img_size=96, conf_thres=0.0)
    (result,) = hub(image)
    assert result.masks is not None and len(result.masks) == len(result.boxes) > 0


def test_segment_and_detection_members_make_a_detector(members, log):
    ensemble = Ensemble([members[0], _model("yolov8n.yaml", 3)])
    assert not ensemble.task.masks and "gives boxes only, no masks" in log.text
    predictions, maps = ensemble(torch.rand(1, 3, 64, 64))
    assert maps is None and predictions.shape[2] == 5 + len(NAMES)
