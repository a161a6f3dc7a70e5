"""Checkpoints as data: save our own (tensors and plain containers) and import official YOLOv5 files safely.

Our files load with ``torch.load(path, weights_only=True)``. Official YOLOv5 files pickle whole
``models.yolo.Model`` modules; we read them with torch's weights-only unpickler, mapping each class
the file names to an inert record, so nothing named in the file is imported or executed.

A file is bounded before torch allocates for it: the zip directory (member count, sizes against the file's real
size, no compressed members, a small pickle), then the unpickled data (nesting depth, size counted as a tree,
class names and count, tensor bytes against the file's size), then its model config (priced in parameters without
building it, against the weights the file holds). Each refusal is one CheckpointError line.
"""

import os
import struct
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from models.yolo import MAX_CLASSES, Model, ModelConfigError, config_parameters, short_repr
from utils.downloads import attempt_download_weights
from utils.errors import CheckpointError, YoloError
from utils.log import one_line

FORMAT = "yolo-checkpoint-v1"

# Bounds on a checkpoint file, far above real ones: yolov5x6's last.pt (FP16 weights twice, FP32 optimizer state)
# is about 1.1 GB in some 2500 zip members; official yolov5n.pt's pickle is 83 KB, holds 6714 items counted as a
# tree, nested 15 deep.
MAX_CHECKPOINT_BYTES = 4 << 30
MAX_MEMBERS = 100_000
MAX_PICKLE_BYTES = 16 << 20
MAX_UNPICKLED_BYTES = 512 << 20  # an upper bound on the objects unpickling builds (_unpickled_bytes_bound)
MAX_NESTING = 64
MAX_TREE_ITEMS = 2_000_000  # a shared list counts once per reference, as printing or walking it would
MAX_NAME_CHARS = 256  # a class name

# Globals an official YOLOv5 checkpoint may name. They are never imported: each becomes a _Record.
_SAFE_PREFIXES = ("models.", "torch.nn.modules.", "utils.")
_SAFE_NAMES = {
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.ndarray",
    "numpy.dtype",
    "argparse.Namespace",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
}
_SAFE_PREFIXES_NUMPY = ("numpy.dtypes.",)

# Pickle opcodes that build an object, and an upper bound on the bytes that object takes in CPython (with its
# container slot and memo entry where it has one). A 16 MiB pickle of EMPTY_SET opcodes alone builds 4.4 GB of sets.
_OPCODE_BYTES = {
    **dict.fromkeys(b"\x8f\x91}d", 320),  # sets, frozensets, dicts
    **dict.fromkeys(b"]l", 160),  # lists
    **dict.fromkeys(b"t\x85\x86\x87", 160),  # tuples
    **dict.fromkeys(b"\x81\x92RoiQPb", 600),  # objects: records, tensors (their data is bounded by the zip), __dict__s
    **dict.fromkeys(b"qr\x94", 160),  # memo entries
    **dict.fromkeys(b"\x8cXUCBT\x8d\x8e\x96", 100),  # strings and bytes (their text is counted per pickle byte)
    **dict.fromkeys(b"JMK\x8a\x8bGILF", 60),  # numbers
}
_BYTES_PER_PICKLE_BYTE = 16  # stack and list slots, the text of strings
_BYTE_COSTS = np.full(256, _BYTES_PER_PICKLE_BYTE, dtype=np.int64)
_BYTE_COSTS[list(_OPCODE_BYTES)] += list(_OPCODE_BYTES.values())

# The zip end records: the classic one (signature, disk numbers, entries on this disk, entries, directory size,
# directory offset, comment length) and, where its fields overflow, the zip64 locator and record.
_END = struct.Struct("<4s4H2LH")
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


class _Record:
    """Inert stand-in for a class named in a checkpoint: keeps its state, runs nothing."""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        self._args = args

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self._state = state


def _is_allowed(name: str) -> bool:
    return name.startswith(_SAFE_PREFIXES + _SAFE_PREFIXES_NUMPY) or name in _SAFE_NAMES


def _torch_reason(e: Exception) -> str:
    """The useful part of torch's load error, one line, without its advice to pass weights_only=False."""
    text = str(e)
    if "WeightsUnpickler error:" in text:  # the weights-only unpickler's verdict, after paragraphs of advice
        text = text.split("WeightsUnpickler error:", 1)[1].strip().split("\n\n")[0]
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and "weights_only" not in line.lower() and "weights only" not in line.lower()
    ]
    reason = lines[0] if lines else ""
    reason = reason.split(" This is an internal miniz error")[0]  # keep the cause, not the speculation after it
    return f"{e.__class__.__name__}: {reason}" if reason else e.__class__.__name__


def _refused(path: Path, reason: str) -> CheckpointError:
    return CheckpointError(
        f"refused to load {path}: it could not be read as a PyTorch checkpoint (a plain pickle, "
        f"a damaged file or another format; {reason}); nothing from the file was run"
    )


def _zip_directory(f, size: int) -> tuple[int, int] | None:
    """(entries, directory bytes) as the zip's end record states them, read before zipfile lists the members (it
    builds an object per entry); None when the file has no end record."""
    tail_bytes = min(size, _END.size + 0xFFFF)  # the end record, then a comment of at most 64 KiB
    f.seek(size - tail_bytes)
    tail = f.read(tail_bytes)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _END.size:
        return None
    entries, directory = _END.unpack_from(tail, at)[4:6]
    if (entries == 0xFFFF or directory == 0xFFFFFFFF) and at >= _END64_LOCATOR.size:  # zip64: see its own record
        signature, _, offset, _ = _END64_LOCATOR.unpack_from(tail, at - _END64_LOCATOR.size)
        if signature == b"PK\x06\x07" and offset + _END64.size <= size:
            f.seek(offset)
            record = _END64.unpack(f.read(_END64.size))
            if record[0] == b"PK\x06\x06":
                entries, directory = record[7], record[8]
    return entries, directory


def _open_archive(f, size: int, path: Path) -> zipfile.ZipFile:
    """The file as a zip archive once its end record says the member list is of a sane length; CheckpointError
    otherwise."""
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"refusing {path}: it is {size / 2**30:.1f} GiB, more than any YOLO checkpoint "
            f"({MAX_CHECKPOINT_BYTES / 2**30:.0f} GiB at most)"
        )
    directory = _zip_directory(f, size)
    if directory is None:
        raise _refused(path, "not a zip archive as torch.save writes (older formats are not read)")
    entries, directory_bytes = directory
    if entries > MAX_MEMBERS or directory_bytes > size:
        raise CheckpointError(
            f"refusing {path}: its zip directory lists {entries} members in {directory_bytes} bytes of a "
            f"{size}-byte file (a checkpoint has at most {MAX_MEMBERS}); a crafted or damaged file"
        )
    f.seek(0)
    try:
        return zipfile.ZipFile(f)
    except Exception as e:  # zipfile raises many kinds for a damaged directory; all mean the same here
        raise _refused(path, f"its zip directory is damaged: {e.__class__.__name__}: {one_line(e)}") from None


def _unpickled_bytes_bound(data: bytes) -> int:
    """An upper bound on the memory unpickling data builds: each opcode makes at most one object, and counting every
    byte that could be an opcode (argument bytes too) over-counts, never under-counts."""
    return int(np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256) @ _BYTE_COSTS)


def _check_archive(f, size: int, path: Path) -> None:
    """Bounds from the zip directory, before torch reads a member: every member stored uncompressed (as torch.save
    writes them) and inside the file, pickles small enough to unpickle within MAX_UNPICKLED_BYTES; CheckpointError
    (one line) otherwise."""
    with _open_archive(f, size, path) as archive:
        members = archive.infolist()
        _check_members(members, size, path)
        for member in members:
            if member.filename.endswith(".pkl"):
                _check_pickle(archive, member, path)


def _check_members(members: list[zipfile.ZipInfo], size: int, path: Path) -> None:
    """CheckpointError unless every member is stored uncompressed and lies inside the file."""
    claimed = sum(m.file_size for m in members)
    packed = [m.filename for m in members if m.compress_type != zipfile.ZIP_STORED]
    if packed:
        raise CheckpointError(
            f"refusing {path}: {len(packed)} of its members (e.g. {packed[0]}) are compressed, and its members would "
            f"expand to {claimed} bytes from a {size}-byte file; torch.save stores members uncompressed, so the "
            "file was repacked or crafted"
        )
    if claimed > size:
        largest = max(members, key=lambda m: m.file_size)
        raise CheckpointError(
            f"refusing {path}: its members claim {claimed} bytes ({largest.file_size} for {largest.filename}) but "
            f"the file has {size} (a truncated or crafted file)"
        )
    for member in members:
        if member.file_size != member.compress_size or member.header_offset + member.file_size > size:
            raise CheckpointError(
                f"refusing {path}: its member {member.filename} claims {member.file_size} bytes beyond the end of the "
                f"{size}-byte file (a truncated or crafted file)"
            )


def _check_pickle(archive: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path) -> None:
    """CheckpointError when a pickle member is larger than MAX_PICKLE_BYTES or could build more than
    MAX_UNPICKLED_BYTES of objects."""
    if member.file_size > MAX_PICKLE_BYTES:
        raise CheckpointError(
            f"refusing {path}: its pickle {member.filename} is {member.file_size} bytes, more than a checkpoint's "
            f"({MAX_PICKLE_BYTES >> 20} MiB at most)"
        )
    try:
        bound = _unpickled_bytes_bound(archive.read(member))
    except Exception as e:  # a damaged local header or checksum
        raise _refused(
            path, f"its pickle {member.filename} is damaged: {e.__class__.__name__}: {one_line(e)}"
        ) from None
    if bound > MAX_UNPICKLED_BYTES:
        raise CheckpointError(
            f"refusing {path}: its pickle {member.filename} ({member.file_size} bytes) could build up to "
            f"{bound >> 20} MiB of objects (at most {MAX_UNPICKLED_BYTES >> 20} MiB); a crafted file"
        )


def _torch_load_safely(f, path: Path) -> object:
    """torch.load of an open, checked file with weights_only=True; classes from an official YOLOv5 pickle become
    _Records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about pickle protocols of files it is about to refuse
        try:
            f.seek(0)
            names = torch.serialization.get_unsafe_globals_in_checkpoint(f)
        except Exception as e:
            raise _refused(path, _torch_reason(e)) from None
        refused = sorted(n for n in names if not _is_allowed(n))
        if refused:
            raise CheckpointError(
                f"refusing to load {path}: it names {', '.join(refused)}, which a model checkpoint never needs "
                "(nothing from the file was run)"
            )
        try:
            f.seek(0)
            with torch.serialization.safe_globals([(_Record, n) for n in names]):
                return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:
            raise _refused(path, _torch_reason(e)) from None


def _items(obj):
    """The objects a loaded container holds (a dict's keys too), or None for anything that is not a container."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return obj
    if isinstance(obj, _Record):
        return list(obj.__dict__.values())
    return None


_LEAVES = {str, int, float, bool, bytes, type(None)}  # the common leaves, recognised by type alone


def _scan(root, where: str) -> list[torch.Tensor]:
    """Every tensor in the loaded data, once each, walked without recursion and each container once. CheckpointError
    when containers nest deeper than MAX_NESTING, hold themselves, or hold more than MAX_TREE_ITEMS items counted as
    a tree: printing, copying or walking such data would recurse or expand without bound."""
    if _items(root) is None:
        return [root] if isinstance(root, torch.Tensor) else []
    tensors: dict[int, torch.Tensor] = {}
    sizes: dict[int, int] = {}  # a finished container's size as a tree
    stack, totals, open_ids = [(id(root), iter(_items(root)))], [1], {id(root)}
    while stack:
        for child in stack[-1][1]:  # resumed where it left off after each container it descends into
            if type(child) in _LEAVES:
                totals[-1] += 1
            elif isinstance(child, torch.Tensor):
                tensors[id(child)] = child
                totals[-1] += 1
            elif (items := _items(child)) is None:
                totals[-1] += 1
            elif id(child) in sizes:
                totals[-1] += sizes[id(child)]
                _check_tree_size(totals[-1], where)
            elif id(child) in open_ids:
                raise CheckpointError(f"{where} holds a container that contains itself; refusing it")
            elif len(stack) >= MAX_NESTING:
                raise CheckpointError(f"{where}: its data nests deeper than {MAX_NESTING} levels; refusing it")
            else:
                stack.append((id(child), iter(items)))
                totals.append(1)
                open_ids.add(id(child))
                break
        else:  # the container is done
            key = stack.pop()[0]
            open_ids.discard(key)
            sizes[key] = _check_tree_size(totals.pop(), where)
            if totals:
                totals[-1] += sizes[key]
    return list(tensors.values())


def _check_tree_size(items: int, where: str) -> int:
    if items > MAX_TREE_ITEMS:
        raise CheckpointError(
            f"{where}: its data holds more than {MAX_TREE_ITEMS} items (counted as a tree: a shared list "
            "counts wherever it appears); refusing it"
        )
    return items


def _check_tensor_bytes(tensors, size: int, where: str) -> None:
    """CheckpointError when the tensors' bytes exceed the file's: views that expand a small storage (stride 0) or
    share one, which a saved state never holds, would multiply memory when checked, converted or copied."""
    total = sum(t.numel() * t.element_size() for t in tensors)
    if total > size:
        raise CheckpointError(
            f"{where}: its tensors claim {total} bytes but the file holds {size} (views expanded from small "
            "storages: a crafted file); refusing it"
        )


def _entries(record: _Record, key: str, where: str) -> dict:
    """A recorded module's _parameters, _buffers or _modules: a dict, or CheckpointError."""
    entries = record.__dict__.get(key) or {}
    if not isinstance(entries, dict):
        raise CheckpointError(f"{where}: a module's {key} is a {type(entries).__name__}, not a mapping")
    return entries


def _record_state_dict(record: _Record, where: str, prefix: str = "") -> dict[str, torch.Tensor]:
    """Rebuild a state_dict from a recorded nn.Module's _parameters, _buffers and _modules (nesting is bounded by
    _scan); CheckpointError for an entry that is not a tensor."""
    out = {}
    transient = record.__dict__.get("_non_persistent_buffers_set") or set()
    transient = transient if isinstance(transient, (set, frozenset, list, tuple)) else set()
    for kind in ("_parameters", "_buffers"):
        for key, value in _entries(record, kind, where).items():
            if value is None or (kind == "_buffers" and key in transient):
                continue
            if not isinstance(key, str) or not isinstance(value, torch.Tensor):
                name = prefix + (key if isinstance(key, str) else short_repr(key))
                raise CheckpointError(f"{where}: its weight {name} is a {type(value).__name__}, not a tensor")
            out[prefix + key] = value.detach()
    for key, child in _entries(record, "_modules", where).items():
        if isinstance(child, _Record):
            out.update(_record_state_dict(child, where, f"{prefix}{key}."))
    return out


def _names_list(names, nc: int, where: str) -> list[str]:
    """The class names as a list of nc short strings (YOLOv5 v7.0 stores a {index: name} dict), or CheckpointError.

    The count is checked before anything is built from the names, and each must be a string (or a whole number)
    of at most MAX_NAME_CHARS: a nested list would print as an ever larger string."""
    if names is None:
        raise CheckpointError(f"{where} has no class names ('names')")
    if not isinstance(names, (dict, list, tuple)):
        raise CheckpointError(f"{where}: its class names are a {type(names).__name__}, not a list")
    if len(names) != nc:
        raise CheckpointError(f"{where} has {len(names)} class names for the {nc} classes of its config")
    if isinstance(names, dict):
        if set(names) != set(range(nc)):
            raise CheckpointError(f"{where}: its class names are a dict whose keys are not 0..{nc - 1}")
        names = [names[k] for k in range(nc)]
    for i, name in enumerate(names):
        whole = isinstance(name, int) and not isinstance(name, bool)
        if not whole and not isinstance(name, str):
            raise CheckpointError(f"{where}: class name {i} is a {type(name).__name__}, not a string")
        if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
            raise CheckpointError(f"{where}: class name {i} is {len(name)} characters long (at most {MAX_NAME_CHARS})")
    return [str(n) for n in names]


def _config_nc(cfg, where: str) -> int:
    """The class count of a model config, checked to be a dict with an integer 'nc' in 1..MAX_CLASSES."""
    if cfg is None:
        raise CheckpointError(f"{where} has no model config ('yaml')")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{where}: its model config ('yaml') is a {type(cfg).__name__}, not a mapping")
    nc = cfg.get("nc")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise CheckpointError(f"{where}: its model config has no valid class count 'nc' (found {short_repr(nc)})")
    if nc > MAX_CLASSES:
        raise CheckpointError(f"{where}: its model config has {nc} classes, more than {MAX_CLASSES}; refusing it")
    return nc


def _check_weights(state, where: str, size: int) -> None:
    """A state dict of named tensors within the file's bytes, all finite: NaN or inf weights load fine and then
    detect nothing."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: its 'model' entry is a {type(state).__name__}, not a state dict of tensors")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{where}: its 'model' entry holds {short_repr(key)}: {type(value).__name__}, not a named tensor"
            )
    _check_tensor_bytes(state.values(), size, where)  # before the finite check reads them
    for key, value in state.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(
                f"{where}: weight {short_repr(key)} holds NaN or infinite values (a diverged or damaged training "
                "run); refusing it"
            )


def _check_config_size(ckpt: dict, where: str) -> None:
    """CheckpointError when the config cannot describe a model, or describes more parameters than the file holds
    weights for: the model is priced from its config before it is built, so a tiny file cannot make a huge one."""
    try:
        params = config_parameters(ckpt["yaml"])
    except ModelConfigError as e:
        raise CheckpointError(f"{where} holds an unsupported model config: {one_line(e)}") from None
    held = sum(v.numel() for v in ckpt["model"].values())
    if params > held:
        raise CheckpointError(
            f"{where}: its config describes a model of {params} parameters but the file holds only {held} weight "
            "values (weights do not match its config); refusing to build it"
        )


def _from_official(ckpt: dict, where: str, size: int) -> dict:
    """Convert an official YOLOv5 checkpoint dict (with a recorded Model) into our format."""
    record = ckpt.get("ema") if isinstance(ckpt.get("ema"), _Record) else ckpt.get("model")
    if not isinstance(record, _Record) or not isinstance(record.__dict__.get("yaml"), dict):
        raise CheckpointError(f"{where} has no YOLOv5 model with a config")
    cfg = record.__dict__["yaml"]
    nc = _config_nc(cfg, where)
    state = _record_state_dict(record, where)
    _check_tensor_bytes(state.values(), size, where)  # the rest of the file's objects are dropped unread
    return {
        "format": FORMAT,
        "model": state,
        "yaml": cfg,
        "names": _names_list(record.__dict__.get("names"), nc, where),
        "source": "yolov5",
    }


def _read(path: Path) -> tuple[object, int]:
    """The unpickled data of a checked checkpoint file and the file's size: one open file serves every check and
    the load, so what was checked is what torch reads."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CheckpointError(f"cannot read weights file {path}: {e.strerror or one_line(e)}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        _check_archive(f, size, path)
        return _torch_load_safely(f, path), size


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint (ours or official YOLOv5) as a dict with 'model' (a state_dict), 'yaml' and 'names'.

    Raises CheckpointError for a file that is missing, unsafe, unreadable, beyond the bounds above or inconsistent
    (names that do not fit the class count, a config that is not a mapping or does not fit the weights, a 'model'
    that is not a state dict, non-finite weights)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a weights file")
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    ckpt, size = _read(path)
    where = f"checkpoint {path}"
    tensors = _scan(ckpt, where)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not a model checkpoint (it holds a {type(ckpt).__name__})")
    if ckpt.get("format") == FORMAT:
        _check_tensor_bytes(tensors, size, where)
        ckpt["names"] = _names_list(ckpt.get("names"), _config_nc(ckpt.get("yaml"), where), where)
    elif isinstance(ckpt.get("model"), _Record) or isinstance(ckpt.get("ema"), _Record):
        ckpt = _from_official(ckpt, where, size)
    else:
        raise CheckpointError(f"{path} is not a YOLO checkpoint (no model config inside)")
    _check_weights(ckpt.get("model"), where, size)
    _check_config_size(ckpt, where)
    return ckpt


def _state_mismatch(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> str | None:
    """How a state dict differs from a model's (the first shape that differs, else the missing and unexpected
    keys), or None when it fits."""
    for key, value in state.items():
        if key in own and own[key].shape != value.shape:
            return f"{key} is {tuple(value.shape)} in the file but {tuple(own[key].shape)} in the config"
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        return f"{len(missing)} missing (e.g. {missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]})"
    return None


def model_from_checkpoint(ckpt: dict, where: str = "checkpoint") -> Model:
    """Build a float32 Model from a loaded checkpoint dict and load its weights."""
    try:
        model = Model(ckpt["yaml"])
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError, ZeroDivisionError) as e:
        reason = one_line(e) if isinstance(e, YoloError) else f"{e.__class__.__name__}: {one_line(e)}"
        raise CheckpointError(f"{where} holds an unsupported model config: {reason}") from None
    # Some older YOLOv5 files also keep Detect's anchor_grid as a buffer; it is derived from the anchors.
    state = {k: v for k, v in ckpt["model"].items() if not k.endswith(".anchor_grid")}
    mismatch = _state_mismatch(model.state_dict(), state)  # checked before converting anything
    if mismatch:  # load_state_dict would raise a multi-line RuntimeError listing every tensor
        raise CheckpointError(f"{where}: weights do not match its config: {mismatch}")
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=False)
    model.names = list(ckpt["names"])
    model.model[-1]._grids = {}
    return model


def load_model(path: str | Path, device: str | torch.device = "cpu", fuse: bool = True) -> Model:
    """Load weights (ours or official YOLOv5 v6.0-v7.0) as an eval-mode float32 Model on device.

    The path resolves as detect.py's --weights does: the file as given, else a bare name from weights/ (with a log
    line), else a download for official release names (DownloadError, one line, when offline). A missing path with
    a folder part is a CheckpointError (not found), never swapped for a same-named file elsewhere."""
    path = attempt_download_weights(path)
    model = model_from_checkpoint(load_checkpoint(path), f"checkpoint {path}")
    if fuse:
        model.fuse()
    return model.to(device).eval()


def fp16_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with floating-point tensors in FP16 (half the size of float32), on the CPU."""
    return {k: (v.half() if v.is_floating_point() else v).detach().cpu().clone() for k, v in model.state_dict().items()}


def checkpoint_dict(model: Model, **extra) -> dict:
    """A checkpoint dict of our format: FP16 weights, config, class names and strides, plus extra fields."""
    unwrapped = model.module if hasattr(model, "module") else model
    return {
        "format": FORMAT,
        "model": fp16_state_dict(unwrapped),
        "yaml": unwrapped.yaml,
        "names": list(unwrapped.names),
        "stride": [float(s) for s in unwrapped.stride],
        **extra,
    }


def _os_error_behind(error: BaseException) -> OSError | None:
    """The OSError behind an exception: torch's zip writer turns a failed write (a full disk) into a RuntimeError
    ('unexpected pos ...') raised while the OSError from the file's write() is its context."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def save_checkpoint(ckpt: dict, path: str | Path) -> None:
    """Write a checkpoint atomically: a temporary file in the same folder, then a rename.

    A failed write leaves an earlier file at path as it was; a full disk is an OSError(ENOSPC) that says so, on one
    line (utils.cli.run_cli prints it as "the disk is full (ENOSPC): ...")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it the usual permissions
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        cause = _os_error_behind(e) if isinstance(e, (OSError, RuntimeError)) else None
        if cause is None or cause.errno is None:
            raise
        kept = f"an earlier {path.name} there is kept intact" if path.exists() else "nothing was written there"
        raise OSError(cause.errno, f"{os.strerror(cause.errno)}: could not write checkpoint {path} ({kept})") from None
