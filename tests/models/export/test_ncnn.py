"""NCNN exports (models/export/ncnn_format.py): pnnx converts the traced model, the ncnn package runs it, and on real
COCO128 images it gives the .pt's detections (FP32), close to them (FP16); detect.py, test.py and the Detector run
it. Skipped, with the reason, without pnnx and ncnn (requirements-edge.txt) or ../shared."""

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
import yaml

import detect
from models.api.detector import Detector
from models.export.backends import load_backend
from models.export.exporter import ExportOptions, export
from models.nn.head import set_end2end
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import agreement, needs, raw_agreement

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)

SIZE = 320
RANDOM = ("yolov8n", "yolo11n", "yolo26n")


def _export(folder: Path, weights: Path, half: bool = False) -> Path:
    needs("pnnx", "ncnn")
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / weights.name
    shutil.copy(weights, copy)
    export(copy, ["ncnn"], ExportOptions(imgsz=(SIZE, SIZE), half=half), torch.device("cpu"))
    return folder / f"{copy.stem}_ncnn_model"


@pytest.fixture(scope="module")
def yolov5n_ncnn(tmp_path_factory, shared) -> Path:
    return _export(tmp_path_factory.mktemp("ncnn") / "fp32", shared / "weights/yolov5n.pt")


def _images(shared: Path, count: int) -> list[Path]:
    return sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:count]


def test_fp32_export_detects_as_the_pt_on_real_images(yolov5n_ncnn, shared):
    backend = load_backend(yolov5n_ncnn)
    model = load_model(shared / "weights/yolov5n.pt", torch.device("cpu"))
    result = agreement(model, backend, _images(shared, 8), SIZE, end2end=False)
    assert result.total > 10 and result.rate >= 0.99, result.line()


def test_export_carries_metadata_and_takes_any_rectangle(yolov5n_ncnn, shared):
    files = sorted(p.name for p in yolov5n_ncnn.iterdir())
    assert files == ["metadata.yaml", "model.ncnn.bin", "model.ncnn.param"]
    meta = yaml.safe_load((yolov5n_ncnn / "metadata.yaml").read_text())
    assert meta["dynamic"] is True and meta["batch"] == 1 and meta["imgsz"] == [SIZE, SIZE]
    backend = load_backend(yolov5n_ncnn)
    assert backend.family.name == meta["family"] and backend.precision == "fp32"
    assert backend.fixed_shape is None and len(backend.names) == 80 and backend.stride.tolist() == [8.0, 16.0, 32.0]
    # two rectangles other than the traced square and pnnx's second shape: the grid follows the input (a grid
    # folded at one shape would put every box of another shape off by cells)
    model = load_model(shared / "weights/yolov5n.pt", torch.device("cpu"))
    for h, w in ((256, 320), (320, 192)):
        batch = torch.rand(3, 3, h, w)  # more images than its batch of 1: run one image at a time
        out = backend(batch)[0]
        with torch.no_grad():
            expected = model(batch)[0]
        assert out.shape == expected.shape == (3, 3 * 21 * h * w // 1024, 85)
        assert (out - expected).abs().max() < 0.05


def test_fp16_export_stays_close_to_the_pt(tmp_path, shared):
    folder = _export(tmp_path, shared / "weights/yolov5n.pt", half=True)
    backend = load_backend(folder)
    assert backend.precision == "fp16"
    assert (folder / "model.ncnn.bin").stat().st_size < 0.6 * 7.0e6  # float16 weights: about half of FP32's 7.5 MB
    model = load_model(shared / "weights/yolov5n.pt", torch.device("cpu"))
    result = agreement(model, backend, _images(shared, 8), SIZE, end2end=False)
    assert result.total > 10 and result.rate >= 0.9, result.line()


def test_detect_test_and_detector_run_it(yolov5n_ncnn, shared, tmp_path, log):
    source = shared / "images/bus.jpg"
    argv = ["--weights", str(yolov5n_ncnn), "--source", str(source), "--save-txt", "--nosave"]
    assert detect.main([*argv, "--project", str(tmp_path)]) == 0
    assert "NCNN backend, fp32" in log.text
    assert (tmp_path / "exp/labels/bus.txt").read_text().splitlines()
    results = Detector(yolov5n_ncnn)(str(source))
    assert len(results[0].boxes) > 0
    data = tmp_path / "data.yaml"
    data.write_text(yaml.safe_dump({"path": str(shared / "datasets/coco128"), "val": "images/train2017", "nc": 80}))
    argv = ["--data", str(data), "--weights", str(yolov5n_ncnn), "--batch-size", "4", "--workers", "0"]
    assert yolo_test.main([*argv, "--project", str(tmp_path / "test")]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", RANDOM)
def test_anchor_free_families_detect_as_their_pt(tmp_path, shared, name):
    weights = shared / f"reference/ultralytics/{name}_random.pt"
    backend = load_backend(_export(tmp_path, weights))
    model = load_model(weights, torch.device("cpu"))
    set_end2end(model, False)
    assert backend.family == model.family.merged()  # YOLO26: its one-to-many head, run with NMS (NCNN has no top-k)
    result = raw_agreement(model, backend, _images(shared, 4), SIZE)
    assert result.total == 4 * 2100 and result.rate >= 0.99, result.line()
