"""LiteRT (models/export/litert_format.py) and ExecuTorch (models/export/executorch_format.py) exports of yolov5n: on
real COCO128 images they give the .pt's detections, carry their metadata, and detect.py runs them. Their converters
take a minute or more, so these are slow tests; each skips, with the reason, without its packages
(requirements-edge.txt) or ../shared."""

import shutil
from pathlib import Path

import pytest
import torch

import detect
from models.export.backends import load_backend
from models.export.exporter import ExportOptions, export
from models.export.litert_format import litert_metadata
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import agreement, needs

SIZE = 320
PACKAGES = {"litert": ("litert_torch", "ai_edge_litert"), "executorch": ("executorch",)}
NAMES = {"litert": "yolov5n.tflite", "executorch": "yolov5n_executorch_model"}


def _export(folder: Path, shared: Path, fmt: str, half: bool = False) -> Path:
    needs(*PACKAGES[fmt])
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(shared / "weights/yolov5n.pt", folder / "yolov5n.pt")
    [result] = export(folder / "yolov5n.pt", [fmt], ExportOptions(imgsz=(SIZE, SIZE), half=half), torch.device("cpu"))
    return result.path


@pytest.fixture(scope="module", params=list(PACKAGES))
def exported(request, tmp_path_factory, shared) -> Path:
    return _export(tmp_path_factory.mktemp(request.param), shared, request.param)


def _images(shared: Path, count: int) -> list[Path]:
    return sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:count]


@pytest.mark.slow
def test_fp32_export_detects_as_the_pt_and_carries_metadata(exported, shared):
    backend = load_backend(exported)
    assert backend.precision == "fp32" and len(backend.names) == 80 and backend.family.name == "yolov5"
    model = load_model(shared / "weights/yolov5n.pt", torch.device("cpu"))
    result = agreement(model, backend, _images(shared, 8), SIZE, end2end=False)
    assert result.total > 10 and result.rate >= 0.99, result.line()
    if exported.name.endswith("_executorch_model"):  # shape-dynamic: the .pt's rectangles, up to the export size
        assert backend.fixed_shape is None
        x = torch.rand(2, 3, 192, SIZE)
        with torch.no_grad():
            assert (backend(x)[0] - model(x)[0]).abs().max() < 0.05
    else:  # LiteRT: litert-torch fixes the upsamplings' output sizes, so one signature per shape
        assert backend.fixed_shape is None and [s.shape for s in backend.signatures][-1] == (1, 3, SIZE + 32, SIZE + 32)


@pytest.mark.slow
def test_detect_runs_the_export(exported, shared, tmp_path, log):
    argv = ["--weights", str(exported), "--source", str(shared / "images/bus.jpg"), "--save-txt", "--nosave"]
    assert detect.main([*argv, "--project", str(tmp_path)]) == 0
    assert exported.name.endswith("_executorch_model") or "dynamic input (rectangular letterbox)" in log.text
    assert (tmp_path / "exp/labels/bus.txt").read_text().splitlines()


@pytest.mark.slow
def test_litert_fp16_halves_the_file_and_stays_close(tmp_path, shared):
    path = _export(tmp_path, shared, "litert", half=True)
    assert litert_metadata(path)["precision"] == "fp16"
    assert path.stat().st_size < 0.62 * 7.5e6  # float16 weights: about half of FP32's 7.6 MB (LiteRT: with
    # one grid per signature, 4.50 MB at its four shapes before the anchor sizes were broadcast)
    backend = load_backend(path)
    model = load_model(shared / "weights/yolov5n.pt", torch.device("cpu"))
    result = agreement(model, backend, _images(shared, 8), SIZE, end2end=False)
    assert result.total > 10 and result.rate >= 0.9, result.line()
