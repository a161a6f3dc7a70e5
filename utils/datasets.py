"""Datasets: data/hyp YAML loading, image + label verification with a safe cache, the training/validation
dataset (letterbox, rectangular batches, mosaic, the images --image-weights draws) and its dataloader (with --quad's
4-image collate)."""

import contextlib
import hashlib
import io
import math
import os
import random
import secrets
import stat
import tarfile
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import DataLoader, Dataset, distributed
from tqdm import tqdm

from utils.augment import augment_hsv, letterbox, mixup, mosaic4, random_flip, random_perspective
from utils.boxes import xywhn2xyxy, xyxy2xywhn
from utils.downloads import DownloadError, is_url, safe_download, url_filename
from utils.errors import DatasetError
from utils.files import resolve_bare_name
from utils.images import (
    IMG_FORMATS,
    MAX_IMAGE_BYTES,
    TRUNCATED_JPEG,
    decode_image,
    file_kind,
    image_info,
    is_image_file,
    jpeg_truncated,
    list_files,
    read_image,
    read_regular_file,
    suffix,
)
from utils.log import LOGGER
from utils.safe_yaml import read_yaml

try:  # Pillow comes with matplotlib; used only to read image headers (size, EXIF) when verifying
    from PIL import Image, UnidentifiedImageError
except ImportError:  # pragma: no cover - verification falls back to a full OpenCV decode
    Image = None

ROOT = Path(__file__).resolve().parents[1]
CACHE_VERSION = 1
MAX_CLASSES = 100_000  # LVIS has 1203; more is a typo
MIN_SIZE = 10  # images smaller than this (px) on any side are rejected
OVERSHOOT = 0.01  # normalised coordinates this far outside [0, 1] are clipped; further is an error
MAX_LABEL_BYTES = 10 << 20  # a label file this large (~300k boxes for one image) is not a label file
MAX_LIST_BYTES = 256 << 20  # a split's .txt list of images (~2.5M paths)
HYP_KEYS = (
    "lr0",
    "lrf",
    "momentum",
    "weight_decay",
    "warmup_epochs",
    "warmup_momentum",
    "warmup_bias_lr",
    "box",
    "cls",
    "cls_pw",
    "obj",
    "obj_pw",
    "iou_t",
    "anchor_t",
    "fl_gamma",
    "hsv_h",
    "hsv_s",
    "hsv_v",
    "degrees",
    "translate",
    "scale",
    "shear",
    "perspective",
    "flipud",
    "fliplr",
    "mosaic",
    "mixup",
    "copy_paste",
)
HYP_AT_MOST_1 = ("momentum", "warmup_momentum", "flipud", "fliplr", "mosaic", "mixup", "copy_paste")  # probabilities
HYP_OPTIONAL = ("anchors",)  # YOLOv5 allows anchors-per-layer here to override the model's anchors
BAR = "{l_bar}{bar:10}{r_bar}"  # tqdm layout used across the project
cv2.setNumThreads(0)  # dataloader workers parallelise; OpenCV's own threads would oversubscribe the cores


# ---------------------------------------------------------------------------------------------------------------------
# YAML files


def _resolve_yaml(path: str | Path, kind: str) -> Path:
    """A YAML file as given (.yaml may be left off), or a bare name (no folder part) from the repo's data/ folder,
    with a log line. A path with a folder part is never swapped for a same-named file in data/."""
    text = str(path)
    for name in (text, f"{text}.yaml") if not Path(text).suffix else (text,):
        found = resolve_bare_name(name, ROOT / "data", f"{kind} file")
        if found is not None and found.is_file():
            return found.resolve()
    if Path(text).name != text:  # a folder part: say so if only the bare name would have found a file
        name = Path(text).name
        bundled = [ROOT / "data" / n for n in (name, f"{name}.yaml") if (ROOT / "data" / n).is_file()]
        hint = f" ({bundled[0]} exists: pass the bare name {bundled[0].name} to use it)" if bundled else ""
        raise DatasetError(f"{kind} file '{path}' not found{hint}")
    raise DatasetError(f"{kind} file '{path}' not found (looked in the current folder and {ROOT / 'data'})")


def _read_yaml(path: Path, kind: str) -> dict:
    """A YAML mapping read with bounds (size, depth, no aliases: see utils.safe_yaml), or one-line DatasetError."""
    data = read_yaml(path, DatasetError)
    if not isinstance(data, dict):
        raise DatasetError(f"{kind} file {path} must hold a YAML mapping (key: value lines)")
    return data


def load_hyp(path: str | Path) -> dict:
    """Read a hyperparameter YAML (YOLOv5 keys); unknown, missing or non-numeric values are errors."""
    file = _resolve_yaml(path, "hyperparameter")
    hyp = _read_yaml(file, "hyperparameter")
    unknown = sorted(set(hyp) - set(HYP_KEYS) - set(HYP_OPTIONAL))
    if unknown:
        raise DatasetError(f"{file}: unknown hyperparameter(s) {', '.join(unknown)} (valid: {', '.join(HYP_KEYS)})")
    missing = [k for k in HYP_KEYS if k not in hyp]
    if missing:
        raise DatasetError(f"{file}: missing hyperparameter(s) {', '.join(missing)}")
    for k, v in hyp.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise DatasetError(f"{file}: hyperparameter {k} must be a finite number, got {v!r}")
        hi = 1 if k in HYP_AT_MOST_1 else math.inf
        if not 0 <= v <= hi:  # anchors (per output layer, rounded; 0 to ignore) too: YOLOv5's evolved hyps have 3.63
            valid = "in [0, 1]" if hi == 1 else ">= 0"
            raise DatasetError(f"{file}: hyperparameter {k} must be {valid}, got {v!r}")
    return {k: float(v) if k != "anchors" else v for k, v in hyp.items()}


def _dataset_root(value, yaml_file: Path) -> Path:
    """The data YAML's `path`: absolute, or relative to the repo root as in YOLOv5 (../datasets/x), falling
    back to the YAML's folder; without one, the YAML's folder."""
    if not value:
        return yaml_file.parent
    p = Path(str(value)).expanduser()
    if p.is_absolute():
        return p
    from_root, from_yaml = (ROOT / p).resolve(), (yaml_file.parent / p).resolve()
    return from_yaml if not from_root.exists() and from_yaml.exists() else from_root


def _class_name(value, key, file: Path) -> str:
    """One class name: text (or a number / yes-no YAML reads as one), never a list, mapping or empty entry."""
    if value is None or isinstance(value, (list, tuple, dict)):
        raise DatasetError(f"{file}: names[{key}] must be a class name (text), got {value!r}"[:300])
    return str(value)


def _names_list(names, nc, file: Path) -> list[str]:
    if names is None:
        if nc is None:
            raise DatasetError(f"{file}: needs 'names' (a list of class names) or 'nc'")
        return [f"class{i}" for i in range(int(nc))]
    if isinstance(names, (list, tuple, dict)) and len(names) > MAX_CLASSES:
        raise DatasetError(f"{file}: 'names' has {len(names)} entries, more than {MAX_CLASSES} classes")
    if isinstance(names, dict):
        try:
            by_index = {int(k): v for k, v in names.items()}
        except (TypeError, ValueError):
            raise DatasetError(f"{file}: 'names' keys must be class indices 0, 1, ...") from None
        if sorted(by_index) != list(range(len(by_index))):
            raise DatasetError(f"{file}: 'names' keys must be 0..{len(by_index) - 1} with none missing")
        return [_class_name(by_index[i], i, file) for i in range(len(by_index))]
    if isinstance(names, (list, tuple)):
        return [_class_name(n, i, file) for i, n in enumerate(names)]
    raise DatasetError(f"{file}: 'names' must be a list or a {{index: name}} mapping")


def _split_paths(value, root: Path):
    """A split entry (str or list of str) made absolute against the dataset root."""
    if value is None or value == "":
        return None

    def one(x) -> str:
        p = Path(str(x)).expanduser()
        if p.is_absolute():
            return str(p)
        q = (root / p).resolve()
        if not q.exists() and str(x).startswith("../"):  # YOLOv5 tolerates one '../' too many
            q = (root / str(x)[3:]).resolve()
        return str(q)

    return [one(x) for x in value] if isinstance(value, (list, tuple)) else one(value)


def _check_path_entries(data: dict, file: Path) -> None:
    """'path' must be a string; train/val/test/ann_json a string or a list of strings (no NUL characters)."""
    for key in ("path", "train", "val", "test", "ann_json"):
        value = data.get(key)
        if value is None or value == "":
            continue
        items = value if isinstance(value, list) and key != "path" else [value]
        # a folder may be named 2017 (YAML reads it as a number); floats, booleans, mappings are mistakes
        if not items or not all(
            type(x) is int and key != "path" or isinstance(x, str) and x and "\0" not in x for x in items
        ):
            kind = "a folder path" if key == "path" else "a path or a list of paths"
            raise DatasetError(f"{file}: '{key}' must be {kind} (text), got {value!r}"[:300])


def _missing(split) -> list[str]:
    if split is None:
        return []
    return [p for p in ([split] if isinstance(split, str) else split) if not Path(p).exists()]


def load_data_config(path: str | Path) -> dict:
    """Read a YOLOv5 data YAML: absolute split paths, nc, names (checked), ann_json; download or generate the
    dataset when its splits are missing and the YAML says how."""
    file = _resolve_yaml(path, "data")
    data = _read_yaml(file, "data")
    _check_path_entries(data, file)
    if "nc" in data and (isinstance(data["nc"], bool) or not isinstance(data["nc"], int) or data["nc"] < 1):
        raise DatasetError(f"{file}: 'nc' must be a positive integer, got {data['nc']!r}")
    if data.get("nc", 0) > MAX_CLASSES:  # a typo (extra zeros) would otherwise build a huge names list
        raise DatasetError(f"{file}: 'nc' is {data['nc']}, more than {MAX_CLASSES} classes: a typo?")
    root = _dataset_root(data.get("path"), file)
    names = _names_list(data.get("names"), data.get("nc"), file)
    nc = data.get("nc", len(names))
    if nc < 1:
        raise DatasetError(f"{file}: 'names' is empty: a dataset needs at least one class")
    if len(names) != nc:
        raise DatasetError(f"{file}: nc is {nc} but {len(names)} names are given")
    if not data.get("train") and not data.get("val"):
        raise DatasetError(f"{file}: needs 'train' and/or 'val' split paths")
    cfg = {
        "path": str(root),
        "train": _split_paths(data.get("train"), root),
        "val": _split_paths(data.get("val"), root),
        "test": _split_paths(data.get("test"), root),
        "nc": nc,
        "names": names,
        "ann_json": _split_paths(data.get("ann_json"), root),
        "download": data.get("download"),
        "yaml_file": str(file),
    }
    missing = _missing(cfg["train"]) + _missing(cfg["val"])
    if missing:
        if data.get("generate") == "shapes":
            _generate_shapes(root, file, missing[0])
        elif data.get("download"):
            download_dataset(data["download"], root, missing[0])
        else:
            raise DatasetError(f"dataset not found: {missing[0]} does not exist and {file.name} has no 'download'")
        still = _missing(cfg["train"]) + _missing(cfg["val"])
        if still:
            raise DatasetError(f"dataset still incomplete after download/generation: {still[0]} does not exist")
    return cfg


def _generate_shapes(root: Path, file: Path, missing: str) -> None:
    """`generate: shapes`: write the synthetic dataset, but only into an absent or empty folder. A split path with a
    typo must not make a real dataset's folders look missing: nothing that exists is deleted or written into."""
    from utils.shapes import ShapesError, generate_shapes, is_occupied  # lazy: only needed on first use

    try:
        occupied = is_occupied(root)
    except ShapesError as e:
        raise DatasetError(f"{file}: {e}") from None
    if occupied:
        raise DatasetError(
            f"{file}: {missing} does not exist, and 'generate: shapes' only writes into an absent or empty folder: "
            f"{root} is not empty, nothing was changed (check the split paths, or point 'path' at a new folder)"
        )
    LOGGER.info(f"Generating the synthetic shapes dataset in {root} ...")
    try:
        generate_shapes(root)
    except ShapesError as e:
        raise DatasetError(f"{file}: {e}") from None


ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")  # what a data YAML's `download:` may fetch


def _download_urls(spec) -> list[str] | None:
    """The archive URLs of a `download:` entry, or None when it is anything else (a command, a script...)."""
    urls = [spec] if isinstance(spec, str) else list(spec) if isinstance(spec, (list, tuple)) else []
    ok = bool(urls) and all(
        isinstance(u, str) and is_url(u) and url_filename(u).lower().endswith(ARCHIVES) for u in urls
    )
    return urls if ok else None


def download_dataset(spec, root: Path, missing: str = "") -> None:
    """Fetch a dataset from http(s) URL(s) of zip/tar archives, extracted beside `root` (../datasets).

    Nothing from a data YAML is ever executed: any other `download:` (a 'bash ...' command, Python code) is
    shown to the user, who may run it after reading it."""
    root = Path(root)
    urls = _download_urls(spec)
    if urls is None:
        text = " ".join(str(spec).split())
        text = text if len(text) <= 300 else text[:297] + "..."
        where = f"{missing} does not exist" if missing else f"dataset {root} not found"
        raise DatasetError(
            f"{where}; the data YAML's 'download' is not an http(s) URL of a zip/tar archive and is "
            f"never run: read it and run it yourself if you trust it: {text}"
        )
    LOGGER.info(f"Dataset not found ({missing or root}), downloading it ...")
    parent = root.parent
    parent.mkdir(parents=True, exist_ok=True)
    for url in urls:
        try:
            target = safe_download(url, parent / url_filename(url))
        except DownloadError as e:  # offline, HTTP error...
            raise DatasetError(f"dataset download failed: {e}") from None
        try:
            extract(target, parent)
        finally:
            Path(target).unlink(missing_ok=True)


def extract(file: str | Path, dest: str | Path) -> Path:
    """Extract a .zip, .tar, .tar.gz or .tgz archive into dest with a progress bar (see unzip and untar)."""
    name = str(file).lower()
    return unzip(file, dest) if name.endswith(".zip") else untar(file, dest)


def _check_member(file, member: str, dest: Path) -> None:
    if not (dest / member).resolve().is_relative_to(dest):
        raise DatasetError(f"{file}: archive member '{member}' points outside {dest}, not extracted")


def unzip(file: str | Path, dest: str | Path) -> Path:
    """Extract a zip archive into dest, refusing members that would land outside it and symbolic links."""
    dest = Path(dest).resolve()
    try:
        with zipfile.ZipFile(file) as zf:
            members = zf.infolist()
            for m in members:
                _check_member(file, m.filename, dest)
                if stat.S_ISLNK(m.external_attr >> 16):
                    raise DatasetError(f"{file}: archive member '{m.filename}' is a link, not extracted")
            for m in tqdm(members, desc=f"Unzipping {Path(file).name}", unit="file", bar_format=BAR):
                zf.extract(m, dest)
    except (zipfile.BadZipFile, EOFError):
        raise DatasetError(f"{file} is not a valid zip archive") from None
    return dest


def untar(file: str | Path, dest: str | Path) -> Path:
    """Extract a tar archive (plain or gzip) into dest, refusing members outside it, links and device files."""
    dest = Path(dest).resolve()
    try:
        with tarfile.open(file, "r:*") as tf:
            members = tf.getmembers()
            for m in members:
                _check_member(file, m.name, dest)
                if not (m.isfile() or m.isdir()):
                    raise DatasetError(f"{file}: archive member '{m.name}' is a link or special file, not extracted")
            for m in tqdm(members, desc=f"Extracting {Path(file).name}", unit="file", bar_format=BAR):
                # our checks come first; the 'data' filter also drops unsafe permission bits
                tf.extract(m, dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise DatasetError(f"{file} is not a valid tar archive ({' '.join(str(e).split())})") from None
    return dest


# ---------------------------------------------------------------------------------------------------------------------
# Finding images and verifying them with their labels


def img2label_paths(img_paths: list[str]) -> list[str]:
    """Label file of each image: the last '/images/' path component becomes '/labels/', the extension '.txt'."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return [os.path.splitext(sb.join(p.rsplit(sa, 1)))[0] + ".txt" for p in img_paths]


def _listed_images(list_file: Path, prefix: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The image paths of a split's .txt list (one per line, relative to the list's folder), bounded in size, and
    the (path, reason) of listed FIFOs, devices and sockets, named as listed (a link to /dev/zero by its name)."""
    try:
        text = read_regular_file(list_file, MAX_LIST_BYTES).decode("utf-8-sig")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DatasetError(f"{prefix}cannot read image list {list_file}: {getattr(e, 'strerror', None) or e}") from None
    files, skipped = [], []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if "\0" in line:  # pathlib cannot even resolve it
            raise DatasetError(f"{prefix}{list_file} line {n}: not a file path (NUL character)")
        if line:
            absolute = Path(line).is_absolute()
            f = Path(line) if absolute else list_file.parent / line
            kind = _special_file(str(f))
            if kind:
                skipped.append((str(f), f"{kind}, not a regular file: skipped"))
            else:
                files.append(str(f if absolute else f.resolve()))
    return files, skipped


def _special_file(path: str) -> str | None:
    """What a listed path is when it exists but is not a regular file or folder (a FIFO, /dev/zero...), else None.
    Such files would block or never end when read, so they are skipped before anything opens them."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # missing: reported as corrupt by the label check, as any unreadable image
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else file_kind(mode)


def list_image_files(path, prefix: str = "") -> list[str]:
    """Image files of a split: a folder (searched recursively, symlinked subfolders followed once), a .txt list of
    images, an image, or a list. FIFOs, devices and sockets are skipped with a warning, never opened."""
    files, skipped, found = [], [], []
    for p in path if isinstance(path, (list, tuple)) else [path]:
        p = Path(p)
        if p.is_dir():
            files += list_files(p, recursive=True, skipped=found)
        elif p.suffix.lower() == ".txt" and p.exists():
            listed, special = _listed_images(p, prefix)
            files += listed
            skipped += special  # listed by name: always worth a word, whatever the name
        elif p.is_file():
            files.append(str(p))
        elif p.exists():
            raise DatasetError(f"{prefix}{p} is {file_kind(p.stat().st_mode)}, not an image, a folder or a .txt list")
        else:
            raise DatasetError(f"{prefix}{p} does not exist")
    # found in a folder: only what looks like an image (a socket beside the images is no news), links, subfolders
    skipped += [(f, why) for f, why in found if is_image_file(f) or "symbolic link" in why or "folder" in why]
    for f, reason in skipped:
        LOGGER.warning(f"{prefix}WARNING: {f}: {reason}")
    images = sorted(f for f in files if is_image_file(f))
    if not images:
        raise DatasetError(f"{prefix}no images found in {path} (formats: {', '.join(IMG_FORMATS)})")
    return images


def _image_size(file: str) -> tuple[int, int]:
    """(w, h) of an image as read_image will return it (EXIF orientation applied, from the same header reading);
    raises ValueError for a special, oversized, unreadable or truncated file."""
    raw = read_regular_file(file, MAX_IMAGE_BYTES)
    if Image is None:  # pragma: no cover - a full decode
        im, reason = decode_image(raw, suffix(file))
        if im is None:
            raise ValueError(reason)
        return im.shape[1], im.shape[0]
    try:
        with Image.open(io.BytesIO(raw)) as im:
            im.verify()  # checks the data, not only the header
        info = image_info(raw)
    except UnidentifiedImageError:
        raise ValueError("not an image or unsupported format") from None
    except ValueError:
        raise
    except Exception as e:  # Pillow raises many types for damaged files
        raise ValueError(f"unreadable image ({' '.join(str(e).split())})"[:300]) from None
    if info.format in ("JPEG", "MPO") and jpeg_truncated(raw):
        raise ValueError(TRUNCATED_JPEG)
    return info.size


def _parse_labels(file: str, nc: int) -> tuple[np.ndarray, str]:
    """Rows [cls, cx, cy, w, h] of a YOLO label file and a warning ('' if clean); raises ValueError if malformed.
    Polygon rows (cls x1 y1 x2 y2 x3 y3 ...) become their enclosing box. Files over MAX_LABEL_BYTES are refused
    before they are read."""
    # -sig: a byte-order mark (Windows editors) is not data
    text = read_regular_file(file, MAX_LABEL_BYTES).decode("utf-8-sig")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5 and (len(parts) < 7 or len(parts) % 2 == 0):
            raise ValueError(f"line {n}: labels need 5 columns (class cx cy w h), found {len(parts)}")
        try:
            values = [float(v) for v in parts]
        except ValueError:
            raise ValueError(f"line {n}: non-numeric value in '{line.strip()}'"[:300]) from None
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"line {n}: non-finite value in '{line.strip()}'"[:300])
        cls = values[0]
        if cls != int(cls) or not 0 <= cls < nc:
            raise ValueError(f"line {n}: class {parts[0]} is not an integer in [0, {nc})"[:300])
        coords = values[1:]
        if min(coords) < -OVERSHOOT or max(coords) > 1 + OVERSHOOT:
            raise ValueError(f"line {n}: coordinates must be normalised to [0, 1], got {' '.join(parts[1:])}"[:300])
        if len(coords) > 4:  # polygon -> box
            xs, ys = coords[0::2], coords[1::2]
            x1, y1, x2, y2 = min(xs), min(ys), max(xs), max(ys)
        else:
            cx, cy, w, h = coords
            x1, y1, x2, y2 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
        rows.append((cls, x1, y1, x2, y2))
    if not rows:
        return np.zeros((0, 5), np.float32), ""
    return _clean_boxes(np.array(rows, dtype=np.float64))


def _clean_boxes(xyxy: np.ndarray) -> tuple[np.ndarray, str]:
    """[cls, x1, y1, x2, y2] rows clipped to the image, zero-size and duplicate boxes dropped, as [cls, cx, cy, w, h]
    float32, with a note of what was dropped."""
    notes = []
    edges = xyxy[:, 1:]
    if (edges < 0).any() or (edges > 1).any():
        np.clip(edges, 0, 1, out=edges)  # boxes overshooting the image edge are cut at it
    degenerate = (xyxy[:, 3] <= xyxy[:, 1]) | (xyxy[:, 4] <= xyxy[:, 2])
    if degenerate.any():
        notes.append(f"{int(degenerate.sum())} zero-size box(es) removed")
        xyxy = xyxy[~degenerate]
    labels = np.empty((len(xyxy), 5), np.float32)
    labels[:, 0] = xyxy[:, 0]
    labels[:, 1] = (xyxy[:, 1] + xyxy[:, 3]) / 2
    labels[:, 2] = (xyxy[:, 2] + xyxy[:, 4]) / 2
    labels[:, 3] = xyxy[:, 3] - xyxy[:, 1]
    labels[:, 4] = xyxy[:, 4] - xyxy[:, 2]
    _, first = np.unique(labels, axis=0, return_index=True)
    if len(first) < len(labels):
        notes.append(f"{len(labels) - len(first)} duplicate label(s) removed")
        labels = labels[np.sort(first)]
    return labels, "; ".join(notes)


def verify_image_label(im_file: str, lb_file: str, nc: int) -> tuple[str, np.ndarray | None, tuple, str, str]:
    """Check one image and its label file: (im_file, labels or None if corrupt, (w, h), warning, status).
    status is 'ok', 'background' (no or empty label file) or 'corrupt'."""
    try:
        w, h = _image_size(im_file)
        if w < MIN_SIZE or h < MIN_SIZE:
            raise ValueError(f"image is {w}x{h}, smaller than {MIN_SIZE} px on a side")
        if os.path.exists(lb_file) and not os.path.isfile(lb_file):
            raise ValueError(f"label path {lb_file} is not a file")
        if not os.path.isfile(lb_file):
            return im_file, np.zeros((0, 5), np.float32), (w, h), "", "background"
        size = os.path.getsize(lb_file)
        if size > MAX_LABEL_BYTES:
            raise ValueError(f"label file {lb_file} is {size} bytes, more than {MAX_LABEL_BYTES}: not read")
        labels, note = _parse_labels(lb_file, nc)
        return im_file, labels, (w, h), note, "ok" if len(labels) else "background"
    except UnicodeDecodeError:
        return im_file, None, (0, 0), f"label file {lb_file} is not UTF-8 text", "corrupt"
    except (OSError, ValueError) as e:
        return im_file, None, (0, 0), " ".join(str(e).split()), "corrupt"


def _files_hash(files: list[str], nc: int) -> str:
    """Fingerprint of files (paths, sizes, modification times) and the class count they were checked against."""
    h = hashlib.sha256(f"v{CACHE_VERSION} nc={nc}".encode())
    for f in files:
        try:
            st = os.stat(f)
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{f}\0missing\n".encode())
    return h.hexdigest()


LABEL_CACHE_SUFFIX = ".yolo-labels.npz"  # not YOLOv5's '.cache': a dataset shared with YOLOv5 keeps both


def _fallback_cache_dir() -> Path:
    """$YOLO_CACHE_DIR, else $XDG_CACHE_HOME/yolo or ~/.cache/yolo."""
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
    fallback = _fallback_cache_dir() / (hashlib.sha256(str(beside).encode()).hexdigest()[:16] + LABEL_CACHE_SUFFIX)
    return [fallback] if os.environ.get("YOLO_CACHE_DIR") else [beside, fallback]


CACHE_KEYS = ("version", "hash", "im_files", "shapes", "counts", "labels", "msgs", "stats")  # what _scan writes


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
    return (
        cache["im_files"].ndim == 1
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
        LOGGER.warning(f"{prefix}WARNING: ignoring label cache {path} ({' '.join(str(e).split())[:200]})")
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
    has our cache's name there (it is never replaced)."""
    if not writable(path) or os.path.lexists(path) and _cache_members(path) is None:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as f:  # x: a new file of ours, never one that exists
            np.savez(f, **cache)
        if os.path.lexists(path) and _cache_members(path) is None:  # appeared while we wrote
            raise FileExistsError
        os.replace(tmp, path)
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


class LoadImagesAndLabels(Dataset):
    """Images with YOLO labels for training and validation (letterbox, rectangular batches, mosaic).

    nc (optional, beyond YOLOv5's arguments) rejects label files with classes outside [0, nc) as corrupt.
    """

    def __init__(
        self,
        path,
        img_size: int = 640,
        batch_size: int = 16,
        augment: bool = False,
        hyp: dict | None = None,
        rect: bool = False,
        cache: str | bool | None = None,
        single_cls: bool = False,
        stride: int = 32,
        pad: float = 0.0,
        prefix: str = "",
        nc: int | None = None,
    ):
        self.img_size, self.augment, self.rect, self.stride, self.prefix = img_size, augment, rect, stride, prefix
        self.hyp = hyp if hyp is not None or not augment else load_hyp(ROOT / "data" / "hyp.scratch.yaml")
        self.mosaic = augment and not rect  # mosaic mixes images, so it cannot keep rectangular batches
        self.mosaic_border = [-img_size // 2, -img_size // 2]
        self.path = path
        files = list_image_files(path, prefix)
        # classes are checked against nc; without it (or with single_cls, which merges them) only negatives fail
        self.nc = nc if nc is not None and not single_cls else 1 << 30
        self.im_files, self.labels, shapes = self._load_labels(files, img2label_paths(files))
        if not self.im_files:
            raise DatasetError(f"{prefix}no usable images in {path}: all are corrupt")
        if single_cls:
            for lb in self.labels:
                lb[:, 0] = 0
        self.label_files = img2label_paths(self.im_files)
        self.shapes = np.array(shapes, dtype=np.int64).reshape(-1, 2)  # (w, h)
        n = len(self.im_files)
        self.batch = np.arange(n) // batch_size  # batch index of each image
        self.indices = range(n)
        self.batch_shapes = None
        if rect:
            self._rect_shapes(batch_size, pad)
        self._bad: set[int] = set()
        self.ims = [None] * n
        self.npy_files: list[str | None] = [None] * n  # --cache disk: each image's .npy in our cache folder
        self.cache_mode = self._cache_images(cache)

    # -- labels --------------------------------------------------------------------------------------------------------
    def _load_labels(self, im_files: list[str], lb_files: list[str]) -> tuple[list[str], list[np.ndarray], list]:
        """Verified (images, labels, shapes), from the cache when its hash matches; logs the summary."""
        p = Path(self.path[0] if isinstance(self.path, (list, tuple)) else self.path)
        candidates = label_cache_paths(p if p.is_file() else Path(lb_files[0]).parent)
        self.cache_places = candidates  # the disk image cache goes beside whichever of these is usable
        digest = _files_hash(lb_files + im_files, self.nc)
        listed = set(im_files)
        cache = next((c for c in (_load_cache(f, digest, listed, self.prefix) for f in candidates) if c), None)
        if cache is None:
            cache = self._scan(im_files, lb_files)
            cache["hash"] = np.array(digest)
            saved = next((f for f in candidates if _save_cache(f, cache)), None)
            if saved == candidates[0]:
                LOGGER.info(f"{self.prefix}New cache created: {saved}")
            elif saved is not None:
                why = "holds a file of that name" if os.path.lexists(candidates[0]) else "is not writable"
                LOGGER.info(f"{self.prefix}{candidates[0].parent} {why}, label cache saved as {saved}")
            else:
                LOGGER.warning(
                    f"{self.prefix}WARNING: cache not saved ({', '.join(str(f.parent) for f in candidates)}"
                    f" not writable)"
                )
        n_images, n_bg, n_corrupt = (int(x) for x in cache["stats"])
        counts = cache["counts"]
        LOGGER.info(
            f"{self.prefix}{self.path}: {n_images} images, {n_bg} backgrounds, {n_corrupt} corrupt "
            f"({int(counts.sum())} boxes)"
        )
        for msg in cache["msgs"]:
            LOGGER.warning(f"{self.prefix}WARNING: {msg}")
        if n_images and not counts.sum():
            LOGGER.warning(f"{self.prefix}WARNING: {self._no_labels_message(cache['im_files'])}")
        labels = np.split(cache["labels"].astype(np.float32), np.cumsum(counts)[:-1]) if len(counts) else []
        labels = [np.ascontiguousarray(lb) for lb in labels]
        return [str(f) for f in cache["im_files"]], labels, cache["shapes"].tolist()

    def _no_labels_message(self, im_files) -> str:
        """'no labels found in <labels folder> for the N images in <images folder>: ...' (first folders named)."""
        im_dirs = sorted({os.path.dirname(str(f)) for f in im_files})
        lb_dirs = sorted({os.path.dirname(f) for f in img2label_paths([str(f) for f in im_files])})

        def named(dirs: list[str]) -> str:
            return dirs[0] + (f" (and {len(dirs) - 1} more folders)" if len(dirs) > 1 else "")

        return (
            f"no labels found in {named(lb_dirs)} for the {len(im_files)} images in {named(im_dirs)}: training "
            f"needs YOLO label files (images/ -> labels/, .txt)"
        )

    def _scan(self, im_files: list[str], lb_files: list[str]) -> dict:
        """Verify every image/label pair (threads: mostly file I/O) into cache arrays."""
        workers = min(8, os.cpu_count() or 1, max(1, len(im_files) // 64))
        nc = self.nc
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda pair: verify_image_label(*pair, nc), zip(im_files, lb_files)))
        good, msgs, n_bg, n_corrupt = [], [], 0, 0
        for im_file, labels, shape, msg, status in results:
            if status == "corrupt":
                n_corrupt += 1
                msgs.append(f"{im_file}: ignoring corrupt image/label: {msg}")
                continue
            n_bg += status == "background"
            if msg:
                msgs.append(f"{im_file}: {msg}")
            good.append((im_file, labels, shape))
        return {
            "version": np.array(CACHE_VERSION),
            "im_files": np.array([g[0] for g in good], dtype=str),
            "shapes": np.array([g[2] for g in good], dtype=np.int64).reshape(-1, 2),
            "counts": np.array([len(g[1]) for g in good], dtype=np.int64),
            "labels": np.concatenate([g[1] for g in good], 0) if good else np.zeros((0, 5), np.float32),
            "msgs": np.array(msgs, dtype=str),
            "stats": np.array([len(good), n_bg, n_corrupt]),
        }

    def _rect_shapes(self, batch_size: int, pad: float) -> None:
        """Sort images by aspect ratio and give each batch the smallest stride-multiple shape that fits it."""
        aspect = self.shapes[:, 1] / self.shapes[:, 0]  # h / w
        # numpy's default (unstable) sort, as YOLOv5: images with tied ratios then land in the same batches
        order = aspect.argsort()
        self.im_files = [self.im_files[i] for i in order]
        self.labels = [self.labels[i] for i in order]
        self.label_files = [self.label_files[i] for i in order]
        self.shapes, aspect = self.shapes[order], aspect[order]
        n_batches = int(self.batch[-1]) + 1
        shapes = np.ones((n_batches, 2))  # (h, w) relative to img_size
        for i in range(n_batches):
            ar = aspect[self.batch == i]
            if ar.max() < 1:  # all landscape: full width, height of the tallest
                shapes[i] = (ar.max(), 1)
            elif ar.min() > 1:  # all portrait: full height, width of the widest
                shapes[i] = (1, 1 / ar.min())
        self.batch_shapes = np.ceil(shapes * self.img_size / self.stride + pad).astype(int) * self.stride

    # -- images --------------------------------------------------------------------------------------------------------
    def _cache_images(self, cache) -> str | None:
        """Fill the RAM cache or write .npy files for --cache ram/disk; returns the mode in effect."""
        mode = "ram" if cache is True else (cache or None)
        if mode not in (None, "ram", "disk"):
            raise DatasetError(f"cache must be 'ram', 'disk' or None, got {cache!r}")
        if mode == "disk":
            folder = next((d for d in image_cache_dirs(self.cache_places) if _own_cache_folder(d)), None)
            if folder is None:
                places = ", ".join(str(d) for d in image_cache_dirs(self.cache_places))
                LOGGER.warning(f"{self.prefix}WARNING: no folder of ours to write to ({places}), --cache disk disabled")
                return None
            self.npy_files = [_npy_path(folder, f) for f in self.im_files]
            todo = _prune_image_cache(folder, self.npy_files)
            with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
                for i in todo:
                    pool.submit(self._write_npy, i)
            LOGGER.info(f"{self.prefix}Disk image cache: {folder} ({len(todo)} images written)")
        elif mode == "ram":
            if not self._ram_fits():
                return None
            with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
                for i, loaded in enumerate(pool.map(self.load_image, range(len(self.im_files)))):
                    self.ims[i] = loaded
            gb = sum(x[0].nbytes for x in self.ims) / 1e9
            LOGGER.info(f"{self.prefix}Cached {len(self.ims)} images in RAM ({gb:.2f} GB)")
        return mode

    def _write_npy(self, i: int) -> None:
        """The decoded image into its cache file (a new temporary file of ours, then renamed into our folder)."""
        im, target = read_image(self.im_files[i]), self.npy_files[i]
        if im is None or target is None:
            return
        tmp = f"{target}.{secrets.token_hex(4)}.tmp"
        try:
            with open(tmp, "xb") as f:
                np.save(f, im, allow_pickle=False)
            os.replace(tmp, target)
        except OSError:  # disk full: the image is read from its file instead
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _ram_fits(self) -> bool:
        """Estimate the RAM cache size from the image shapes; refuse it above 90% of free memory."""
        scale = self.img_size / self.shapes.max(1)
        need = float((self.shapes.prod(1) * scale**2 * 3).sum())
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # not Linux: trust the user
            return True
        if need > 0.9 * free:
            LOGGER.warning(
                f"{self.prefix}WARNING: --cache ram needs {need / 1e9:.1f} GB but {free / 1e9:.1f} GB "
                f"is free, not caching"
            )
            return False
        return True

    def load_image(self, i: int) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        """Image i as BGR uint8 resized so its long side is img_size: (image, (h0, w0), (h, w))."""
        if self.ims[i] is not None:
            return self.ims[i]
        im = _load_npy(self.npy_files[i], self.shapes[i]) if self.npy_files[i] else None
        if im is None:
            im = read_image(self.im_files[i])
        if im is None:  # it was fine when verified; keep training on a grey placeholder rather than crash
            if i not in self._bad:
                LOGGER.warning(f"{self.prefix}WARNING: {self.im_files[i]} could not be read, using a blank image")
            self._bad.add(i)
            w0, h0 = (int(v) for v in self.shapes[i])
            im = np.full((h0, w0, 3), 114, np.uint8)
        h0, w0 = im.shape[:2]
        r = self.img_size / max(h0, w0)
        if r != 1:
            interp = cv2.INTER_LINEAR if (self.augment or r > 1) else cv2.INTER_AREA
            # ceil, as YOLOv5: official weights then see the very pixels they were validated on
            im = cv2.resize(im, (max(1, math.ceil(w0 * r)), max(1, math.ceil(h0 * r))), interpolation=interp)
        return im, (h0, w0), im.shape[:2]

    def _labels(self, i: int) -> np.ndarray:
        return np.zeros((0, 5), np.float32) if i in self._bad else self.labels[i].copy()

    def load_mosaic(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Four images (this one and three random ones) tiled around a random centre, then randomly warped
        to img_size x img_size: (BGR image, pixel [cls, x1, y1, x2, y2] labels)."""
        s = self.img_size
        xc, yc = (int(random.uniform(-b, 2 * s + b)) for b in self.mosaic_border)
        indices = [index] + random.choices(self.indices, k=3)
        random.shuffle(indices)
        images, targets = [], []
        for i in indices:
            im, _, (h, w) = self.load_image(i)
            labels = self._labels(i)
            if len(labels):
                labels[:, 1:] = xywhn2xyxy(labels[:, 1:], w, h)
            images.append(im)
            targets.append(labels)
        canvas, labels = mosaic4(images, targets, s, (xc, yc))
        return random_perspective(canvas, labels, **self._warp_args(), border=self.mosaic_border)

    def _warp_args(self) -> dict[str, float]:
        """The random_perspective hyperparameters."""
        return {k: self.hyp[k] for k in ("degrees", "translate", "scale", "shear", "perspective")}

    # -- Dataset protocol ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.im_files)

    def __getitem__(self, index: int):
        """(image uint8 (3, H, W) RGB, labels (n, 6) [0, cls, cx, cy, w, h] normalised, path, shapes or None) of
        image self.indices[index]: the identity, or the images --image-weights drew for this epoch."""
        index = self.indices[index]
        hyp = self.hyp
        if self.mosaic and random.random() < hyp["mosaic"]:
            img, labels = self.load_mosaic(index)
            shapes = None
            if random.random() < hyp["mixup"]:
                img, labels = mixup(img, labels, *self.load_mosaic(random.choice(self.indices)))
        else:
            loaded, (h0, w0), (h, w) = self.load_image(index)
            shape = self.batch_shapes[self.batch[index]] if self.rect else self.img_size
            img, ratio, pad = letterbox(loaded, shape, auto=False, scaleup=self.augment)
            if self.augment and img is loaded and self.ims[index] is not None:
                img = img.copy()  # colour augmentation works in place: keep the RAM cache pristine
            shapes = (h0, w0), ((ratio[1] * h / h0, ratio[0] * w / w0), pad)  # for utils.boxes.scale_boxes
            labels = self._labels(index)
            if len(labels):
                labels[:, 1:] = xywhn2xyxy(labels[:, 1:], ratio[0] * w, ratio[1] * h, padw=pad[0], padh=pad[1])
            if self.augment:
                img, labels = random_perspective(img, labels, **self._warp_args())
        n = len(labels)
        if n:
            labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], w=img.shape[1], h=img.shape[0], clip=True)
        if self.augment:
            augment_hsv(img, hgain=hyp["hsv_h"], sgain=hyp["hsv_s"], vgain=hyp["hsv_v"])
            img, labels = random_flip(img, labels, fliplr=hyp["fliplr"], flipud=hyp["flipud"])
        labels_out = torch.zeros((n, 6))
        if n:
            labels_out[:, 1:] = torch.from_numpy(np.asarray(labels, dtype=np.float32))
        img = np.ascontiguousarray(img.transpose(2, 0, 1)[::-1])  # HWC BGR -> CHW RGB, one copy
        return torch.from_numpy(img), labels_out, self.im_files[index], shapes

    @staticmethod
    def collate_fn(batch):
        """Stack images; concatenate labels with the image's index in the batch in column 0."""
        imgs, labels, paths, shapes = zip(*batch)
        for i, lb in enumerate(labels):
            lb[:, 0] = i
        return torch.stack(imgs, 0), torch.cat(labels, 0), paths, shapes

    @staticmethod
    def collate_quad(batch: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, tuple, tuple]:
        """--quad: each group of 4 consecutive images becomes one image of twice the side, either the group's first
        image upsampled 2x or the 4 tiled 2x2 (even odds), labels following; a last group of 1-3 images (only in an
        epoch's last batch) is always upsampled. Same structure as collate_fn, ceil(len(batch) / 4) images, each
        with its first image's path and shapes None (no longer one letterboxed original)."""
        imgs, labels, paths, _ = zip(*batch)
        out_imgs, out_labels, out_paths = [], [], []
        for start in range(0, len(imgs), 4):
            group, group_labels = imgs[start : start + 4], labels[start : start + 4]
            same_size = all(im.shape == group[0].shape for im in group)
            if len(group) < 4 or not same_size or random.random() < 0.5:
                image, lb = _upsample_2x(group[0]), group_labels[0].clone()
            else:
                image, lb = _tile_2x2(group, group_labels)
            lb[:, 0] = len(out_imgs)
            out_imgs.append(image)
            out_labels.append(lb)
            out_paths.append(paths[start])
        return torch.stack(out_imgs, 0), torch.cat(out_labels, 0), tuple(out_paths), (None,) * len(out_imgs)


def _upsample_2x(image: torch.Tensor) -> torch.Tensor:
    """A uint8 (3, H, W) image at (3, 2H, 2W), bilinear; its normalised labels stay valid as they are."""
    big = F.interpolate(image[None].float(), scale_factor=2.0, mode="bilinear", align_corners=False)[0]
    return big.round_().clamp_(0, 255).to(torch.uint8)


def _tile_2x2(images: tuple, labels: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """Four equal-size (3, H, W) images tiled in reading order (top-left, top-right, bottom-left, bottom-right)
    into one (3, 2H, 2W) image, with their [i, cls, cx, cy, w, h] labels renormalised to it."""
    top, bottom = torch.cat(images[:2], 2), torch.cat(images[2:], 2)
    moved = []
    for k, lb in enumerate(labels):
        lb = lb.clone()
        lb[:, 2] = (lb[:, 2] + k % 2) / 2  # column offset, then half the width
        lb[:, 3] = (lb[:, 3] + k // 2) / 2  # row offset, then half the height
        lb[:, 4:6] /= 2
        moved.append(lb)
    return torch.cat((top, bottom), 1), torch.cat(moved, 0)


# ---------------------------------------------------------------------------------------------------------------------
# Dataloader


def _seed_worker(worker_id: int) -> None:
    """Seed NumPy and random in each worker from torch's per-worker seed, so augmentation is reproducible."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def _loader_flags(
    batch_size: int, rect: bool, shuffle: bool, image_weights: bool, quad: bool, prefix: str
) -> tuple[bool, bool]:
    """Check the batch size; (rect, shuffle) once options that exclude each other are resolved, with a warning."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise DatasetError(f"{prefix}batch size must be a positive integer, got {batch_size!r}")
    if quad and batch_size % 4:
        raise DatasetError(f"{prefix}--quad needs a batch size that is a multiple of 4 (per device), got {batch_size}")
    if image_weights and rect:  # as YOLOv5: resampled images would not fit the aspect-sorted batch shapes
        LOGGER.warning(f"{prefix}WARNING: --rect is incompatible with --image-weights, rect=False")
        rect = False
    if rect and shuffle:
        LOGGER.warning(f"{prefix}WARNING: --rect is incompatible with shuffling, shuffle=False")
        shuffle = False
    return rect, shuffle


def _fit_batch(batch_size: int, n_images: int, path, quad: bool, prefix: str) -> int:
    """The batch clipped to the dataset size (as YOLOv5: a small set, or one shrunk by corrupt files, is one batch),
    then under --quad down to a multiple of 4."""
    if batch_size > n_images:
        LOGGER.info(f"{prefix}batch size {batch_size} reduced to {n_images}, the number of images in {path}")
        batch_size = n_images
    if quad and batch_size % 4:  # only a dataset smaller than the batch gets here
        if batch_size < 4:
            raise DatasetError(f"{prefix}--quad needs at least 4 images, {path} has {batch_size}")
        batch_size -= batch_size % 4
        LOGGER.info(f"{prefix}--quad: batch size {batch_size}, a multiple of 4")
    return batch_size


def create_dataloader(
    path,
    imgsz: int,
    batch_size: int,
    stride: int,
    single_cls: bool = False,
    hyp: dict | None = None,
    augment: bool = False,
    cache: str | bool | None = None,
    pad: float = 0.0,
    rect: bool = False,
    rank: int = -1,
    workers: int = 8,
    shuffle: bool = False,
    seed: int = 0,
    prefix: str = "",
    nc: int | None = None,
    require_labels: bool = False,
    image_weights: bool = False,
    quad: bool = False,
) -> tuple[DataLoader, LoadImagesAndLabels]:
    """A DataLoader over LoadImagesAndLabels (distributed sampler when rank != -1, seeded workers); the batch is
    clipped to the dataset size. require_labels (training) refuses a dataset without any label box. image_weights:
    the caller sets dataset.indices each epoch (utils.image_weights), so workers restart each epoch to see them and
    rect is off. quad: batches go through collate_quad (batch_size // 4 images of twice the side)."""
    rect, shuffle = _loader_flags(batch_size, rect, shuffle, image_weights, quad, prefix)
    dataset = LoadImagesAndLabels(
        path,
        imgsz,
        batch_size,
        augment=augment,
        hyp=hyp,
        rect=rect,
        cache=cache,
        single_cls=single_cls,
        stride=int(stride),
        pad=pad,
        prefix=prefix,
        nc=nc,
    )
    if require_labels and not any(len(lb) for lb in dataset.labels):
        raise DatasetError(f"{prefix}{dataset._no_labels_message(dataset.im_files)}")
    batch_size = _fit_batch(batch_size, len(dataset), path, quad, prefix)
    nw = max(0, min(os.cpu_count() or 1, batch_size, workers))
    sampler = None if rank == -1 else distributed.DistributedSampler(dataset, shuffle=shuffle)
    generator = torch.Generator()
    generator.manual_seed(6_364_136_223_846_793 + seed + max(rank, 0))
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle and sampler is None,
        num_workers=nw,
        sampler=sampler,
        pin_memory=torch.cuda.is_available(),
        collate_fn=LoadImagesAndLabels.collate_quad if quad else LoadImagesAndLabels.collate_fn,
        worker_init_fn=_seed_worker,
        generator=generator,
        persistent_workers=nw > 0 and not image_weights,  # persistent workers would keep last epoch's indices
    )
    return loader, dataset
