"""The label cache (a checked .npz beside the labels, or in a fallback folder) and the --cache disk image cache:
read only when it matches the files it describes, written only into folders of ours.
"""

import contextlib
import hashlib
import math
import os
import secrets
import shutil
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from utils.log import LOGGER, one_line

CACHE_VERSION = 2  # 2: each label row's polygon (polygon_counts, polygon_points)
_created: list[Path] = []  # label caches and image-cache folders this process made, newest last (undone_on_failure)


@contextlib.contextmanager
def undone_on_failure() -> Iterator[None]:
    """The caches a block creates are removed again when it fails: a training run that stops before it trains
    leaves none behind (a cache that existed before, even one the block rewrote, is kept)."""
    start = len(_created)
    try:
        yield
    except BaseException:
        for path in reversed(_created[start:]):
            with contextlib.suppress(OSError):
                if path.is_dir() and (path / IMAGE_CACHE_MARKER).is_file():
                    shutil.rmtree(path)
                elif path.is_file() and _cache_members(path) is not None:
                    path.unlink()
        raise
    finally:
        del _created[start:]


def _files_hash(files: list[str], nc: int, recipe: str = "") -> str:
    """Fingerprint of files (paths, sizes, modification times), the class count they were checked against and,
    for labels converted from annotations, the recipe (class names, options) of the conversion."""
    h = hashlib.sha256(f"v{CACHE_VERSION} nc={nc}{' ' + recipe if recipe else ''}".encode())
    for f in files:
        try:
            st = os.stat(f)
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{f}\0missing\n".encode())
    return h.hexdigest()


LABEL_CACHE_SUFFIX = ".yolo-labels.npz"  # not YOLOv5's '.cache': a dataset shared with YOLOv5 keeps both


def user_cache_dir() -> Path:
    """The user cache folder: $YOLO_CACHE_DIR, else $XDG_CACHE_HOME/yolo or ~/.cache/yolo (label caches that cannot
    go beside their dataset, OpenVINO's compiled models)."""
    env = os.environ.get("YOLO_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "yolo"


def label_cache_paths(source: Path) -> list[Path]:
    """Where the label cache of a labels folder (or an image-list .txt) is looked for and written, in order:
    beside it (labels/train2017 -> labels/train2017.yolo-labels.npz), then the user cache folder. With
    $YOLO_CACHE_DIR set only that folder is used, so that nothing is written into the dataset (tests, read-only
    data that root could write anyway)."""
    source = Path(source)
    beside = source.parent / ((source.stem if source.is_file() else source.name) + LABEL_CACHE_SUFFIX)
    fallback = user_cache_dir() / (hashlib.sha256(str(beside).encode()).hexdigest()[:16] + LABEL_CACHE_SUFFIX)
    return [fallback] if os.environ.get("YOLO_CACHE_DIR") else [beside, fallback]


CACHE_KEYS = (  # what _scan writes
    *("version", "hash", "im_files", "shapes", "counts", "labels", "msgs", "stats"),
    *("polygon_counts", "polygon_points"),  # vertices of each label row's polygon (0: a box row), all vertices
)


def _cache_members(path: Path) -> dict[str, zipfile.ZipInfo] | None:
    """The members of a label cache of ours (a plain file: an uncompressed zip of our arrays, no more data in it
    than the file holds), or None for anything else: a YOLOv5 pickle, a user's file, a link, a crafted zip."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as zf:
            members = {m.filename.removesuffix(".npy"): m for m in zf.infolist()}
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    stored = all(m.compress_type == zipfile.ZIP_STORED for m in members.values())
    if set(members) != set(CACHE_KEYS) or not stored or sum(m.file_size for m in members.values()) > size:
        return None
    return members


def _array_headers_fit(path: Path, members: dict[str, zipfile.ZipInfo]) -> bool:
    """Each member's .npy header (read before any array) claims no more bytes than the member holds, no objects."""
    with zipfile.ZipFile(path) as zf:
        for m in members.values():
            with zf.open(m) as f:
                version = np.lib.format.read_magic(f)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else None
                read_header = read_header or np.lib.format.read_array_header_2_0
                shape, _, dtype = read_header(f)
            if dtype.hasobject or math.prod(shape) * dtype.itemsize > m.file_size:
                return False
    return True


def _cache_consistent(cache: dict, listed: set[str]) -> bool:
    """The arrays of a cache fit together, and its images are among those listed for the split."""
    n, counts, labels = len(cache["im_files"]), cache["counts"], cache["labels"]
    vertices, points = cache["polygon_counts"], cache["polygon_points"]
    return (
        vertices.shape == (len(labels),)
        and (vertices >= 0).all()
        and points.shape == (int(vertices.sum()), 2)
        and cache["im_files"].ndim == 1
        and cache["shapes"].shape == (n, 2)
        and counts.shape == (n,)
        and labels.ndim == 2
        and labels.shape[1] == 5
        and int(counts.sum()) == len(labels)
        and (counts >= 0).all()
        and cache["stats"].shape == (3,)
        and cache["msgs"].ndim == 1
        and all(str(f) in listed for f in cache["im_files"])
    )


def _load_cache(path: Path, expected_hash: str, listed: set[str] | None = None, prefix: str = "") -> dict | None:
    """A label cache written by _save_cache, or None when absent, stale or not ours (never unpickles). A file under
    our name that is not a cache, or a cache that does not fit together, gets a warning: labels are checked again."""
    if not os.path.lexists(path):
        return None
    members = _cache_members(path)
    try:
        if members is None or not _array_headers_fit(path, members):
            raise ValueError("not a label cache written by this project")
        with np.load(path, allow_pickle=False) as z:
            if int(z["version"]) != CACHE_VERSION or str(z["hash"]) != expected_hash:
                return None  # ours, but stale: rebuilt silently
            cache = {k: z[k] for k in z.files}
        if listed is not None and not _cache_consistent(cache, listed):
            raise ValueError("its arrays do not fit together or name images not in this split")
    except Exception as e:  # a YOLOv5 pickle, a truncated or crafted file, anything else: check the labels again
        LOGGER.warning(f"{prefix}WARNING: ignoring label cache {path} ({one_line(e)[:200]})")
        return None
    return cache


def writable(path: str | Path) -> bool:
    """True if a file may be written at path: its folder (or nearest existing ancestor) and any existing file
    must be writable. Permission bits are honoured even for root, so read-only data stays untouched."""
    p = Path(path)
    if p.exists() and not p.is_dir() and not os.stat(p).st_mode & 0o222:
        return False
    folder = p if p.is_dir() else p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return bool(os.stat(folder).st_mode & 0o222) and os.access(folder, os.W_OK)


def _save_cache(path: Path, cache: dict) -> bool:
    """Write a cache atomically; False when its location is not writable, or when a file that is not a cache of ours
    has our cache's name there (it is never replaced). Only the user cache folder is created: a folder of the
    dataset that does not exist (labels/ of a dataset without label files) is not made for a cache."""
    if not writable(path) or os.path.lexists(path) and _cache_members(path) is None:
        return False
    if not path.parent.is_dir() and path.parent != user_cache_dir():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    new = not os.path.lexists(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as f:  # x: a new file of ours, never one that exists
            np.savez(f, **cache)
        if os.path.lexists(path) and _cache_members(path) is None:  # appeared while we wrote
            raise FileExistsError
        os.replace(tmp, path)
        if new:
            _created.append(path)
        return True
    except OSError:  # read-only filesystem, disk full
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False


IMAGE_CACHE_SUFFIX = ".yolo-images"  # --cache disk: a folder of ours beside the label cache, never beside the images

IMAGE_CACHE_MARKER = ".yolo-image-cache"  # in every such folder: only a folder holding it is written into


def image_cache_dirs(label_caches: list[Path]) -> list[Path]:
    """Where --cache disk may keep decoded images: a folder beside each place a label cache may go, in order."""
    return [p.with_name(p.name.removesuffix(LABEL_CACHE_SUFFIX) + IMAGE_CACHE_SUFFIX) for p in label_caches]


def _own_cache_folder(folder: Path) -> bool:
    """True when folder is a writable image-cache folder of ours, creating it (with its marker) if absent."""
    if os.path.lexists(folder) and not (folder.is_dir() and not folder.is_symlink()):
        return False
    if not writable(folder):
        return False
    try:
        folder.mkdir(parents=True)
        (folder / IMAGE_CACHE_MARKER).write_text("decoded images of --cache disk, written by yolo; safe to delete\n")
        _created.append(folder)
    except FileExistsError:
        pass
    except OSError:
        return False
    return (folder / IMAGE_CACHE_MARKER).is_file()


def _npy_path(folder: Path, image: str) -> str | None:
    """The cache file of an image: named by its path, size and modification time, so a replaced image is never
    served from the old pixels (its new state has a new name); None when the image cannot be stat'ed."""
    try:
        st = os.stat(image)
    except OSError:
        return None
    key = hashlib.sha256(os.path.abspath(image).encode()).hexdigest()[:20]
    return str(folder / f"{key}-{st.st_size:x}-{st.st_mtime_ns:x}.npy")


def _prune_image_cache(folder: Path, npy_files: list[str | None]) -> list[int]:
    """Remove the stale cache files of these images (an older state of the same path) from our folder; return the
    indices of the images whose current cache file is missing."""
    try:
        present = {e.name for e in os.scandir(folder) if e.name.endswith(".npy")}
    except OSError:
        present = set()
    wanted = {os.path.basename(f) for f in npy_files if f}
    keys = {name.split("-", 1)[0] for name in wanted}
    for name in present - wanted:
        if name.split("-", 1)[0] in keys:
            with contextlib.suppress(OSError):
                os.unlink(folder / name)
    return [i for i, f in enumerate(npy_files) if f and os.path.basename(f) not in present]


def _load_npy(file: str, shape_wh) -> np.ndarray | None:
    """A cached image if it is exactly the (h, w, 3) uint8 array expected (checked from its header, memory-mapped
    before anything is copied), else None: the image is then read from its file."""
    try:
        cached = np.load(file, mmap_mode="r", allow_pickle=False)
        ok = cached.dtype == np.uint8 and cached.shape == (int(shape_wh[1]), int(shape_wh[0]), 3)
        return np.array(cached) if ok else None
    except (OSError, ValueError, EOFError):
        return None
