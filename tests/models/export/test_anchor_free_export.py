"""export.py and the backends with the anchor-free family: YOLO11's (B, N, 5 + nc) predictions and YOLO26's final
(B, 300, 6) end-to-end detections come back from TorchScript, ONNX Runtime and OpenVINO as the .pt gives them, and
the Predictor runs a YOLO26 export without NMS, as it runs the .pt.

Uses the random-initialised reference checkpoints in ../shared/reference/ultralytics (copied into a temporary
folder first: export.py writes beside its weights)."""

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import export
from models.api.detector import Detector
from models.export.backends import load_backend
from models.weights.checkpoint import load_model

NEEDS = ("onnx", "onnxruntime", "openvino")
FORMATS = ("torchscript", "onnx", "openvino")
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in NEEDS),
    reason="optional export packages missing: pip install -r requirements-export.txt",
)


@pytest.fixture(scope="module", params=("yolo11n", "yolo26n"))
def exported(request, shared, tmp_path_factory) -> tuple[str, Path, dict[str, Path]]:
    """(name, the copied .pt, {format: its default (dynamic) export at 320})."""
    reference = shared / "reference" / "ultralytics" / f"{request.param}_random.pt"
    if not reference.is_file():
        pytest.skip(f"{reference} is missing")
    weights = tmp_path_factory.mktemp(request.param) / reference.name
    shutil.copyfile(reference, weights)
    results = export.run(str(weights), list(FORMATS), imgsz=(320, 320))
    return request.param, weights, {r.format: r.path for r in results}


def _rows_match(out: np.ndarray, ref: np.ndarray) -> float:
    """The share of out's (x1, y1, x2, y2, score, class) rows that the .pt's rows hold (same class, corners within
    0.05 px, score within 1e-4). Top-300 lists are compared as sets: a random-initialised model scores thousands of
    (cell, class) pairs within 1e-8 of each other, so a runtime's rounding swaps some near the 300th place."""
    matched = 0
    for row in out:
        same = ref[(ref[:, 5] == row[5]) & (np.abs(ref[:, 4] - row[4]) <= 1e-4)]
        matched += bool(len(same)) and np.abs(same[:, :4] - row[:4]).max(1).min() <= 0.05
    return matched / len(out)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_default_exports_give_the_pt_outputs_on_a_rectangular_input(exported, fmt):
    name, weights, paths = exported
    model = load_model(weights)
    backend = load_backend(paths[fmt])
    assert backend.family == model.family and backend.family.end2end is model.end2end is (name == "yolo26n")
    x = torch.rand(1, 3, 256, 320, generator=torch.Generator().manual_seed(0))  # not the export's 320x320
    with torch.no_grad():
        ref = model(x)[0].numpy()
        out = backend(x)[0].numpy()
    assert out.shape == ref.shape == ((1, 300, 6) if model.end2end else (1, 1680, 5 + len(model.names)))
    if model.end2end:
        assert np.abs(out[0, :, 4] - ref[0, :, 4]).max() <= 1e-3 * ref[0, :, 4].max()  # both sorted by score
        assert _rows_match(out[0], ref[0]) >= 0.9
    else:
        assert np.abs(out - ref).max() <= 1e-3 * np.abs(ref).max()


@pytest.mark.slow
def test_detector_runs_a_yolo26_export_without_nms(exported, shared):
    name, weights, paths = exported
    if name != "yolo26n":
        pytest.skip("end-to-end export only")
    image = shared / "images" / "bus.jpg"
    want = Detector(weights, conf_thres=0.0001)(image)[0].boxes
    got = Detector(paths["onnx"], conf_thres=0.0001)(image)[0].boxes
    assert 0 < len(got) <= 300 and abs(len(got) - len(want)) <= 3
