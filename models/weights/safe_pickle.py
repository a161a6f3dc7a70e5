"""Bounded, inert unpickling of PyTorch checkpoint files: the reading half of models/weights/checkpoint.py.

A file is bounded before torch allocates for it: the zip directory (member count, sizes against the file's real
size, no compressed members, a small pickle), then the unpickled data (nesting depth, size counted as a tree,
tensor bytes against the file's size). Official YOLOv5 files, and those the `ultralytics` package writes (YOLOv8,
YOLO11, YOLO26), pickle whole modules; torch's weights-only unpickler maps each class the file names to an inert
Record, so nothing named in the file is imported or executed (`ultralytics` is never needed). A class outside the
known lists is refused. Each refusal is one CheckpointError line.
"""

import os
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from utils.errors import CheckpointError
from utils.log import one_line

# Bounds on a checkpoint file, far above real ones: yolov5x6's last.pt (FP16 weights twice, FP32 optimizer state)
# is about 1.1 GB in some 2500 zip members; official yolov5n.pt's pickle is 83 KB, holds 6714 items counted as a
# tree, nested 15 deep.
MAX_CHECKPOINT_BYTES = 4 << 30
MAX_MEMBERS = 100_000
MAX_PICKLE_BYTES = 16 << 20
MAX_UNPICKLED_BYTES = 512 << 20  # an upper bound on the objects unpickling builds (_unpickled_bytes_bound)
MAX_NESTING = 64
MAX_TREE_ITEMS = 2_000_000  # a shared list counts once per reference, as printing or walking it would

# Globals an official YOLOv5 checkpoint may name. They are never imported: each becomes a Record.
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
# The classes a checkpoint of the `ultralytics` package names for the detection and segmentation models this code
# builds, by their module (8.1 and later) or by the single module of 8.0; any other ultralytics class (another task,
# a block we do not build) is refused by name.
_ULTRALYTICS_MODULES = {
    "conv": ("Conv", "DWConv", "Concat"),
    "block": (
        "C2f",
        "C3",
        "C3k",
        "C3k2",
        "C2PSA",
        "PSABlock",
        "Attention",
        "Bottleneck",
        "SPPF",
        "DFL",
        "Proto",
        "Proto26",
    ),
    "head": ("Detect", "Segment", "Segment26"),
}
_ULTRALYTICS_MODELS = ("DetectionModel", "SegmentationModel")
_SAFE_NAMES |= {f"ultralytics.nn.tasks.{m}" for m in _ULTRALYTICS_MODELS} | {
    "ultralytics.utils.IterableSimpleNamespace"
}
_SAFE_NAMES |= {f"ultralytics.nn.modules.{m}.{c}" for m, classes in _ULTRALYTICS_MODULES.items() for c in classes}
_SAFE_NAMES |= {f"ultralytics.nn.modules.{c}" for classes in _ULTRALYTICS_MODULES.values() for c in classes}

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


class Record:
    """Inert stand-in for a class named in a checkpoint: keeps its state, runs nothing. Each name the file gives
    maps to a subclass of its own (_record_class), which says what it stands for (source)."""

    source = ""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        self._args = args

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self._state = state


# The one attribute look-up a checkpoint may make: YOLOv5 v7.0's Segment keeps Detect.forward as an attribute, so
# its pickles (every released yolov5*-seg.pt) call getattr(models.yolo.Detect, "forward").
_GETATTR = "builtins.getattr"
_ALLOWED_GETATTR = ("models.yolo.Detect", "forward")


def _record_class(name: str) -> type:
    """An inert Record subclass standing for the class the file names."""
    return type(name.rsplit(".", 1)[-1], (Record,), {"source": name})


class _RefusedCall(Exception):
    """A call in the pickle that no model checkpoint makes."""


def _getattr_of_detect_forward(owner, attribute):
    """The stand-in for builtins.getattr: the one call YOLOv5's segment pickles make gives an inert placeholder (the
    method is never used: the model is rebuilt from its config); any other call refuses the file."""
    if (getattr(owner, "source", None), attribute) == _ALLOWED_GETATTR and isinstance(owner, type):
        return None
    target = getattr(owner, "source", None) or type(owner).__name__
    raise _RefusedCall(
        f"it calls getattr({target[:60]}, {str(attribute)[:40]!r}), which a model checkpoint never needs"
    )


def _is_allowed(name: str) -> bool:
    return name.startswith(_SAFE_PREFIXES + _SAFE_PREFIXES_NUMPY) or name in _SAFE_NAMES or name == _GETATTR


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
            stand_ins = [(_getattr_of_detect_forward if n == _GETATTR else _record_class(n), n) for n in names]
            with torch.serialization.safe_globals(stand_ins):
                return torch.load(f, map_location="cpu", weights_only=True)
        except _RefusedCall as e:
            raise CheckpointError(f"refusing to load {path}: {e} (nothing from the file was run)") from None
        except Exception as e:
            raise _refused(path, _torch_reason(e)) from None


def _items(obj):
    """The objects a loaded container holds (a dict's keys too), or None for anything that is not a container."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return obj
    if isinstance(obj, Record):
        return list(obj.__dict__.values())
    return None


_LEAVES = {str, int, float, bool, bytes, type(None)}  # the common leaves, recognised by type alone


def scan_tree(root, where: str) -> list[torch.Tensor]:
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


def check_tensor_bytes(tensors, size: int, where: str) -> None:
    """CheckpointError when the tensors' bytes exceed the file's: views that expand a small storage (stride 0) or
    share one, which a saved state never holds, would multiply memory when checked, converted or copied."""
    total = sum(t.numel() * t.element_size() for t in tensors)
    if total > size:
        raise CheckpointError(
            f"{where}: its tensors claim {total} bytes but the file holds {size} (views expanded from small "
            "storages: a crafted file); refusing it"
        )


def read_bounded(path: Path) -> tuple[object, int]:
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
