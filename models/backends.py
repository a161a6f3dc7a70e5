"""Exported models as inference backends: TorchScript, ONNX Runtime and OpenVINO behind one interface.

load_backend(path, device) returns a Backend: called on a (B, 3, H, W) float tensor in [0, 1] it returns
(predictions (B, N, 5 + nc) on the input's device, None), as a PyTorch Model in eval mode does, and it carries
names, stride, fixed_shape ((h, w) of a static export, None for a dynamic one), batch (a fixed batch or None) and
kind. The export's own metadata (names, stride, imgsz, batch, dynamic) is all it needs. Backends run in the
precision they were exported in; ONNX Runtime and OpenVINO use torch's thread count so speeds compare fairly.
"""

import ast
import importlib
import importlib.util
import io
import json
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import torch
from torch import nn

from utils.downloads import attempt_download_weights
from utils.errors import BackendError
from utils.log import LOGGER
from utils.safe_yaml import read_yaml
from utils.torch_utils import CHANNELS_LAST_CPU, cpu_supports_bf16

INSTALL = "pip install -r requirements-export.txt"
SUFFIXES = (".torchscript", ".onnx", ".engine")
OPENVINO_FOLDER = "_openvino_model"
# Bounds on what an export's metadata may hold, checked before it is decoded; real values are far below them.
MAX_METADATA_BYTES = 4 << 20  # all metadata of one export; 1203 LVIS names take ~20 KB of JSON
MAX_METADATA_KEYS = 64  # ours has 8 keys
MAX_CLASSES = 100_000  # as utils.datasets allows
MAX_NAME_CHARS = 256
STRIDES = {2, 4, 8, 16, 32, 64, 128}  # YOLOv5 uses 8-32 (P5) and 8-64 (P6)
MAX_IMGSZ, MAX_BATCH = 8192, 1024  # the largest export.py writes
MAX_TORCHSCRIPT_CODE = 64 << 20  # inflated size of a TorchScript's compressed members (code); yolov5x's is ~2 MB
MAX_IR_XML_BYTES = 64 << 20  # an OpenVINO .xml holds the graph, not the weights; yolov5x's is ~1 MB


def is_backend_path(path) -> bool:
    """True for weights that an exported backend runs (.torchscript, .onnx, .engine, *_openvino_model folders)."""
    name = str(path).rstrip("/\\")
    return name.endswith(SUFFIXES) or name.endswith(OPENVINO_FOLDER)


def _import(module: str):
    """The optional package `module`, or BackendError naming how to install the export extra (or, when it is
    installed but fails to import, e.g. a shared library that cannot be mapped under a memory limit, why)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if importlib.util.find_spec(module) is None:
            raise BackendError(f"running this export needs the {module} package: {INSTALL}") from None
        raise BackendError(f"the {module} package is installed but cannot be imported: {_reason(e)}") from None


def _reason(error: BaseException, last: bool = False) -> str:
    """One line of a runtime's exception text: its first line (OpenVINO: its last, where the cause is)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return (lines[-1] if last else lines[0])[:200]


def _decoded(value, key: str, path):
    """A metadata value: JSON strings (ONNX metadata_props, TorchScript config) decoded, its size checked first;
    YOLOv5's ONNX exports store names as a Python dict literal, read with ast.literal_eval (data only)."""
    if not isinstance(value, str):
        return value
    if len(value) > MAX_METADATA_BYTES:
        raise BackendError(f"{path}: metadata '{key}' is {len(value)} characters long (at most {MAX_METADATA_BYTES})")
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise BackendError(f"{path}: metadata '{key}' is nested too deeply") from None
    if value.lstrip().startswith(("{", "[")):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise BackendError(f"{path}: metadata '{key}' is neither JSON nor a literal list or dict") from None
    return value


def _names(names, path) -> list[str]:
    """The class names: a flat list of short strings, or YOLOv5's {0: 'person', ...} with keys 0..n-1."""
    if isinstance(names, dict):
        if len(names) > MAX_CLASSES:
            raise BackendError(f"{path}: metadata names has {len(names)} classes (at most {MAX_CLASSES})")
        try:
            keyed = {int(k): v for k, v in names.items()}
        except (TypeError, ValueError):
            raise BackendError(f"{path}: metadata names is a dict whose keys are not class indices") from None
        if sorted(keyed) != list(range(len(keyed))):
            raise BackendError(f"{path}: metadata names is a dict whose keys are not 0..{len(keyed) - 1}")
        names = [keyed[i] for i in range(len(keyed))]
    if not isinstance(names, list) or not 1 <= len(names) <= MAX_CLASSES:
        raise BackendError(f"{path}: metadata names must be a list of 1 to {MAX_CLASSES} class names")
    if not all(isinstance(n, (str, int)) and not isinstance(n, bool) and len(str(n)) <= MAX_NAME_CHARS for n in names):
        raise BackendError(f"{path}: metadata names must be short strings (at most {MAX_NAME_CHARS} characters each)")
    return [str(n) for n in names]


def _positive_ints(value, key: str, path, allowed=None, at_most: int = 1 << 30) -> list[int]:
    """An int or a list of 1..8 positive ints (integral floats accepted), each in `allowed` or <= at_most."""
    values = value if isinstance(value, list) else [value]
    good = 1 <= len(values) <= 8 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and float(v).is_integer() for v in values
    )
    values = [int(v) for v in values] if good else []
    if not good or not all((v in allowed) if allowed else 0 < v <= at_most for v in values):
        expected = f"among {sorted(allowed)}" if allowed else f"from 1 to {at_most}"
        raise BackendError(f"{path}: metadata {key} must be 1 to 8 integers {expected}, got {str(value)[:80]}")
    return values


def parse_metadata(raw: dict, path) -> dict:
    """names (list), stride (list of floats), imgsz ((h, w)), batch (int), dynamic (bool) of an export's metadata,
    each bounded (flat names of short strings, strides from a small set, sane sizes): BackendError otherwise."""
    if not isinstance(raw, dict) or len(raw) > MAX_METADATA_KEYS:
        raise BackendError(f"{path}: its metadata is not a mapping of at most {MAX_METADATA_KEYS} keys")
    meta = {key: _decoded(value, str(key), path) for key, value in raw.items()}
    names, stride = meta.get("names"), meta.get("stride")
    if not names or stride is None:
        raise BackendError(f"{path} is not a YOLO export (no names/stride metadata): export it with export.py")
    strides = _positive_ints(meta.get("strides") or stride, "strides", path, STRIDES)
    imgsz = _positive_ints(meta.get("imgsz", [640, 640]), "imgsz", path, at_most=MAX_IMGSZ)
    batch = _positive_ints(meta.get("batch", 1) or 1, "batch", path, at_most=MAX_BATCH)
    if len(imgsz) > 2 or len(batch) > 1:
        raise BackendError(f"{path}: metadata imgsz must be [h, w] and batch one integer")
    return {
        "names": _names(names, path),
        "stride": [float(s) for s in strides],
        "imgsz": tuple(imgsz * 2 if len(imgsz) == 1 else imgsz),
        "batch": batch[0],
        "dynamic": meta.get("dynamic", False) is True,
        "exporter": meta.get("exporter") if isinstance(meta.get("exporter"), str) else None,
    }


def _varint(stream) -> int | None:
    """A protobuf varint read from stream; None at the end of the stream."""
    value = 0
    for shift in range(0, 70, 7):
        byte = stream.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
    raise ValueError("a varint longer than 10 bytes")


def _skip(stream, wire: int, end: int) -> int | None:
    """Skip one field of wire type `wire`; the length of a length-delimited field (left unread) is returned."""
    if wire == 0:
        if _varint(stream) is None:
            raise ValueError("the file ends inside a field")
        return None
    if wire not in (1, 2, 5):
        raise ValueError(f"wire type {wire} is not used by ONNX")
    size = {1: 8, 5: 4}.get(wire) or _varint(stream)
    if size is None or stream.tell() + size > end:
        raise ValueError("a field runs past the end of the file (truncated?)")
    if wire != 2:
        stream.seek(size, 1)
    return size if wire == 2 else None


def _string_pair(entry: bytes) -> tuple[str, str]:
    """key (field 1) and value (field 2) of an ONNX StringStringEntryProto."""
    stream, pair = io.BytesIO(entry), {1: "", 2: ""}
    while (tag := _varint(stream)) is not None:
        size = _skip(stream, tag & 7, len(entry))
        if size is not None:
            text = stream.read(size)
            if tag >> 3 in pair:
                pair[tag >> 3] = text.decode("utf-8")
    return pair[1], pair[2]


def onnx_metadata(path: Path) -> dict[str, str]:
    """The metadata_props (field 14) of an ONNX file, read by scanning its top-level protobuf fields: the graph is
    skipped unread and at most MAX_METADATA_BYTES of metadata are kept, so a hostile file cannot take memory."""
    props, kept = {}, 0
    try:
        end = path.stat().st_size
        with open(path, "rb") as stream:
            while (tag := _varint(stream)) is not None:
                if tag >> 3 == 0:
                    raise ValueError("field number 0")
                size = _skip(stream, tag & 7, end)
                if size is None:
                    continue
                if tag >> 3 != 14:
                    stream.seek(size, 1)
                    continue
                kept += size
                if kept > MAX_METADATA_BYTES:
                    raise BackendError(f"{path}: its metadata_props are over {MAX_METADATA_BYTES} bytes")
                key, value = _string_pair(stream.read(size))
                props[key] = value
    except (ValueError, UnicodeDecodeError) as e:  # UnicodeDecodeError is a ValueError too
        raise BackendError(f"{path} is not a readable ONNX model: {e}") from None
    except OSError as e:
        raise BackendError(f"{path} could not be read: {e.strerror or e}") from None
    return props


def _checked_archive(path: Path, archive: zipfile.ZipFile) -> None:
    """BackendError unless every member of a TorchScript zip is backed by the file's bytes: stored members as
    large as their data, compressed ones (torch deflates the code) inflating to MAX_TORCHSCRIPT_CODE at most."""
    size, inflated = path.stat().st_size, 0
    for member in archive.infolist():
        if member.compress_type == zipfile.ZIP_STORED:
            if member.file_size != member.compress_size or member.file_size > size:
                raise BackendError(f"{path}: member {member.filename[:80]} claims more bytes than the file holds")
        else:
            inflated += member.file_size
    if inflated > MAX_TORCHSCRIPT_CODE:
        raise BackendError(
            f"{path}: its compressed members inflate to {inflated} bytes (at most {MAX_TORCHSCRIPT_CODE})"
        )


def torchscript_metadata(path: Path) -> dict:
    """The config.txt (JSON) of a TorchScript archive, read with zipfile after the archive's sizes are checked."""
    try:
        with zipfile.ZipFile(path) as archive:
            _checked_archive(path, archive)
            configs = [m for m in archive.infolist() if re.fullmatch(r"[^/]+/extra/config\.txt", m.filename)]
            if not configs:
                return {}
            if configs[0].file_size > MAX_METADATA_BYTES:
                raise BackendError(
                    f"{path}: its config.txt is {configs[0].file_size} bytes (at most {MAX_METADATA_BYTES})"
                )
            with archive.open(configs[0]) as f:
                text = f.read(MAX_METADATA_BYTES + 1).decode("utf-8")
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, RuntimeError) as e:
        raise BackendError(f"{path} is not a TorchScript file: {_reason(e)}") from None
    except OSError as e:
        raise BackendError(f"{path} could not be read: {e.strerror or e}") from None
    try:
        raw = json.loads(text) if text else {}
    except (json.JSONDecodeError, RecursionError):
        raise BackendError(f"{path}: its config.txt is not JSON") from None
    return raw if isinstance(raw, dict) else {}


def openvino_metadata(folder: Path) -> dict:
    """The metadata.yaml of an OpenVINO model folder, read with the bounded YAML reader ({} when absent)."""
    file = folder / "metadata.yaml"
    if not file.exists():
        return {}
    raw = read_yaml(file, BackendError)
    if not isinstance(raw, dict):
        raise BackendError(f"{file} is not a mapping of metadata (names, stride, ...)")
    return raw


def read_metadata(path: str | Path) -> dict:
    """The raw metadata of an export (.torchscript, .onnx or *_openvino_model folder), read with bounds."""
    path = Path(path)
    if is_openvino(path):
        return openvino_metadata(path)
    return torchscript_metadata(path) if path.suffix == ".torchscript" else onnx_metadata(path)


def check_openvino_ir(xml: Path) -> None:
    """BackendError naming the file when an IR cannot be right: an .xml that is too large or not XML, a missing
    .bin, or one shorter than the constants the .xml places in it (OpenVINO checks this too, with a vaguer line)."""
    weights = xml.with_suffix(".bin")
    if not weights.is_file():
        raise BackendError(f"{weights} is missing: an OpenVINO model is its .xml and .bin (export it again)")
    if xml.stat().st_size > MAX_IR_XML_BYTES:
        raise BackendError(f"{xml} is {xml.stat().st_size} bytes: larger than an OpenVINO .xml of a YOLO model can be")
    needed = 0
    try:
        for _, element in ElementTree.iterparse(xml):  # expat caps entity expansion ("billion laughs")
            if element.tag == "data" and "offset" in element.attrib:
                needed = max(needed, int(element.attrib["offset"]) + int(element.attrib.get("size", 0)))
            elif element.tag == "layer":
                element.clear()
    except (ElementTree.ParseError, ValueError) as e:
        raise BackendError(f"{xml} is not a valid OpenVINO .xml: {_reason(e)}") from None
    if needed > weights.stat().st_size:
        have = weights.stat().st_size
        raise BackendError(f"{weights} is truncated: {xml.name} places constants up to byte {needed}, it has {have}")


class Backend(nn.Module):
    """An exported model; forward(x) -> (predictions on x's device, None). Subclasses implement run(x)."""

    kind = "backend"
    last_line = False  # whether the runtime's exception text has its cause on its last line (OpenVINO)

    def __init__(self, path: Path, meta: dict, device: torch.device):
        super().__init__()
        self.path, self.device = path, device
        self.names = meta["names"]
        self.stride = torch.tensor(meta["stride"])
        self.fixed_shape = None if meta["dynamic"] else tuple(meta["imgsz"])
        self.batch = None if meta["dynamic"] else meta["batch"]
        # An empty parameter tells code that asks next(model.parameters()) the device and the float32 input dtype.
        self.device_anchor = nn.Parameter(torch.empty(0, device=device), requires_grad=False)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """Raw predictions of one batch the export accepts."""
        raise NotImplementedError

    def checked_run(self, x: torch.Tensor) -> torch.Tensor:
        """run(x) as float32 on x's device; a runtime's failure (a graph that does not take this input or gives
        another output than (B, N, 5 + nc)) as one BackendError line naming the export."""
        try:
            out = self.run(x)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # torch.jit.Error, onnxruntime's and OpenVINO's types are not RuntimeErrors
            raise BackendError(
                f"{self.path} failed on a {tuple(x.shape)} input: {_reason(e, self.last_line)}"
            ) from None
        if out.ndim != 3 or out.shape[0] != x.shape[0] or out.shape[-1] != 5 + len(self.names):
            shape = f"(batch, boxes, {5 + len(self.names)})"
            raise BackendError(f"{self.path} is not a YOLO export: it returned {tuple(out.shape)}, expected {shape}")
        return out.to(x.device).float()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.fixed_shape and tuple(x.shape[2:]) != self.fixed_shape:
            h, w = self.fixed_shape
            raise BackendError(
                f"{self.path} is a static {h}x{w} export but got a {x.shape[2]}x{x.shape[3]} input: "
                f"letterbox to {h}x{w} or export with --dynamic"
            )
        if not self.batch:
            return self.checked_run(x), None
        outputs = []
        for chunk in x.split(self.batch):  # a fixed batch: split larger inputs, zero-pad the last chunk
            n = chunk.shape[0]
            if n < self.batch:
                chunk = torch.cat([chunk, chunk.new_zeros((self.batch - n, *chunk.shape[1:]))])
            outputs.append(self.checked_run(chunk)[:n])
        return torch.cat(outputs), None


class TorchScriptBackend(Backend):
    """A torch.jit export with its metadata in the extra file config.txt."""

    kind = "TorchScript"

    def __init__(self, path: Path, device: torch.device):
        super().__init__(path, parse_metadata(torchscript_metadata(path), path), device)  # archive sizes checked
        try:
            module = torch.jit.load(str(path), map_location=device)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # torch.jit.Error is not a RuntimeError
            raise BackendError(f"{path} is not a TorchScript file: {_reason(e)}") from None
        self.module = module.eval()
        floats = [p.dtype for p in module.parameters() if p.is_floating_point()]
        self.dtype = floats[0] if floats else torch.float32
        # oneDNN's preferred CPU layout, as utils.torch_utils uses for PyTorch models (several times faster here)
        self.channels_last = device.type == "cpu" and CHANNELS_LAST_CPU
        if self.channels_last:
            self.module.to(memory_format=torch.channels_last)
        if self.fixed_shape:  # the profiling executor optimises after its first runs: pay that here, not per image
            with torch.inference_mode():  # as the Predictor runs; under no_grad alone it stayed slow for 5+ runs
                for _ in range(3):
                    self.checked_run(torch.zeros(self.batch, 3, *self.fixed_shape, device=device))

    def run(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, self.dtype)
        out = self.module(x.contiguous(memory_format=torch.channels_last) if self.channels_last else x)
        return out[0] if isinstance(out, (list, tuple)) else out


def _check_outputs(path, shape: list, nc: int) -> None:
    """BackendError unless the graph's one output is (B, N, 5 + nc) (symbolic dimensions pass)."""
    last = shape[-1] if shape else None
    if len(shape) != 3 or (isinstance(last, int) and last != 5 + nc):
        raise BackendError(
            f"{path} is not a YOLO export: its output has shape {list(shape)}, expected (batch, boxes, {5 + nc})"
        )


class OnnxBackend(Backend):
    """An ONNX file run by ONNX Runtime (CUDA when the device is CUDA and the provider exists, else CPU)."""

    kind = "ONNX Runtime"
    own_threads = True  # runs on its own thread pool: the Predictor then pre-processes in NumPy, not torch

    def __init__(self, path: Path, device: torch.device):
        ort = _import("onnxruntime")
        super().__init__(path, parse_metadata(onnx_metadata(path), path), device)  # before the graph is loaded
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        providers = ["CPUExecutionProvider"]
        if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        try:
            session = ort.InferenceSession(str(path), options, providers=providers)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # onnxruntime raises its own exception types for unreadable graphs
            raise BackendError(f"{path} is not a readable ONNX model: {_reason(e)}") from None
        _check_outputs(path, session.get_outputs()[0].shape, len(self.names))
        self.session, self.input_name = session, session.get_inputs()[0].name
        self.numpy_dtype = np.float16 if "float16" in session.get_inputs()[0].type else np.float32

    def run(self, x: torch.Tensor) -> torch.Tensor:
        array = x.detach().cpu().numpy().astype(self.numpy_dtype, copy=False)
        return torch.from_numpy(self.session.run(None, {self.input_name: array})[0])


class OpenVinoBackend(Backend):
    """An OpenVINO IR folder (model .xml + .bin, metadata.yaml) compiled for the CPU."""

    kind = "OpenVINO"
    own_threads = True  # runs on its own thread pool: the Predictor then pre-processes in NumPy, not torch
    last_line = True

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):
        ov = _import("openvino")
        xmls = sorted(path.glob("*.xml"))
        if not xmls:
            raise BackendError(f"{path} holds no OpenVINO .xml model: export it with export.py --include openvino")
        super().__init__(path, parse_metadata(openvino_metadata(path), path), device)
        check_openvino_ir(xmls[0])
        core = ov.Core()
        model = _openvino_call(core.read_model, xmls[0], "could not be read by OpenVINO", str(xmls[0]))
        _check_outputs(
            path, [d.get_length() if d.is_static else None for d in model.output(0).partial_shape], len(self.names)
        )
        # f32 as exported unless --bf16 asks for bfloat16 (OpenVINO's own default on CPUs with AMX or AVX512-BF16)
        precision = "bf16" if bf16 and cpu_supports_bf16() else "f32"
        if bf16 and precision == "f32":
            LOGGER.warning("WARNING: --bf16 needs a CPU with AVX512-BF16 or AMX; this one has neither, running float32")
        self.kind = f"OpenVINO ({precision})"
        config = {"INFERENCE_NUM_THREADS": torch.get_num_threads(), "INFERENCE_PRECISION_HINT": precision}
        self.compiled = _openvino_call(core.compile_model, xmls[0], "could not be compiled", model, "CPU", config)
        self.output = self.compiled.output(0)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        array = x.detach().cpu().numpy().astype(np.float32, copy=False)
        return torch.from_numpy(np.asarray(self.compiled([array])[self.output]))


def _openvino_call(function, xml: Path, failed: str, *args):
    """function(*args), OpenVINO's multi-line RuntimeError (a bad .xml/.bin pair, out of memory) as one line."""
    try:
        return function(*args)
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:
        raise BackendError(f"{xml} {failed}: {_reason(e, last=True)}") from None


def _engine(path: Path, device: torch.device) -> Backend:
    """TensorRT engines are not run by this build; one line on what they would need."""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        raise BackendError(f"{path}: TensorRT engines need CUDA and tensorrt ({INSTALL} on a CUDA machine)") from None
    if device.type != "cuda":
        raise BackendError(f"{path}: TensorRT engines need CUDA and tensorrt; pass --device 0")
    raise BackendError(f"{path}: running TensorRT engines is not supported yet; use the .onnx export")


def check_exported(paths: list, half: bool | None, bf16: bool, augment: bool) -> None:
    """BackendError for what exported weights cannot do (ensembles, TTA); a warning for ignored precision flags."""
    if len(paths) > 1:
        listed = " ".join(map(str, paths))
        raise BackendError(f"--weights {listed}: ensembles take .pt weights only, not exported models")
    if augment:
        raise BackendError(f"--augment (test-time augmentation) takes .pt weights only, not {paths[0]}")
    if half or (bf16 and not is_openvino(paths[0])):  # OpenVINO alone can run an f32 export in bfloat16
        flag = "--half" if half else "--bf16"
        LOGGER.warning(f"WARNING: {flag} is ignored for {paths[0]}: exported models run in their export precision")


def load_exported(
    paths: list, device: torch.device, half: bool | None = None, bf16: bool = False, augment: bool = False
) -> Backend:
    """The one exported model of detect.py, test.py and the Detector: flags checked, a bare name found in weights/
    (as .pt names are), run as exported (no fusing, half or channels-last), one log line."""
    check_exported(paths, half, bf16, augment)
    path = attempt_download_weights(paths[0])
    backend = load_backend(path, device, bf16)
    LOGGER.info(f"Model {path}: {describe_backend(backend)}, {device}")
    return backend


def is_openvino(path: str | Path) -> bool:
    """Whether path names an OpenVINO model folder (*_openvino_model)."""
    return str(path).rstrip("/\\").endswith(OPENVINO_FOLDER)


def describe_backend(backend: Backend) -> str:
    """'ONNX Runtime backend, 80 classes, static 1x3x640x640 input (square letterbox)' for the log."""
    if backend.fixed_shape:
        h, w = backend.fixed_shape
        shape = f"static {backend.batch}x3x{h}x{w} input (square letterbox at {h}x{w})"
    else:
        shape = "dynamic input (rectangular letterbox)"
    return f"{backend.kind} backend, {len(backend.names)} classes, {shape}"


def load_backend(path: str | Path, device: str | torch.device = "cpu", bf16: bool = False) -> Backend:
    """The Backend for an exported model, chosen by its suffix; BackendError (one line) when it cannot run.

    bf16 runs an OpenVINO model in bfloat16 on CPUs that support it; other formats run as exported."""
    path, device = Path(str(path).rstrip("/\\")), torch.device(device)
    if not path.exists():
        raise BackendError(f"weights file not found: {path}")
    if path.name.endswith(OPENVINO_FOLDER):
        if not path.is_dir():
            raise BackendError(f"{path} is not an OpenVINO model folder (.xml, .bin and metadata.yaml)")
        return OpenVinoBackend(path, device, bf16)
    if path.suffix == ".torchscript":
        return TorchScriptBackend(path, device)
    if path.suffix == ".onnx":
        return OnnxBackend(path, device)
    if path.suffix == ".engine":
        return _engine(path, device)
    raise BackendError(f"{path}: unknown export format (use .pt, .torchscript, .onnx or a *_openvino_model folder)")
