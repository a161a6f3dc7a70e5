"""Damaged edge exports (NCNN folders, .tflite files, ExecuTorch folders) are refused with one BackendError line,
before their runtime is imported where the damage shows in the files; a missing runtime or converter names
requirements-edge.txt. These need neither the runtimes nor ../shared."""

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

from models.export import edge
from models.export.backends import load_backend
from models.export.exporter import ExportOptions, check_half
from utils.errors import BackendError, ExportError

META = {
    "names": ["a", "b"],
    "family": "yolov5",
    "stride": 32,
    "strides": [8, 16, 32],
    "imgsz": [64, 64],
    "batch": 1,
    "dynamic": False,
    "precision": "fp32",
}
PARAM = "7767517\n2 2\nInput in0 0 1 in0\nConvolution conv0 1 1 in0 out0 0=16 1=3 6=432\n"


def _ncnn_folder(tmp_path: Path, param: str = PARAM, weights: bool = True, meta: dict | None = META) -> Path:
    folder = tmp_path / "m_ncnn_model"
    folder.mkdir(parents=True)
    (folder / "model.ncnn.param").write_text(param)
    if weights:
        (folder / "model.ncnn.bin").write_bytes(bytes(1728))
    if meta is not None:
        (folder / "metadata.yaml").write_text(yaml.safe_dump(meta))
    return folder


def _refusal(path: Path) -> str:
    with pytest.raises(BackendError) as e:
        load_backend(path)
    message = str(e.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("param", "words"),
    [
        (PARAM.rsplit("\n", 2)[0], "declares 2 layers and has 1"),
        ("7767517\n", "no '7767517' line and layer/blob counts"),
        ("not an ncnn file\n1 1\n", "no '7767517' line"),
        (PARAM.replace(" 1 1 in0", " one 1 in0"), "a layer line is not"),
    ],
)
def test_damaged_param_is_one_line(tmp_path, param, words):
    assert words in _refusal(_ncnn_folder(tmp_path, param))


def test_ncnn_folder_missing_a_file_or_its_metadata(tmp_path):
    assert "model.ncnn.bin is missing" in _refusal(_ncnn_folder(tmp_path / "a", weights=False))
    assert "not a YOLO export" in _refusal(_ncnn_folder(tmp_path / "b", meta=None))
    lying = _ncnn_folder(tmp_path / "c", meta={**META, "family": "yolo99"})
    assert "yolo99" in _refusal(lying)


def test_missing_runtime_names_the_edge_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(edge.importlib.util, "find_spec", lambda name, *args: None)
    assert "requirements-edge.txt" in _refusal(_ncnn_folder(tmp_path))
    with pytest.raises(ExportError, match="needs the pnnx package: pip install -r requirements-edge.txt"):
        edge.require_converter("pnnx", "NCNN")


def _tflite(path: Path, body: bytes, metadata: str | None) -> Path:
    archive = io.BytesIO()
    if metadata is not None:
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("metadata.json", metadata)
    path.write_bytes(body + archive.getvalue())
    return path


def test_damaged_tflite_is_one_line(tmp_path):
    header = b"\x1c\x00\x00\x00TFL3" + bytes(32)
    assert "not a YOLO export" in _refusal(_tflite(tmp_path / "cut.tflite", header, None))
    assert "is not JSON" in _refusal(_tflite(tmp_path / "json.tflite", header, "{names"))
    assert "no TFL3 flatbuffer header" in _refusal(_tflite(tmp_path / "x.tflite", bytes(64), json.dumps(META)))


def test_damaged_executorch_folder_is_one_line(tmp_path):
    folder = tmp_path / "m_executorch_model"
    folder.mkdir()
    (folder / "metadata.yaml").write_text(yaml.safe_dump(META))
    assert "model.pte is missing" in _refusal(folder)
    (folder / "model.pte").write_bytes(bytes(range(256)))
    assert "not an ExecuTorch program" in _refusal(folder)


def test_half_on_cpu_is_for_converted_formats_only():
    half = ExportOptions(half=True)
    cpu = torch.device("cpu")
    assert check_half(["ncnn", "litert"], half, cpu) is True
    assert check_half(["onnx"], ExportOptions(), cpu) is False
    with pytest.raises(ExportError, match="needs a CUDA device"):
        check_half(["onnx"], half, cpu)
    with pytest.raises(ExportError, match="in separate runs"):
        check_half(["ncnn", "onnx"], half, cpu)
