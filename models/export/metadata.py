"""The metadata of an export (names, stride, imgsz, batch, dynamic), read as bounded data from each format.

ONNX metadata_props are read from the protobuf's bytes without building the graph, a TorchScript's config.txt from
its zip with member sizes checked, an OpenVINO folder's metadata.yaml through utils.safe_yaml; every value is
checked against the bounds below before it is decoded. Each refusal is one BackendError line.
"""

import ast
import io
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

from models.export.formats import format_of
from utils.errors import BackendError
from utils.safe_json import JsonError, parse_json
from utils.safe_numbers import NumberRangeError, check_numbers
from utils.safe_yaml import read_yaml
from utils.text import class_names

# Bounds on what an export's metadata may hold, checked before it is decoded; real values are far below them.
MAX_METADATA_BYTES = 4 << 20  # all metadata of one export; 1203 LVIS names take ~20 KB of JSON
MAX_METADATA_KEYS = 64  # ours has 8 keys
MAX_CLASSES = 100_000  # as utils.data.config allows
STRIDES = {2, 4, 8, 16, 32, 64, 128}  # YOLOv5 uses 8-32 (P5) and 8-64 (P6)
MAX_IMGSZ, MAX_BATCH = 8192, 1024  # the largest export.py writes
MAX_TORCHSCRIPT_CODE = 64 << 20  # inflated size of a TorchScript's compressed members (code); yolov5x's is ~2 MB
MAX_IR_XML_BYTES = 64 << 20  # an OpenVINO .xml holds the graph, not the weights; yolov5x's is ~1 MB
PRECISIONS = ("fp32", "fp16", "int8")


def error_line(error: BaseException, last: bool = False) -> str:
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
        return parse_json(value)
    except NumberRangeError as e:
        raise BackendError(f"{path}: metadata '{key}': {e}") from None
    except JsonError:
        pass  # not JSON: perhaps YOLOv5's dict literal
    if value.lstrip().startswith(("{", "[")):
        try:
            return check_numbers(ast.literal_eval(value))
        except NumberRangeError as e:
            raise BackendError(f"{path}: metadata '{key}': {e}") from None
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
    names, problem = class_names(names)  # a newline or an escape code would forge log lines and crops/ folder names
    if problem:
        raise BackendError(f"{path}: its metadata's {problem}; refusing it")
    return names


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
    """names (list), stride (list of floats), imgsz ((h, w)), batch (int), dynamic and end2end (bools) of an export's
    metadata, each bounded (flat names of short strings, strides from a small set, sane sizes): BackendError
    otherwise."""
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
        "end2end": meta.get("end2end", False) is True,
        "family": meta.get("family") if isinstance(meta.get("family"), str) else None,
        "task": meta.get("task") if isinstance(meta.get("task"), str) else None,  # models.nn.task.task_of_export
        "exporter": meta.get("exporter") if isinstance(meta.get("exporter"), str) else None,
        "precision": _precision(meta),
        "calibration_images": _positive_ints(meta.get("calibration_images") or 1, "calibration_images", path)[0]
        if meta.get("precision") == "int8"
        else 0,
    }


def _precision(meta: dict) -> str:
    """fp32, fp16 or int8 as recorded (exports from before it was recorded: fp16 when half, else fp32)."""
    precision = meta.get("precision")
    if precision in PRECISIONS:
        return precision
    return "fp16" if meta.get("half") is True else "fp32"


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
        raise BackendError(f"{path} is not a TorchScript file: {error_line(e)}") from None
    except OSError as e:
        raise BackendError(f"{path} could not be read: {e.strerror or e}") from None
    try:
        raw = parse_json(text) if text else {}
    except ValueError:  # not JSON, or a number out of range
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


def read_engine_metadata(path: Path) -> tuple[dict, int]:
    """The JSON header of a TensorRT engine file of ours (a 4-byte little-endian length, then the JSON) and the
    offset where the engine starts; the length is checked against MAX_METADATA_BYTES and the file before reading."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(4), byteorder="little", signed=True)
            if not 0 < size <= min(MAX_METADATA_BYTES, path.stat().st_size - 4):
                raise BackendError(f"{path} has no metadata header of ours: export it with export.py --include engine")
            raw = parse_json(f.read(size).decode("utf-8"))
    except ValueError:  # not UTF-8, not JSON, or a number out of range
        raise BackendError(f"{path}: its metadata header is not JSON (not an engine of ours?)") from None
    except OSError as e:
        raise BackendError(f"{path} could not be read: {e.strerror or e}") from None
    if not isinstance(raw, dict):
        raise BackendError(f"{path}: its metadata header is not a mapping")
    return raw, 4 + size


def engine_metadata(path: Path) -> dict:
    """The metadata of a TensorRT engine file of ours (its JSON header)."""
    return read_engine_metadata(path)[0]


def read_metadata(path: str | Path) -> dict:
    """The raw metadata of an export (any format of models/export/formats.py), read with bounds."""
    fmt = format_of(path)
    if fmt is None:
        raise BackendError(f"{path} is not an export (.torchscript, .onnx, .engine or a *_openvino_model folder)")
    return fmt.read_metadata(Path(str(path).rstrip("/\\")))


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
        raise BackendError(f"{xml} is not a valid OpenVINO .xml: {error_line(e)}") from None
    if needed > weights.stat().st_size:
        have = weights.stat().st_size
        raise BackendError(f"{weights} is truncated: {xml.name} places constants up to byte {needed}, it has {have}")
