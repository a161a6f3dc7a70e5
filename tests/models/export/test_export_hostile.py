"""Export metadata that lies (issue 28): names with control characters are refused when read, from every format; a
YOLO26 export whose metadata names fewer classes than the model predicts, or says end2end: false for its final
detections, is one BackendError line from every backend (TorchScript, ONNX Runtime, OpenVINO) on its first output."""

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import export
from models.export.backends import load_backend
from models.export.metadata import parse_metadata
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint
from utils.errors import BackendError

ROOT = Path(__file__).resolve().parents[3]
FORMATS = ("torchscript", "onnx", "openvino")
NEEDS = ("onnx", "onnxruntime", "openvino")
needs_exports = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in NEEDS),
    reason="optional export packages missing: pip install -r requirements-export.txt",
)


@pytest.mark.parametrize("name", ["person\nERROR: forged", "car\x1b[2J", "bus\r", "x\u202etxt.exe"])
def test_metadata_names_with_control_characters_are_refused(name):
    with pytest.raises(BackendError) as err:
        parse_metadata({"names": json.dumps(["ok", name]), "stride": "32"}, "y.onnx")
    assert "class name 1" in str(err.value) and str(err.value).isprintable()


def test_plain_metadata_names_pass():
    assert parse_metadata({"names": json.dumps(["traffic light", "日本"]), "stride": "32"}, "y.onnx")["names"] == [
        "traffic light",
        "日本",
    ]


@pytest.fixture(scope="module")
def yolo26_exports(shared, tmp_path_factory) -> dict[str, Path]:
    """The YOLO26 reference checkpoint (or a freshly built 80-class YOLO26n) exported at 64 px to every format."""
    folder = tmp_path_factory.mktemp("y26")
    reference = shared / "reference" / "ultralytics" / "yolo26n_random.pt"
    if reference.is_file():
        shutil.copyfile(reference, folder / "y26.pt")
    else:
        torch.manual_seed(0)
        model = Model("yolo26.yaml", nc=80)
        model.names = [f"c{i}" for i in range(80)]
        save_checkpoint(checkpoint_dict(model), folder / "y26.pt")
    return {r.format: r.path for r in export.run(str(folder / "y26.pt"), list(FORMATS), imgsz=(64, 64))}


def _lying_copy(source: Path, fmt: str, folder: Path, changes: dict) -> Path:
    """A copy of an export with some metadata keys changed, written as that format stores them."""
    target = folder / source.name
    if fmt == "openvino":
        shutil.copytree(source, target)
        meta = yaml.safe_load((target / "metadata.yaml").read_text())
        (target / "metadata.yaml").write_text(yaml.safe_dump({**meta, **changes}))
    elif fmt == "onnx":
        import onnx

        model = onnx.load(str(source))
        props = {p.key: p for p in model.metadata_props}
        for key, value in changes.items():
            props[key].value = json.dumps(value)
        onnx.save(model, str(target))
    else:
        extra = {"config.txt": ""}
        module = torch.jit.load(str(source), _extra_files=extra)
        torch.jit.save(
            module, str(target), _extra_files={"config.txt": json.dumps({**json.loads(extra["config.txt"]), **changes})}
        )
    return target


LIES = {
    "3 names for 80 classes": ({"names": ["a", "b", "c"]}, "names 3 classes"),
    "1 name, end2end false": ({"names": ["person"], "end2end": False}, "end2end: false"),
}


@pytest.mark.slow
@needs_exports
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("lie", LIES)
def test_lying_metadata_is_one_error_on_the_first_output(yolo26_exports, tmp_path, fmt, lie):
    changes, words = LIES[lie]
    backend = load_backend(_lying_copy(yolo26_exports[fmt], fmt, tmp_path, changes))
    with pytest.raises(BackendError) as err:
        backend(torch.rand(1, 3, 64, 64))
    assert words in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.slow
@needs_exports
@pytest.mark.parametrize("fmt", FORMATS)
def test_honest_exports_run(yolo26_exports, fmt):
    out, _ = load_backend(yolo26_exports[fmt])(torch.rand(2, 3, 64, 96))
    assert out.shape[0] == 2 and out.shape[-1] == 6


@pytest.mark.slow
@needs_exports
@pytest.mark.parametrize("fmt", FORMATS)
def test_forged_names_in_each_format_are_refused_on_load(yolo26_exports, tmp_path, fmt):
    forged = [f"c{i}\nERROR: forged" for i in range(80)]
    with pytest.raises(BackendError, match="class name 0"):
        load_backend(_lying_copy(yolo26_exports[fmt], fmt, tmp_path, {"names": forged}))


@pytest.mark.slow
@needs_exports
def test_sigterm_during_an_int8_export_leaves_nothing_beside_the_weights(shared, tmp_path):
    """SIGTERM once the export's scratch folder exists (calibration under way): the folder goes, as with Ctrl-C."""
    weights = tmp_path / "w.pt"
    shutil.copyfile(shared / "weights" / "yolov5n.pt", weights)
    names = yaml.safe_load((ROOT / "data" / "coco128.yaml").read_text())["names"]
    data = {"path": str(shared / "datasets" / "coco128"), "train": "images/train2017", "val": "images/train2017"}
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({**data, "names": names}))
    argv = [sys.executable, str(ROOT / "export.py"), "--weights", str(weights), "--img", "64", "--include", "openvino"]
    argv += ["--int8", "--data", str(tmp_path / "data.yaml"), "--calib-images", "16"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".w-export-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode in (0, 143) and "Traceback" not in out, out[-2000:]
    assert not list(tmp_path.glob(".w-export-*")), out[-2000:]
    if proc.returncode == 143:
        assert out.strip().splitlines()[-1] == "Terminated (SIGTERM)" and not list(tmp_path.glob("w_int8*"))
