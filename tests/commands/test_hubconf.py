"""hubconf.py: torch.hub.load(repo, 'custom', source='local') returns a Detector with the reference boxes; offline."""

import importlib.util
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

import hubconf
from models import Detector
from tests.models.api.test_detector import BUS, WEIGHTS, assert_matches_reference, needs_shared
from utils.errors import YoloError

ROOT = Path(__file__).resolve().parents[2]


@needs_shared
def test_hub_load_custom_gives_the_reference_boxes():
    detector = torch.hub.load(str(ROOT), "custom", path=str(WEIGHTS), source="local", device="cpu")
    assert isinstance(detector, Detector)
    assert_matches_reference(detector(str(BUS))[0])


def test_entry_points_and_dependencies():
    for name in ("custom", "yolov5n", "yolov5s", "yolov5m", "yolov5l", "yolov5x"):
        assert callable(getattr(hubconf, name))
    assert all(importlib.util.find_spec(module) for module in hubconf.dependencies)  # what torch.hub checks


def test_untrained_named_model_builds_from_its_yaml():
    detector = hubconf.yolov5n(pretrained=False, device="cpu", conf_thres=0.5)
    assert detector.predictor.options.conf_thres == 0.5 and len(detector.names) == 80
    assert len(detector(torch.zeros(3, 64, 96))) == 1


def test_named_model_offline_is_one_line(monkeypatch):
    if (ROOT / "weights" / "yolov5x.pt").is_file():
        pytest.skip("weights/yolov5x.pt is already downloaded")

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(YoloError) as info:
        hubconf.yolov5x(device="cpu")
    assert "yolov5x.pt" in str(info.value) and "\n" not in str(info.value)
