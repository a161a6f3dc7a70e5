"""What makes an OpenVINO export's whole command fast without changing its detections (models/export/backends.py,
runtime.py): the compiled model is cached in the user cache folder and read back on the next load, with the same
outputs; a cache folder that cannot be made, or a damaged blob in it, only costs a compile. Speed itself is measured
side by side by benchmarks/bench_int8_commands.py, never asserted here."""

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from models.export.backends import load_backend
from models.export.exporter import ExportOptions, export
from utils.data.augment import letterbox
from utils.images import read_image_checked

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None, reason="optional openvino is not installed: requirements-export.txt"
)


@pytest.fixture(scope="module")
def openvino_export(tmp_path_factory, shared) -> Path:
    """yolov5n as a dynamic float OpenVINO export at 64 px: the cache keeps any compiled model, float or INT8, so
    the smallest export that compiles checks it (no calibration)."""
    folder = tmp_path_factory.mktemp("openvino_speed")
    weights = folder / "yolov5n.pt"
    shutil.copy(shared / "weights/yolov5n.pt", weights)
    export(weights, ["openvino"], ExportOptions(imgsz=(64, 64), dynamic=True), torch.device("cpu"))
    return folder / "yolov5n_openvino_model"


@pytest.fixture
def image(shared) -> torch.Tensor:
    im = letterbox(read_image_checked(shared / "images/zidane.jpg")[0], 96, stride=32)[0]
    return torch.from_numpy(np.ascontiguousarray(im.transpose(2, 0, 1)[::-1]))[None].float() / 255


def _blobs(cache: Path) -> list[Path]:
    return sorted((cache / "openvino").glob("*.blob"))


def test_compiled_model_is_cached_and_read_back_with_the_same_outputs(openvino_export, image, tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_CACHE_DIR", str(tmp_path / "cache"))
    first = load_backend(openvino_export)(image)[0]
    blobs = _blobs(tmp_path / "cache")
    assert len(blobs) == 1
    written = blobs[0].stat().st_mtime_ns
    again = load_backend(openvino_export)(image)[0]
    assert _blobs(tmp_path / "cache") == blobs and blobs[0].stat().st_mtime_ns == written  # read, not rewritten
    assert torch.equal(first, again)


def test_a_cache_folder_that_cannot_be_made_only_costs_a_compile(openvino_export, image, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("YOLO_CACHE_DIR", str(blocker / "cache"))
    out = load_backend(openvino_export)(image)[0]
    assert out.shape[-1] == 85 and blocker.read_text() == "not a folder"


def test_a_damaged_blob_is_compiled_again(openvino_export, image, tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_CACHE_DIR", str(tmp_path / "cache"))
    expected = load_backend(openvino_export)(image)[0]
    blob = _blobs(tmp_path / "cache")[0]
    blob.chmod(0o600)
    blob.write_bytes(blob.read_bytes()[:1000])  # a write cut short
    assert torch.equal(load_backend(openvino_export)(image)[0], expected)
