"""Exported backends (models/export/backends.py):
each format gives the PyTorch model's detections, carries its metadata,
runs detect.py and test.py, and refuses what is not a YOLO export with one line.

The exports are of the real yolov5n weights at small sizes (128 px static, 64-128 px dynamic), so NMS sees real
boxes while the tests stay fast."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import detect
from models.export.backends import load_backend, openvino_core
from models.export.exporter import ExportOptions, export
from models.export.formats import is_backend_path
from models.weights.checkpoint import load_model
from utils.boxes import non_max_suppression
from utils.data.augment import letterbox
from utils.errors import BackendError
from utils.eval.coco_io import COCO80_NAMES
from utils.images import read_image_checked
from utils.torch_utils import cpu_supports_bf16, model_inputs

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)

PACKAGES = {"torchscript": None, "onnx": "onnxruntime", "openvino": "openvino"}
FILES = {"torchscript": "yolov5n.torchscript", "onnx": "yolov5n.onnx", "openvino": "yolov5n_openvino_model"}


def _exports(folder: Path, shared: Path, dynamic: bool) -> Path:
    """yolov5n exported to every format whose package is installed, at 128 px, in folder."""
    folder.mkdir()
    weights = folder / "yolov5n.pt"
    shutil.copy(shared / "weights/yolov5n.pt", weights)
    include = [fmt for fmt, package in PACKAGES.items() if package is None or importlib.util.find_spec(package)]
    export(weights, include, ExportOptions(imgsz=(128, 128), dynamic=dynamic), torch.device("cpu"))
    return folder


@pytest.fixture(scope="module")
def static_exports(tmp_path_factory, shared) -> Path:
    return _exports(tmp_path_factory.mktemp("backends") / "static", shared, dynamic=False)


@pytest.fixture(scope="module")
def dynamic_exports(tmp_path_factory, shared) -> Path:
    return _exports(tmp_path_factory.mktemp("backends") / "dynamic", shared, dynamic=True)


def _backend_path(folder: Path, fmt: str) -> Path:
    if PACKAGES[fmt]:
        pytest.importorskip(PACKAGES[fmt])
    return folder / FILES[fmt]


def _input(shared: Path, shape: tuple[int, int], auto: bool) -> torch.Tensor:
    """bus.jpg letterboxed to shape as a (1, 3, H, W) float tensor in [0, 1]."""
    image, _ = read_image_checked(str(shared / "images/bus.jpg"))
    boxed = letterbox(image, shape, stride=32, auto=auto)[0]
    return torch.from_numpy(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))).float()[None] / 255


def _assert_same_detections(model, backend, x: torch.Tensor) -> None:
    """Raw outputs within 2e-3 and the same boxes after NMS (classes equal, coordinates within 0.5 px)."""
    with torch.no_grad():
        expected, got = model(x)[0], backend(x)[0]
    assert got.shape == expected.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=1e-3)
    a, b = non_max_suppression(expected, 0.25, 0.45)[0], non_max_suppression(got, 0.25, 0.45)[0]
    assert len(a) > 0 and a.shape == b.shape
    assert torch.equal(a[:, 5], b[:, 5])
    torch.testing.assert_close(b[:, :4], a[:, :4], atol=0.5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(PACKAGES))
def test_static_export_matches_pytorch_and_carries_metadata(static_exports, shared, fmt):
    backend = load_backend(_backend_path(static_exports, fmt), "cpu")
    model = load_model(shared / "weights/yolov5n.pt", "cpu")
    assert backend.names == list(model.names) and backend.names[0] == "person"
    torch.testing.assert_close(backend.stride, model.stride.float())
    assert backend.fixed_shape == (128, 128) and backend.batch == 1 and backend.kind
    _assert_same_detections(model, backend, _input(shared, (128, 128), auto=False))
    two = torch.cat([_input(shared, (128, 128), auto=False)] * 2)  # a fixed batch of 1 runs larger batches in turn
    assert backend(two)[0].shape[0] == 2
    # a smaller input runs centred in letterbox grey, its boxes given back in its own coordinates: bus.jpg's 128x96
    # rectangular letterbox then gives the square letterbox's boxes, 16 px to the left
    rect = _input(shared, (128, 128), auto=True)
    assert rect.shape[2:] == (128, 96)
    with torch.no_grad():
        square_boxes = non_max_suppression(model(_input(shared, (128, 128), auto=False))[0], 0.25, 0.45)[0]
        rect_boxes = non_max_suppression(backend(rect)[0], 0.25, 0.45)[0]
    assert len(square_boxes) > 0 and rect_boxes.shape == square_boxes.shape
    torch.testing.assert_close(
        rect_boxes[:, :4] + torch.tensor([16.0, 0, 16, 0]), square_boxes[:, :4], atol=0.5, rtol=0
    )
    with pytest.raises(BackendError, match="static 128x128 export"):
        backend(torch.zeros(1, 3, 160, 128))


@pytest.mark.slow
def test_openvino_takes_uint8_images_as_the_floats_they_make(static_exports, shared):
    """An OpenVINO export declares uint8 input (the engines then skip their float conversion); its graph makes the
    [0, 1] floats of torch's division bit for bit: its outputs on uint8 images are the exported graph's on the
    floats, exactly. Floats given to it (a smaller input, centred in letterbox grey) give what their uint8 give."""
    pytest.importorskip("openvino")
    path = _backend_path(static_exports, "openvino")
    backend = load_backend(path, "cpu")
    x = _input(shared, (128, 128), auto=False)
    images = (x * 255).round().to(torch.uint8)
    assert backend.uint8_input and torch.equal(images.float() / 255, x)
    assert model_inputs(images, backend, torch.float32, False) is images
    config = {"INFERENCE_NUM_THREADS": torch.get_num_threads(), "INFERENCE_PRECISION_HINT": "f32"}
    floats = openvino_core().compile_model(str(next(path.glob("*.xml"))), "CPU", config)
    with torch.no_grad():
        assert torch.equal(backend(images)[0], torch.from_numpy(floats([x.numpy()])[0]))
        rect = _input(shared, (128, 128), auto=True)
        assert torch.equal(backend(rect)[0], backend((rect * 255).round().to(torch.uint8))[0])


# Two OpenVINO backends, the first made freed first, then a signal handled in Python (as Ctrl-C is), in a process of
# its own: it must be handled. With a Core per backend, OpenVINO's CPU plugin left the thread on the first Core's
# unmapped alternate signal stack, and the signal killed the process (SIGSEGV, no traceback: a pytest-xdist worker
# died so in the full suite).
FREED_IN_ORDER = """
import gc, os, signal, sys
import torch
from models.export.backends import load_backend
first, second = load_backend(sys.argv[1], "cpu"), load_backend(sys.argv[1], "cpu")
with torch.no_grad():
    first(torch.zeros(1, 3, 128, 128)), second(torch.zeros(1, 3, 128, 128))
del first
gc.collect()
del second
gc.collect()
handled = []
signal.signal(signal.SIGUSR1, lambda *_: handled.append(True))
os.kill(os.getpid(), signal.SIGUSR1)
print("handled" if handled else "not handled")
"""


@pytest.mark.slow
def test_openvino_backends_freed_in_the_order_made_leave_signals_working(static_exports):
    pytest.importorskip("openvino")
    path = _backend_path(static_exports, "openvino")
    run = subprocess.run([sys.executable, "-c", FREED_IN_ORDER, str(path)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.split()[-1:] == ["handled"], (run.returncode, run.stderr[-500:])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(PACKAGES))
def test_dynamic_export_takes_rectangular_inputs(dynamic_exports, shared, fmt):
    backend = load_backend(_backend_path(dynamic_exports, fmt), "cpu")
    assert backend.fixed_shape is None and backend.batch is None
    model = load_model(shared / "weights/yolov5n.pt", "cpu")
    _assert_same_detections(model, backend, _input(shared, (128, 128), auto=True))  # 128x96 rectangle


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(PACKAGES))
def test_detect_main_with_an_export(static_exports, shared, tmp_path, fmt, log):
    path = _backend_path(static_exports, fmt)
    argv = ["--weights", str(path), "--source", str(shared / "images/bus.jpg"), "--img-size", "128"]
    assert detect.main([*argv, "--save-txt", "--project", str(tmp_path), "--nosave"]) == 0
    assert "square letterbox at 128x128" in log.text
    labels = (tmp_path / "exp/labels/bus.txt").read_text().splitlines()
    assert labels and all(len(line.split()) == 5 for line in labels)
    assert "(1, 3, 128, 128)" in log.text  # square input, although bus.jpg is not square


@pytest.mark.slow
def test_detect_with_pt_and_static_export_give_the_same_labels(static_exports, shared, tmp_path):
    source = str(shared / "images/zidane.jpg")
    common = ["--source", source, "--img-size", "128", "--save-txt", "--nosave", "--project", str(tmp_path)]
    assert detect.main(["--weights", str(static_exports / "yolov5n.torchscript"), *common, "--name", "ts"]) == 0
    ours = np.loadtxt(tmp_path / "ts/labels/zidane.txt", ndmin=2)
    assert len(ours) > 0 and set(ours[:, 0]) <= set(range(80))


def _data_yaml(tmp_path: Path, shared: Path) -> Path:
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:3]
    split = tmp_path / "first3.txt"
    split.write_text("".join(f"{f}\n" for f in files))
    path = tmp_path / "data.yaml"
    lines = [f"path: {shared / 'datasets/coco128'}", "train: images/train2017", f"val: {split}", "nc: 80"]
    path.write_text("\n".join([*lines, f"names: {list(COCO80_NAMES)}"]) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("exports", ["static_exports", "dynamic_exports"])
def test_test_main_with_an_onnx_export(request, shared, tmp_path, exports, log):
    pytest.importorskip("onnxruntime")
    onnx = request.getfixturevalue(exports) / "yolov5n.onnx"
    argv = ["--data", str(_data_yaml(tmp_path, shared)), "--weights", str(onnx), "--img-size", "128"]
    assert yolo_test.main([*argv, "--batch-size", "4", "--project", str(tmp_path), "--workers", "0"]) == 0
    assert "ONNX Runtime backend" in log.text
    if exports == "static_exports":
        assert "square 128x128 batches of at most 1 images" in log.text


def test_non_yolo_onnx_is_refused_with_one_line(tmp_path):
    pytest.importorskip("onnxruntime")
    plain = tmp_path / "linear.onnx"
    torch.onnx.export(torch.nn.Linear(4, 2), (torch.zeros(1, 4),), str(plain), dynamo=False)
    with pytest.raises(BackendError, match="not a YOLO export") as error:
        load_backend(plain)
    assert "\n" not in str(error.value)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(BackendError, match="not a readable ONNX model"):
        load_backend(garbage)


def test_wrong_outputs_onnx_is_refused(tmp_path):
    """An .onnx with YOLO metadata but the wrong output width (not 5 + nc) is refused."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    path = tmp_path / "wrong.onnx"
    torch.onnx.export(torch.nn.Linear(4, 7), (torch.zeros(1, 3, 4),), str(path), dynamo=False)
    proto = onnx.load(str(path))
    for key, value in {"names": '["a", "b", "c"]', "stride": "32"}.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(path))
    with pytest.raises(BackendError, match=r"expected \(batch, boxes, 8\)"):
        load_backend(path)


@pytest.mark.slow
def test_missing_files_and_cli_errors(static_exports, shared, tmp_path, log):
    with pytest.raises(BackendError, match="weights file not found"):
        load_backend(tmp_path / "nope.onnx")
    with pytest.raises(BackendError, match="TensorRT"):
        (tmp_path / "m.engine").write_bytes(b"x")
        load_backend(tmp_path / "m.engine")
    assert is_backend_path("a_openvino_model/") and not is_backend_path("a.pt")
    source = ["--source", str(shared / "images/bus.jpg"), "--project", str(tmp_path)]
    ts = str(static_exports / "yolov5n.torchscript")
    for argv, words in [
        (["--weights", str(tmp_path / "nope.torchscript")], "weights file not found"),
        (["--weights", ts, "--augment"], "--augment (test-time augmentation) takes .pt weights only"),
        (["--weights", ts, str(shared / "weights/yolov5n.pt")], "ensembles take .pt weights only"),
    ]:
        assert detect.main([*argv, *source]) == 1
        errors = [m for m in log.messages if m.startswith("ERROR")]
        assert len(errors) == 1 and words in errors[0] and "\n" not in errors[0], errors
        log.clear()


@pytest.mark.slow
def test_openvino_bf16_runs_in_bfloat16_where_the_cpu_has_it(static_exports, shared, log):
    """--bf16 with an OpenVINO export asks OpenVINO for bfloat16 (float32 with a warning on CPUs without it);
    the boxes stay those of the float32 model within bfloat16's rounding."""
    path = _backend_path(static_exports, "openvino")
    backend = load_backend(path, "cpu", bf16=True)
    if cpu_supports_bf16():
        assert backend.kind == "OpenVINO (bf16)"
    else:
        assert backend.kind == "OpenVINO (f32)" and any("--bf16 needs a CPU" in m for m in log.messages)
    x = _input(shared, (128, 128), auto=False)
    with torch.no_grad():
        full = non_max_suppression(load_backend(path, "cpu")(x)[0], 0.25, 0.45)[0]
        half = non_max_suppression(backend(x)[0], 0.25, 0.45)[0]
    assert len(full) and full[:, 5].tolist() == half[:, 5].tolist()
    torch.testing.assert_close(half[:, :4], full[:, :4], atol=4.0, rtol=0)  # pixels at 128 px


# --- TensorRT engines: the header is read as bounded data here; building and running need CUDA and tensorrt -------


def _fake_engine(path: Path, meta: dict, payload: bytes = b"not an engine") -> Path:
    header = json.dumps(meta).encode()
    path.write_bytes(len(header).to_bytes(4, "little", signed=True) + header + payload)
    return path


def test_engine_metadata_header_is_read_with_bounds(tmp_path):
    from models.export.exporter import EXPORTER, is_our_export
    from models.export.metadata import parse_metadata, read_engine_metadata

    meta = {"names": ["a", "b"], "stride": 32, "imgsz": [640, 640], "batch": 4, "dynamic": True}
    path = _fake_engine(tmp_path / "m.engine", {**meta, "precision": "int8", "calibration_images": 9})
    raw, offset = read_engine_metadata(path)
    parsed = parse_metadata(raw, path)
    assert parsed["names"] == ["a", "b"] and parsed["precision"] == "int8" and parsed["calibration_images"] == 9
    assert offset == 4 + len(json.dumps(raw).encode()) and not is_our_export(path)  # no EXPORTER key
    assert is_our_export(_fake_engine(tmp_path / "ours.engine", {**meta, "exporter": EXPORTER}))
    huge = tmp_path / "huge.engine"
    huge.write_bytes((1 << 30).to_bytes(4, "little", signed=True) + b"{}")  # claims 1 GiB of metadata
    with pytest.raises(BackendError, match="no metadata header of ours"):
        read_engine_metadata(huge)
    (tmp_path / "text.engine").write_bytes((4).to_bytes(4, "little", signed=True) + b"\xff\xfe{]")
    with pytest.raises(BackendError, match="not JSON"):
        read_engine_metadata(tmp_path / "text.engine")


def test_engine_without_tensorrt_or_cuda_is_one_line(tmp_path, monkeypatch):
    path = _fake_engine(tmp_path / "m.engine", {"names": ["a"], "stride": 32})
    with pytest.raises(BackendError, match="TensorRT engines need CUDA") as error:
        load_backend(path, "cpu")
    assert "\n" not in str(error.value)


needs_tensorrt = pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is None or not torch.cuda.is_available(), reason="needs tensorrt and CUDA"
)


@needs_tensorrt
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_engine_detects_like_pytorch(shared, tmp_path, precision):
    import export as export_cli

    weights = tmp_path / "yolov5n.pt"
    shutil.copy(shared / "weights/yolov5n.pt", weights)
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:16]
    (tmp_path / "val.txt").write_text("".join(f"{f}\n" for f in files))
    data = tmp_path / "data.yaml"
    data.write_text(f"path: {tmp_path}\ntrain: val.txt\nval: val.txt\nnc: 80\nnames: {list(COCO80_NAMES)}\n")
    flags = {"fp32": [], "fp16": ["--half"], "int8": ["--int8", "--data", str(data)]}[precision]
    argv = ["--weights", str(weights), "--include", "engine", "--device", "0", "--img", "128", *flags]
    assert export_cli.main([*argv, "--batch-size", "2"]) == 0
    engine = tmp_path / ("yolov5n_int8.engine" if precision == "int8" else "yolov5n.engine")
    backend = load_backend(engine, "cuda:0")
    assert backend.precision == precision and backend.fixed_shape is None
    model = load_model(shared / "weights/yolov5n.pt", "cuda:0")
    x = _input(shared, (128, 128), auto=True).cuda()
    with torch.no_grad():
        a = non_max_suppression(model(x)[0], 0.25, 0.45)[0]
        b = non_max_suppression(backend(torch.cat([x] * 3))[0][:1], 0.25, 0.45)[0]  # 3 > batch 2: in chunks
    assert len(a) > 0 and len(b) > 0 and int(a[0, 5]) == int(b[0, 5])
    tolerance = {"fp32": 0.5, "fp16": 2.0, "int8": 8.0}[precision]  # pixels at 128 px
    torch.testing.assert_close(b[0, :4], a[0, :4], atol=tolerance, rtol=0)
