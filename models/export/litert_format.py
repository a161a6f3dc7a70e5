"""LiteRT (TensorFlow Lite) exports: the model converted by litert-torch and run by LiteRT's interpreter
(`ai-edge-litert`, with its XNNPACK delegate).

An export is one file, `<stem>.tflite`, FP32 or FP16 as its metadata records. The metadata is a zip archive appended
to the flatbuffer holding `metadata.json` (the layout Ultralytics uses: the interpreter ignores bytes after the
model), read back with zipfile with its member sizes checked first. litert-torch exports through torch.export at one
input shape, so the export is static: --img-size, batch 1 unless --batch-size. --half casts the weights to float16
(ai-edge-quantizer's weight-only float casting; the arithmetic stays float32 on CPUs). Anchor-free predictions come
out as (5 + nc, N) (edge.channel_predictions), and the heads' grids are constants of the graph: every op runs in
XNNPACK's partitions, as in Ultralytics' export of the same model.
"""

import json
import warnings
import zipfile
from pathlib import Path

import torch

from models.export.edge import channel_layout, channel_predictions, import_runtime, require_converter, rows_of
from models.export.metadata import MAX_METADATA_BYTES, error_line, parse_metadata
from models.export.runtime import Backend
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

METADATA_MEMBER = "metadata.json"
MAX_ZIP_MEMBERS = 16  # ours has one member; Ultralytics' too
FLATBUFFER_ID = b"TFL3"  # bytes 4-8 of every .tflite


def _square(x: torch.Tensor, exponent):
    """aten.pow with a scalar exponent, which LiteRT's converter cannot lower on 5-D tensors (YOLOv5's box decoding
    squares its width and height): x * x for a square, exp(log(x) * e) otherwise."""
    return x * x if exponent == 2 else torch.exp(torch.log(x) * exponent)


def export_litert(job, path: Path) -> Path:
    """litert_torch.convert the model at the job's input shape into path; --half: weights cast to float16; the
    metadata appended as a zip of metadata.json."""
    litert_torch = require_converter("litert_torch", "LiteRT")
    litert_torch.fx_infra.decomp.add_pre_lower_decomp(torch.ops.aten.pow.Tensor_Scalar, _square)
    sample, model = job.sample.float(), job.model.float().eval()
    try:
        with warnings.catch_warnings(), channel_predictions(model) as layout:
            warnings.simplefilter("ignore")
            with torch.no_grad():  # fills the heads' grid caches at this shape: the graph holds them as constants,
                model(sample)  # not as BROADCAST_TO ops, which XNNPACK lacks and which split its partition
            converted = litert_torch.convert(model, (sample,))
        converted.export(str(path))
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # the converter's own error types: an op it cannot lower
        raise ExportError(f"litert-torch could not convert the model to LiteRT: {error_line(e)}") from None
    if job.options.half:
        _cast_weights_to_fp16(path)
    h, w = sample.shape[2:]
    static = {"dynamic": False, "batch": sample.shape[0], "imgsz": [h, w], "precision": job.options.precision}
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(METADATA_MEMBER, json.dumps({**job.metadata, **layout, **static}))
    LOGGER.info(f"LiteRT: static {sample.shape[0]}x3x{h}x{w} input (litert-torch exports one shape)")
    return path


def _cast_weights_to_fp16(path: Path) -> None:
    """Every weight of the .tflite at path cast to float16 (ai-edge-quantizer's weight-only float casting)."""
    quantizer = require_converter("ai_edge_quantizer.quantizer", "LiteRT --half")
    names = require_converter("ai_edge_quantizer.qtyping", "LiteRT --half")
    recipe = require_converter("ai_edge_quantizer.recipe", "LiteRT --half")
    qt = quantizer.Quantizer(str(path))
    qt.add_weight_only_config(
        regex=".*",
        operation_name=names.TFLOperationName.ALL_SUPPORTED,
        num_bits=16,
        algorithm_key=recipe.AlgorithmName.FLOAT_CASTING,
    )
    qt.quantize().export_model(str(path), overwrite=True)


def litert_metadata(path: Path) -> dict:
    """The metadata.json appended to a .tflite of ours ({} when it has none), its size checked before reading."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > MAX_ZIP_MEMBERS:
                raise BackendError(f"{path}: its appended archive has {len(members)} members (at most 16)")
            entry = next((m for m in members if m.filename == METADATA_MEMBER), None)
            if entry is None:
                return {}
            if entry.file_size > MAX_METADATA_BYTES:
                raise BackendError(f"{path}: its {METADATA_MEMBER} is {entry.file_size} bytes")
            with archive.open(entry) as f:
                text = f.read(MAX_METADATA_BYTES + 1).decode("utf-8")
    except zipfile.BadZipFile:
        return {}  # a .tflite without our metadata: refused by parse_metadata as not a YOLO export
    except (EOFError, ValueError, NotImplementedError, RuntimeError, UnicodeDecodeError) as e:
        raise BackendError(f"{path}: its appended metadata is damaged: {error_line(e)}") from None
    except OSError as e:
        raise BackendError(f"{path} could not be read: {e.strerror or e}") from None
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise BackendError(f"{path}: its {METADATA_MEMBER} is not JSON") from None
    return raw if isinstance(raw, dict) else {}


class LiteRTBackend(Backend):
    """A .tflite of ours run by LiteRT's interpreter (XNNPACK on the CPU), on torch's thread count."""

    kind = "LiteRT"
    own_threads = True  # the interpreter runs on its own thread pool: the Predictor then pre-processes in NumPy

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        raw = litert_metadata(path)
        super().__init__(path, parse_metadata(raw, path), device)
        self.channels = channel_layout(raw)
        with open(path, "rb") as f:
            if f.read(8)[4:] != FLATBUFFER_ID:
                raise BackendError(f"{path} is not a LiteRT model: no {FLATBUFFER_ID.decode()} flatbuffer header")
        interpreter = import_runtime("ai_edge_litert.interpreter")  # after the file's checks, as NCNN's
        try:
            self.interpreter = interpreter.Interpreter(model_path=str(path), num_threads=torch.get_num_threads())
            self.interpreter.allocate_tensors()
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # ValueError and RuntimeError with the interpreter's own text
            raise BackendError(f"{path} could not be loaded by LiteRT: {error_line(e)}") from None
        inputs, outputs = self.interpreter.get_input_details(), self.interpreter.get_output_details()
        if len(inputs) != 1 or len(outputs) != 1:
            raise BackendError(f"{path} is not a YOLO export: it has {len(inputs)} inputs and {len(outputs)} outputs")
        self.input_index, self.output_index = inputs[0]["index"], outputs[0]["index"]

    def run(self, x: torch.Tensor) -> torch.Tensor:
        self.interpreter.set_tensor(self.input_index, x.detach().cpu().float().numpy())
        self.interpreter.invoke()
        # get_tensor returns a copy of its own (writable, unshared): no second one
        return rows_of(torch.from_numpy(self.interpreter.get_tensor(self.output_index)), self.channels)
