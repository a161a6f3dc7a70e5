"""export.py and models/export/exporter.py: each format round-trips (outputs and metadata) and bad inputs
end in one line."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import detect
import export
from models.export.backends import openvino_core
from models.export.exporter import ExportOptions
from models.export.exporter import export as export_weights
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, load_model, save_checkpoint
from utils.errors import ExportError
from utils.eval.coco_io import COCO80_NAMES

ROOT = Path(__file__).resolve().parents[3]
NAMES = ["cat", "dog", "bird"]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> Path:
    """A yolov5n-shaped 3-class checkpoint of our format (random weights)."""
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=3)
    model.names = list(NAMES)
    path = tmp_path_factory.mktemp("export") / "tiny.pt"
    save_checkpoint(checkpoint_dict(model), path)
    return path


def _reference(weights: Path, x: torch.Tensor) -> np.ndarray:
    """The PyTorch model's decoded predictions for x."""
    with torch.no_grad():
        return load_model(weights)(x)[0].numpy()


def _close(out: np.ndarray, ref: np.ndarray) -> None:
    """Same shape, and within 1e-3 of the PyTorch output relative to its largest value (pixel coordinates)."""
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= 1e-3 * max(1.0, np.abs(ref).max())


def _check_metadata(meta: dict, imgsz: list[int], dynamic: bool) -> None:
    assert meta["names"] == NAMES
    assert meta["stride"] == 32 and meta["strides"] == [8, 16, 32]
    assert meta["imgsz"] == imgsz and meta["dynamic"] is dynamic and meta["batch"] == 1


def _exported(weights: Path, fmt: str, dynamic: bool = False) -> Path:
    """Export weights at 64x64 to one format in-process, via export.run (as the CLI does): static unless dynamic."""
    results = export.run(str(weights), [fmt], imgsz=(64, 64), static=not dynamic)
    assert [r.format for r in results] == [fmt] and results[0].size_mb > 0
    return results[0].path


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_torchscript_round_trip(tiny_weights):
    path = _exported(tiny_weights, "torchscript")
    assert path.name == "tiny.torchscript"
    files = {"config.txt": ""}
    module = torch.jit.load(str(path), _extra_files=files)
    _check_metadata(json.loads(files["config.txt"]), [64, 64], False)
    x = torch.rand(1, 3, 64, 64)
    _close(module(x).numpy(), _reference(tiny_weights, x))


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, True])
def test_onnx_round_trip(tiny_weights, dynamic):
    onnx = pytest.importorskip("onnx", reason="optional: pip install -r requirements-export.txt")
    ort = pytest.importorskip("onnxruntime", reason="optional: pip install -r requirements-export.txt")
    path = _exported(tiny_weights, "onnx", dynamic)
    assert path.name == "tiny.onnx"
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
    _check_metadata(meta, [64, 64], dynamic)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shapes = [(1, 3, 64, 64), (2, 3, 96, 128)] if dynamic else [(1, 3, 64, 64)]
    for shape in shapes:  # a dynamic export computes its grids from the input, so other sizes decode right
        x = torch.rand(shape)
        _close(session.run(None, {"images": x.numpy()})[0], _reference(tiny_weights, x))


@pytest.mark.slow
def test_openvino_round_trip(tiny_weights):
    pytest.importorskip("openvino", reason="optional: pip install -r requirements-export.txt")
    pytest.importorskip("onnx", reason="optional: pip install -r requirements-export.txt")
    folder = _exported(tiny_weights, "openvino")
    assert folder.name == "tiny_openvino_model" and (folder / "tiny.xml").is_file() and (folder / "tiny.bin").is_file()
    _check_metadata(yaml.safe_load((folder / "metadata.yaml").read_text()), [64, 64], False)
    compiled = openvino_core().compile_model(str(folder / "tiny.xml"), "CPU")  # the engines' Core: see its doc
    x = torch.rand(1, 3, 64, 64)
    _close(compiled(x.numpy())[0], _reference(tiny_weights, x))


@pytest.mark.slow
def test_official_yolov5n_exports_at_640(shared, tmp_path):
    """The official checkpoint exports to all three formats (copied first: nothing is written into ../shared)."""
    pytest.importorskip("onnx", reason="optional: pip install -r requirements-export.txt")
    pytest.importorskip("openvino", reason="optional: pip install -r requirements-export.txt")
    weights = tmp_path / "yolov5n.pt"
    shutil.copy(shared / "weights" / "yolov5n.pt", weights)
    assert export.main(["--weights", str(weights), "--include", "torchscript", "onnx", "openvino"]) == 0
    names = {"yolov5n.torchscript", "yolov5n.onnx", "yolov5n_openvino_model"}
    assert names <= {p.name for p in tmp_path.iterdir()}
    meta = yaml.safe_load((tmp_path / "yolov5n_openvino_model" / "metadata.yaml").read_text())
    assert len(meta["names"]) == 80 and meta["names"][0] == "person" and meta["stride"] == 32


def _one_error_line(log) -> str:
    """The one ERROR line the command logged; no traceback."""
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert len(errors) == 1 and "\n" not in errors[0] and "Traceback" not in log.text, log.text
    return errors[0]


def test_corrupt_checkpoint_is_refused(tmp_path, log):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    assert export.main(["--weights", str(bad), "--include", "onnx"]) == 1
    assert "refused to load" in _one_error_line(log)
    assert not (tmp_path / "bad.onnx").exists()


def test_half_on_cpu_is_one_line(tiny_weights, log):
    assert export.main(["--weights", str(tiny_weights), "--half", "--img", "64"]) == 1
    assert "--half" in _one_error_line(log)


def test_engine_on_cpu_is_one_line(tiny_weights, log):
    assert export.main(["--weights", str(tiny_weights), "--include", "engine", "--img", "64"]) == 1
    assert "CUDA" in _one_error_line(log)


def test_unknown_format_is_refused_at_parsing(tiny_weights, capsys):
    with pytest.raises(SystemExit) as exit_info:
        export.main(["--weights", str(tiny_weights), "--include", "foo"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("ERROR: argument --include: invalid choice: 'foo'")


def test_size_not_a_multiple_of_the_stride_is_refused(tiny_weights):
    with pytest.raises(ExportError, match="multiple of the model's stride 32"):
        export_weights(tiny_weights, ["onnx"], ExportOptions(imgsz=(70, 64)), CPU)


def test_missing_weights_is_one_line(tmp_path, log):
    assert export.main(["--weights", str(tmp_path / "none.pt")]) == 1
    assert "no such file" in _one_error_line(log)


def test_missing_package_names_the_requirements_file(tiny_weights, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if onnx were not installed: importing it raises ImportError
    with pytest.raises(ExportError, match="onnx is not installed: pip install -r requirements-export.txt"):
        export_weights(tiny_weights, ["onnx"], ExportOptions(imgsz=(64, 64)), CPU)


def test_exports_are_dynamic_by_default_and_static_on_request(tiny_weights):
    onnx = pytest.importorskip("onnx", reason="optional: pip install -r requirements-export.txt")
    results = export.run(str(tiny_weights), ["onnx"], imgsz=(64, 64))
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(results[0].path)).metadata_props}
    assert meta["dynamic"] is True and meta["precision"] == "fp32" and meta["calibration_images"] == 0
    results = export.run(str(tiny_weights), ["onnx"], imgsz=(64, 64), static=True)
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(results[0].path)).metadata_props}
    assert meta["dynamic"] is False and meta["imgsz"] == [64, 64]


def test_static_and_dynamic_together_are_refused(tiny_weights, capsys):
    with pytest.raises(SystemExit):
        export.main(["--weights", str(tiny_weights), "--static", "--dynamic"])
    assert "--static and --dynamic are exclusive" in capsys.readouterr().err


# --- acceptance: default exports reproduce the .pt (detect.py's reference boxes, test.py's mAP) ---------------------

DEFAULT_FORMATS = {"torchscript": "yolov5n.torchscript", "onnx": "yolov5n.onnx", "openvino": "yolov5n_openvino_model"}


@pytest.fixture(scope="module")
def default_exports(tmp_path_factory, shared) -> Path:
    """The official yolov5n exported with export.py's defaults (640, dynamic) to every installed format."""
    pytest.importorskip("onnx", reason="optional: pip install -r requirements-export.txt")
    folder = tmp_path_factory.mktemp("default_exports")
    shutil.copy(shared / "weights" / "yolov5n.pt", folder / "yolov5n.pt")
    include = ["torchscript", "onnx"] + (["openvino"] if importlib.util.find_spec("openvino") else [])
    assert export.main(["--weights", str(folder / "yolov5n.pt"), "--include", *include]) == 0
    return folder


def _installed(fmt: str) -> None:
    package = {"torchscript": None, "onnx": "onnxruntime", "openvino": "openvino"}[fmt]
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"optional {package} is not installed")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(DEFAULT_FORMATS))
def test_default_export_reproduces_the_official_detections(default_exports, shared, tmp_path, fmt, log):
    from tests.commands.test_detect import (
        _assert_matches_reference,
    )  # IoU >= 0.95, confidence within 0.02 of YOLOv5's labels

    _installed(fmt)
    weights = default_exports / DEFAULT_FORMATS[fmt]
    argv = ["--weights", str(weights), "--source", str(shared / "images"), "--save-txt", "--save-conf", "--nosave"]
    assert detect.main([*argv, "--project", str(tmp_path)]) == 0
    assert "dynamic input (rectangular letterbox)" in log.text
    _assert_matches_reference(tmp_path / "exp" / "labels")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(DEFAULT_FORMATS))
def test_default_export_gives_the_pt_coco128_map(default_exports, shared, tmp_path, fmt):
    _installed(fmt)
    spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
    yolo_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(yolo_test)
    root = shared / "datasets" / "coco128"
    data = tmp_path / "coco128.yaml"
    lines = [f"path: {root}", "train: images/train2017", "val: images/train2017", "nc: 80"]
    lines += ["ann_json: annotations/instances_train2017.json", f"names: {list(COCO80_NAMES)}"]
    data.write_text("\n".join(lines) + "\n")
    weights = default_exports / DEFAULT_FORMATS[fmt]
    argv = ["--weights", str(weights), "--data", str(data), "--img", "640", "--batch-size", "16", "--no-plots"]
    assert yolo_test.main([*argv, "--project", str(tmp_path), "--name", fmt]) == 0
    got = json.loads((tmp_path / fmt / "results.json").read_text())["metrics"]["mAP50-95"]
    assert abs(got - 0.3701) <= 0.002, got  # the .pt's COCO128 mAP50-95 at 640, batch 16 (README)
