"""CoreML exports: the model through torch.export, converted by coremltools into an ML program (`.mlpackage`).

An export is a folder, `<stem>.mlpackage` (Apple's package: Manifest.json, Data/com.apple.CoreML/model.mlmodel with
the program and the metadata, Data/com.apple.CoreML/weights/weight.bin). Its one input is `image`, an RGB image of
the export's size (a CoreML ImageType scaled by 1/255, so that Vision and CVPixelBuffers feed it directly); its one
output is `output0`, float32 (1, N, 5 + nc) as every export gives. It is static: one square size (--img-size),
batch 1. The metadata (names, strides, family, image size, precision, ...) is the model's user-defined metadata,
each value a JSON string, as ONNX's metadata_props.

Precision: FP32 by default (float32 weights and arithmetic: the .pt's numbers); --half, FP16 weights and arithmetic
(what the Neural Engine runs); --int8, INT8 weights (per-channel linear symmetric, coremltools'
linear_quantize_weights) over FP16 arithmetic: weight-only, so nothing is calibrated and --data is not needed.

torch.export rather than a TorchScript trace: with torch 2.14 a trace leaves shape arithmetic (h * w) that
coremltools 9 cannot convert for the anchor-free heads. YOLO26's end-to-end head exports its one-to-many
predictions (run with NMS), as for NCNN: coremltools does not convert its top-k gather.

CoreML runs only on macOS: on any other system the backend says so in one line, before anything is read. The
metadata is read here by scanning the spec's protobuf fields (bounded, without importing coremltools), so an
export can be recognised and replaced on any system.
"""

import contextlib
import io
import json
import logging
import platform
import warnings
from pathlib import Path

import numpy as np
import torch

from models.export.edge import import_runtime, require_converter, without_top_k
from models.export.metadata import _skip, _string_pair, _varint, error_line, parse_metadata
from models.export.runtime import Backend
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

INPUT, OUTPUT = "image", "output0"
SPEC = Path("Data/com.apple.CoreML/model.mlmodel")  # where coremltools writes the spec inside the package
MAX_SPEC_BYTES = 64 << 20  # the program and its metadata, not the weights; yolov5n's is ~0.1 MB
# protobuf field numbers (coremltools' Model.proto): Model.description, ModelDescription.metadata,
# Metadata.userDefined (a map: entries of key 1, value 2)
DESCRIPTION, METADATA, USER_DEFINED = 2, 100, 100


@contextlib.contextmanager
def _quiet_coremltools():
    """coremltools logs a warning for each macOS-only proxy it cannot load and warns about untested torch and
    scikit-learn versions: none of that concerns an export."""
    logger = logging.getLogger("coremltools")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _exported_program(model: torch.nn.Module, sample: torch.Tensor):
    """torch.export of the model at the sample's shape, with aten.alias (a no-op torch.export keeps where YOLOv5's
    head clones its maps, and coremltools has no converter for) replaced by its input."""
    program = torch.export.export(model, (sample,)).run_decompositions({})
    for node in list(program.graph.nodes):
        if node.target is torch.ops.aten.alias.default:
            node.replace_all_uses_with(node.args[0])
            program.graph.erase_node(node)
    program.graph_module.recompile()
    return program


def export_coreml(job, path: Path) -> Path:
    """The model at one square shape (batch 1) converted to an ML program in path (.mlpackage): FP32, FP16
    (--half) or INT8 weights (--int8), with the metadata as user-defined metadata."""
    with _quiet_coremltools():
        ct = require_converter("coremltools", "CoreML")
    sample = job.sample[:1].float()
    precision = job.options.precision
    try:
        with without_top_k(job, "coremltools' converter") as metadata, _quiet_coremltools():
            program = _exported_program(job.model.float().eval(), sample)
            compute = ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16
            model = ct.convert(
                program,
                inputs=[ct.ImageType(name=INPUT, shape=tuple(sample.shape), scale=1 / 255, bias=[0, 0, 0])],
                outputs=[ct.TensorType(name=OUTPUT, dtype=np.float32)],
                convert_to="mlprogram",
                compute_precision=compute,
                minimum_deployment_target=ct.target.iOS16,
            )
            if precision == "int8":
                model = _int8_weights(model)
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # torch.export's and coremltools' own error types
        raise ExportError(f"coremltools could not convert the model to CoreML: {error_line(e)}") from None
    h, w = sample.shape[2:]
    _describe(model, {**metadata, "dynamic": False, "batch": 1, "imgsz": [h, w], "precision": precision})
    model.save(str(path))
    LOGGER.info(f"CoreML: static 1x3x{h}x{w} input '{INPUT}' (RGB image, scaled 1/255); it runs on macOS only")
    return path


def _int8_weights(model):
    """The ML program with its weights quantized to int8 (per output channel, linear symmetric)."""
    from coremltools.optimize import coreml as optimize

    config = optimize.OptimizationConfig(
        global_config=optimize.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8")
    )
    return optimize.linear_quantize_weights(model, config)


def _describe(model, metadata: dict) -> None:
    """The metadata (each value a JSON string) and the descriptions Xcode shows."""
    for key, value in metadata.items():
        model.user_defined_metadata[key] = json.dumps(value)
    h, w = metadata["imgsz"]
    model.short_description = f"{len(metadata['names'])}-class {metadata['family']} detector ({metadata['exporter']})"
    model.input_description[INPUT] = f"RGB image, {w}x{h}, letterboxed (padding 114)"
    width = "6: x1, y1, x2, y2, confidence, class" if metadata["end2end"] else "5 + classes: x, y, w, h, objectness"
    model.output_description[OUTPUT] = f"(1, boxes, {width}) in input pixels, after sigmoid"


def _fields(message: bytes, number: int) -> list[bytes]:
    """The payloads of the length-delimited fields numbered `number` in one protobuf message."""
    stream, found = io.BytesIO(message), []
    while (tag := _varint(stream)) is not None:
        size = _skip(stream, tag & 7, len(message))
        if size is not None:
            payload = stream.read(size)
            if tag >> 3 == number:
                found.append(payload)
    return found


def coreml_metadata(package: Path) -> dict[str, str]:
    """The user-defined metadata of an .mlpackage ({} when it has none), read from the spec's protobuf fields after
    its size is checked."""
    spec = package / SPEC
    if not spec.is_file():
        return {}
    size = spec.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise BackendError(f"{spec} is {size} bytes: larger than the spec of a YOLO model can be")
    try:
        entries = [
            _string_pair(entry)
            for description in _fields(spec.read_bytes(), DESCRIPTION)
            for metadata in _fields(description, METADATA)
            for entry in _fields(metadata, USER_DEFINED)
        ]
    except (ValueError, UnicodeDecodeError) as e:  # UnicodeDecodeError is a ValueError too
        raise BackendError(f"{spec} is not a readable CoreML spec: {e}") from None
    except OSError as e:
        raise BackendError(f"{spec} could not be read: {e.strerror or e}") from None
    return dict(entries)


def macos_only(path: Path) -> None:
    """BackendError (one line) on any system but macOS, the only one with a CoreML runtime."""
    system = platform.system()
    if system != "Darwin":
        raise BackendError(
            f"{path}: CoreML runs only on macOS (this is {system}): run the .pt, or export onnx, openvino or ncnn here"
        )


class CoreMLBackend(Backend):
    """An .mlpackage of ours run by CoreML through coremltools (macOS only), one image per prediction."""

    kind = "CoreML"
    own_threads = True  # CoreML schedules its own work: the Predictor then pre-processes in NumPy

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        macos_only(path)
        super().__init__(path, parse_metadata(coreml_metadata(path), path), device)
        with _quiet_coremltools():
            ct = import_runtime("coremltools")
        try:
            self.model = ct.models.MLModel(str(path))
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # coremltools' own error types, with CoreML's text
            raise BackendError(f"{path} could not be loaded by CoreML: {error_line(e)}") from None
        description = self.model.get_spec().description
        inputs, outputs = [i.name for i in description.input], [o.name for o in description.output]
        if inputs != [INPUT] or outputs != [OUTPUT]:
            raise BackendError(f"{path} is not a YOLO export: inputs {inputs} and outputs {outputs}")

    def run(self, x: torch.Tensor) -> torch.Tensor:
        from PIL import Image

        outputs = []
        for image in x.detach().cpu().float().numpy():  # (3, H, W) RGB in [0, 1]: back to the 8-bit image it was
            rgb = (image.transpose(1, 2, 0) * 255).round().clip(0, 255).astype(np.uint8)
            outputs.append(np.asarray(self.model.predict({INPUT: Image.fromarray(rgb)})[OUTPUT], dtype=np.float32))
        return torch.from_numpy(np.concatenate(outputs))
