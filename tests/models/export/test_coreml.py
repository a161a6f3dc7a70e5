"""CoreML exports (models/export/coreml_format.py). CoreML runs only on macOS, so here the export is checked as far
as Linux allows: the spec loads with coremltools, its input and output are named and shaped as documented, the
metadata is there and read back by our bounded reader, the weights file holds 4, 2 or about 1 byte per parameter
for FP32, FP16 and INT8, and the program has one convolution per convolution of the model. detect.py given an
.mlpackage on another system says in one line that CoreML runs only on macOS. The conversions take a minute under
load: those tests are slow, and skip, naming requirements-edge.txt, without coremltools."""

import logging
import platform
import shutil
from pathlib import Path

import pytest
import torch

import detect
from models.export.coreml_format import INPUT, OUTPUT, SPEC, coreml_metadata
from models.export.exporter import ExportOptions, check_int8, export
from models.export.metadata import parse_metadata
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import needs
from utils.errors import BackendError, ExportError, QuantizationError

SIZE = 160
WEIGHTS = {"yolov5n": "weights/yolov5n.pt", "yolo26n": "reference/ultralytics/yolo26n_random.pt"}


def _export(folder: Path, shared: Path, model: str = "yolov5n", **options) -> Path:
    needs("coremltools")
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / Path(WEIGHTS[model]).name
    if not weights.exists():
        shutil.copy(shared / WEIGHTS[model], weights)
    [result] = export(weights, ["coreml"], ExportOptions(imgsz=(SIZE, SIZE), **options), torch.device("cpu"))
    return result.path


def _spec(package: Path):
    logging.getLogger("coremltools").setLevel(logging.ERROR)  # its macOS-only proxies, each a warning
    import coremltools

    return coremltools.utils.load_spec(str(package))


def _op_counts(spec) -> dict[str, int]:
    counts = {}
    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            for op in block.operations:
                counts[op.type] = counts.get(op.type, 0) + 1
    return counts


def _weight_bytes_per_parameter(package: Path, weights: Path) -> float:
    parameters = sum(p.numel() for p in load_model(weights, torch.device("cpu")).parameters())
    return (package / "Data/com.apple.CoreML/weights/weight.bin").stat().st_size / parameters


@pytest.fixture(scope="module")
def fp32_package(tmp_path_factory, shared) -> Path:
    return _export(tmp_path_factory.mktemp("coreml"), shared)


@pytest.mark.slow
def test_fp32_spec_is_named_shaped_and_carries_metadata(fp32_package, shared):
    spec = _spec(fp32_package)
    [image], [output] = spec.description.input, spec.description.output
    assert image.name == INPUT and (image.type.imageType.width, image.type.imageType.height) == (SIZE, SIZE)
    assert image.type.imageType.colorSpace == image.type.imageType.RGB
    cells = sum(3 * (SIZE // s) ** 2 for s in (8, 16, 32))  # three anchors per cell at each level
    assert output.name == OUTPUT and list(output.type.multiArrayType.shape) == [1, cells, 85]
    assert output.type.multiArrayType.dataType == output.type.multiArrayType.FLOAT32
    meta = parse_metadata(coreml_metadata(fp32_package), fp32_package)
    assert meta["family"] == "yolov5" and len(meta["names"]) == 80 and meta["names"][0] == "person"
    assert meta["stride"] == [8.0, 16.0, 32.0] and meta["imgsz"] == (SIZE, SIZE) and meta["batch"] == 1
    assert meta["precision"] == "fp32" and not meta["dynamic"] and meta["exporter"] == "yolo-detect export.py"
    model = load_model(shared / WEIGHTS["yolov5n"], torch.device("cpu"))
    assert _op_counts(spec)["conv"] == sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    assert 4.0 <= _weight_bytes_per_parameter(fp32_package, fp32_package.parent / "yolov5n.pt") < 4.1


@pytest.mark.slow
def test_half_and_int8_weights_and_replacing_our_export(tmp_path, shared, fp32_package):
    half = _export(tmp_path, shared, half=True)
    assert parse_metadata(coreml_metadata(half), half)["precision"] == "fp16"
    assert 2.0 <= _weight_bytes_per_parameter(half, tmp_path / "yolov5n.pt") < 2.1
    int8 = _export(tmp_path, shared, int8=True)  # weight-only INT8: no --data to calibrate on
    assert int8.name == "yolov5n_int8.mlpackage"
    assert parse_metadata(coreml_metadata(int8), int8)["precision"] == "int8"
    assert 0.9 < _weight_bytes_per_parameter(int8, tmp_path / "yolov5n.pt") < 1.2  # small tensors stay float
    assert _op_counts(_spec(int8))["constexpr_affine_dequantize"] > 50  # the convolution weights, dequantized
    shutil.copytree(fp32_package, half, dirs_exist_ok=True)  # an FP32 export of ours where the FP16 one was
    again = _export(tmp_path, shared, half=True)  # replaces it: it is ours
    assert parse_metadata(coreml_metadata(again), again)["precision"] == "fp16"


@pytest.mark.slow
def test_yolo26_exports_its_one_to_many_head(tmp_path, shared):
    """The anchor-free head converts (through torch.export), and YOLO26's end-to-end one without its top-k."""
    package = _export(tmp_path, shared, "yolo26n")
    [output] = _spec(package).description.output
    cells = sum((SIZE // s) ** 2 for s in (8, 16, 32))
    assert list(output.type.multiArrayType.shape) == [1, cells, 85]
    meta = parse_metadata(coreml_metadata(package), package)
    assert meta["family"] == "yolo26" and meta["end2end"] is False


@pytest.mark.skipif(platform.system() == "Darwin", reason="CoreML runs on macOS: the refusal is for other systems")
def test_detect_says_coreml_runs_only_on_macos(tmp_path, shared, log):
    package = tmp_path / "yolov5n.mlpackage"
    (package / SPEC).parent.mkdir(parents=True)
    (package / SPEC).write_bytes(b"")
    argv = ["--weights", str(package), "--source", str(shared / "images/bus.jpg"), "--project", str(tmp_path)]
    assert detect.main(argv) == 1
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert errors == [f"ERROR: {package}: CoreML runs only on macOS (this is {platform.system()}): run the .pt, "
                      "or export onnx, openvino or ncnn here"]  # fmt: skip


def test_int8_needs_no_data_for_coreml_alone():
    assert check_int8(["coreml"], ExportOptions(int8=True)) == []  # weights only: nothing to calibrate
    with pytest.raises(QuantizationError, match="--int8 needs --data"):
        check_int8(["coreml", "onnx"], ExportOptions(int8=True))


def test_a_folder_of_the_same_name_that_is_not_ours_is_refused(tmp_path):
    (tmp_path / "yolov5n.pt").write_bytes(b"not read: the destination is checked first")
    mine = tmp_path / "yolov5n.mlpackage" / "Data"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="exists and is not an export of ours"):
        export(tmp_path / "yolov5n.pt", ["coreml"], ExportOptions(), torch.device("cpu"))
    assert (mine / "notes.txt").read_text() == "mine"


def test_metadata_reader_refuses_damaged_and_oversized_specs(tmp_path):
    package = tmp_path / "bad.mlpackage"
    (package / SPEC).parent.mkdir(parents=True)
    (package / SPEC).write_bytes(b"\x12\xff\xff\xff\x0f")  # description: a field claiming 4 GB
    with pytest.raises(BackendError, match="not a readable CoreML spec"):
        coreml_metadata(package)
    with open(package / SPEC, "wb") as f:
        f.truncate(65 << 20)  # sparse: claims more than a spec can hold, without being read
    with pytest.raises(BackendError, match="larger than the spec"):
        coreml_metadata(package)
    assert coreml_metadata(tmp_path / "empty.mlpackage") == {}
