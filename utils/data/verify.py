"""Listing a split's images and checking each image with its label file: readable, large enough, boxes in range,
nothing that is not a regular file read.
"""

import io
import math
import os
import stat
from pathlib import Path

import numpy as np

from utils.data.annotations import AnnotatedSplit
from utils.data.polygons import clip_polygon, polygon_box
from utils.errors import DatasetError
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
    read_regular_file,
    suffix,
)
from utils.log import LOGGER, one_line

try:  # Pillow comes with matplotlib; used only to read image headers (size, EXIF) when verifying
    from PIL import Image, UnidentifiedImageError
except ImportError:  # pragma: no cover - verification falls back to a full OpenCV decode
    Image = None


MIN_SIZE = 10  # images smaller than this (px) on any side are rejected

NO_POLYGON = np.zeros((0, 2), np.float32)  # a box row's polygon (shared, never written to)

OVERSHOOT = 0.01  # normalised coordinates this far outside [0, 1] are clipped; further is an error

MAX_LABEL_BYTES = 10 << 20  # a label file this large (~300k boxes for one image) is not a label file

MAX_LIST_BYTES = 256 << 20  # a split's .txt list of images (~2.5M paths)


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
    images, an image, or a list. FIFOs, devices and sockets are skipped with a warning, never opened. A COCO JSON or
    VOC split (an AnnotatedSplit) lists the images its annotations name."""
    if isinstance(path, AnnotatedSplit):
        images = path.annotations().images
        if not images:
            raise DatasetError(f"{prefix}no usable images in {path}: none of its images was found")
        return images
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
    return checked_image(file)[1]


def checked_image(file: str) -> tuple[bytes, tuple[int, int], tuple[int, int]]:
    """An image's bytes, its (w, h) as read_image returns it and as stored (they differ by EXIF rotation): what
    training checks before it uses an image (a regular file, at most MAX_IMAGE_BYTES, readable, not truncated), and
    what the converter checks before it copies one. ValueError (one line) otherwise."""
    raw = read_regular_file(file, MAX_IMAGE_BYTES)
    if Image is None:  # pragma: no cover - a full decode
        im, reason = decode_image(raw, suffix(file))
        if im is None:
            raise ValueError(reason)
        return raw, (im.shape[1], im.shape[0]), (im.shape[1], im.shape[0])
    try:
        with Image.open(io.BytesIO(raw)) as im:
            im.verify()  # checks the data, not only the header
        info = image_info(raw)
    except UnidentifiedImageError:
        raise ValueError("not an image or unsupported format") from None
    except ValueError:
        raise
    except Exception as e:  # Pillow raises many types for damaged files
        raise ValueError(f"unreadable image ({one_line(e)})"[:300]) from None
    if info.format in ("JPEG", "MPO") and jpeg_truncated(raw):
        raise ValueError(TRUNCATED_JPEG)
    return raw, info.size, (info.width, info.height)


def size_problem(annotated: tuple[float, float], shown: tuple[int, int], stored: tuple[int, int]) -> str | None:
    """Why an image's annotated (w, h) (a COCO JSON's width/height, a VOC <size>) does not fit the file (its boxes
    are in another image's pixels: they would be scaled wrongly), or None. Either orientation of the file fits."""
    w, h = annotated
    if (round(w), round(h)) in (shown, stored):
        return None
    return f"its annotation gives its size as {w:g}x{h:g} but the image is {shown[0]}x{shown[1]}: boxes not used"


def _parse_labels(file: str, nc: int) -> tuple[np.ndarray, list[np.ndarray], str]:
    """(rows [cls, cx, cy, w, h], polygons, warning ('' if clean)) of a YOLO label file; raises ValueError if
    malformed. A polygon row (cls x1 y1 x2 y2 x3 y3 ...) gives its enclosing box and its (k, 2) vertices; a box row
    an empty polygon. Files over MAX_LABEL_BYTES are refused before they are read."""
    # -sig: a byte-order mark (Windows editors) is not data
    text = read_regular_file(file, MAX_LABEL_BYTES).decode("utf-8-sig")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5 and (len(parts) < 7 or len(parts) % 2 == 0):
            raise ValueError(f"line {n}: {_row_shape_problem(len(parts))}")
        try:
            values = [float(v) for v in parts] if len(parts) == 5 else np.array(parts, dtype=np.float64)
        except ValueError:
            raise ValueError(f"line {n}: non-numeric value in '{line.strip()[:200]}'") from None
        rows.append((n, values))
    return labels_from_rows(rows, nc)


def _row_shape_problem(count: int) -> str:
    """Why a row of count values is neither a box (class cx cy w h) nor a polygon (class and 3+ x y vertices)."""
    rule = f"labels need 5 columns (class cx cy w h) or a polygon (class x1 y1 x2 y2 x3 y3 ...), found {count}"
    if count % 2 == 0:
        return f"{rule}: {count - 1} coordinates, an odd count, cannot be x y vertices"
    return f"{rule}: a polygon of {(count - 1) // 2} vertices needs at least 3"


def _shown(values: np.ndarray) -> str:
    """The first values of a row as text, for a one-line message."""
    return " ".join(f"{v:g}" for v in values[:12]) + (" ..." if len(values) > 12 else "")


def labels_from_rows(
    rows: list[tuple[int, list[float]]], nc: int, outlines: list[np.ndarray] | None = None
) -> tuple[np.ndarray, list[np.ndarray], str]:
    """(line number, [cls, cx, cy, w, h] or [cls, polygon...]) rows checked and cleaned as a label file's are: the
    one path from numbers to labels, shared by YOLO text files and labels converted from COCO JSON or VOC XML (so
    that a converted dataset and its written-out text labels give the same float32 labels). Returns the (n, 5)
    labels, each row's float32 (k, 2) polygon (empty for a box row) and a note of what was changed. outlines: a
    normalised polygon for each (box) row, from annotations that give both (COCO: bbox and segmentation): the row
    then takes the outline's box, as a polygon row does."""
    boxes, polygons, clipped = [], [], 0
    for k, (n, values) in enumerate(rows):
        cls, coords = _checked_row(n, values, nc)
        if len(coords) == 4 and outlines is None:  # a box row (the common case: no arrays)
            cx, cy, w, h = coords
            boxes.append((cls, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
            polygons.append(NO_POLYGON)
            continue
        outline = coords if len(coords) > 4 else outlines[k]
        points, outside = inside_image(np.asarray(outline, np.float64).reshape(-1, 2))
        points = points.astype(np.float32).astype(np.float64)  # the box of what is kept (and written out)
        clipped += outside
        polygons.append(points.astype(np.float32) if len(points) >= 3 else NO_POLYGON)
        if len(coords) > 4 or len(points) >= 3:  # a polygon (or outline): its part inside the image, and its box
            boxes.append((cls, *polygon_box(points)))
        else:
            cx, cy, w, h = coords
            boxes.append((cls, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
    if not boxes:
        return np.zeros((0, 5), np.float32), [], ""
    labels, kept, note = _clean_boxes(np.array(boxes, dtype=np.float64))
    if clipped:
        note = "; ".join(x for x in (f"{clipped} polygon vertices outside the image clipped to it", note) if x)
    return labels, [polygons[i] for i in kept], note


def _checked_row(n: int, values, nc: int) -> tuple[float, list[float] | np.ndarray]:
    """(class, coordinates) of a row of numbers: finite, an integer class in [0, nc), coordinates normalised (to
    within OVERSHOOT); ValueError (one line) otherwise. A box row stays Python floats, a polygon row is an array."""
    if len(values) > 5:
        values = np.asarray(values, dtype=np.float64)
        finite, low, high = bool(np.isfinite(values).all()), values[1:].min(), values[1:].max()
    else:
        values = [float(v) for v in values]
        finite = all(math.isfinite(v) for v in values)
        low, high = (min(values[1:]), max(values[1:])) if finite else (0.0, 0.0)
    if not finite:
        raise ValueError(f"line {n}: non-finite value in '{_shown(values)}'"[:300])
    cls = values[0]
    if cls != int(cls) or not 0 <= cls < nc:
        raise ValueError(f"line {n}: class {cls:g} is not an integer in [0, {nc})"[:300])
    if low < -OVERSHOOT or high > 1 + OVERSHOOT:
        raise ValueError(f"line {n}: coordinates must be normalised to [0, 1], got {_shown(values[1:])}"[:300])
    return float(cls), values[1:]


def inside_image(points: np.ndarray) -> tuple[np.ndarray, int]:
    """A normalised polygon's part inside the image (utils.data.polygons.clip_polygon), and how many of its
    vertices were outside."""
    outside = int(((points < 0) | (points > 1)).any(1).sum()) if len(points) else 0
    return (clip_polygon(points, 1.0, 1.0) if outside else points), outside


def _clean_boxes(xyxy: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    """[cls, x1, y1, x2, y2] rows clipped to the image, zero-size and duplicate boxes dropped, as [cls, cx, cy, w, h]
    float32, with the indices of the rows kept and a note of what was dropped."""
    notes = []
    kept = np.arange(len(xyxy))
    edges = xyxy[:, 1:]
    if (edges < 0).any() or (edges > 1).any():
        np.clip(edges, 0, 1, out=edges)  # boxes overshooting the image edge are cut at it
    degenerate = (xyxy[:, 3] <= xyxy[:, 1]) | (xyxy[:, 4] <= xyxy[:, 2])
    if degenerate.any():
        notes.append(f"{int(degenerate.sum())} zero-size box(es) removed")
        xyxy, kept = xyxy[~degenerate], kept[~degenerate]
    labels = np.empty((len(xyxy), 5), np.float32)
    labels[:, 0] = xyxy[:, 0]
    labels[:, 1] = (xyxy[:, 1] + xyxy[:, 3]) / 2
    labels[:, 2] = (xyxy[:, 2] + xyxy[:, 4]) / 2
    labels[:, 3] = xyxy[:, 3] - xyxy[:, 1]
    labels[:, 4] = xyxy[:, 4] - xyxy[:, 2]
    _, first = np.unique(labels, axis=0, return_index=True)
    if len(first) < len(labels):
        notes.append(f"{len(labels) - len(first)} duplicate label(s) removed")
        labels, kept = labels[np.sort(first)], kept[np.sort(first)]
    return labels, kept, "; ".join(notes)


Verified = tuple[str, np.ndarray | None, tuple, str, str, list[np.ndarray]]


def verify_image_label(im_file: str, lb_file: str, nc: int) -> Verified:
    """Check one image and its label file: (im_file, labels or None if corrupt, (w, h), warning, status, polygons).
    status is 'ok', 'background' (no or empty label file) or 'corrupt'; polygons: one (k, 2) array per label row
    (empty for a box row)."""
    try:
        w, h = _image_size(im_file)
        if w < MIN_SIZE or h < MIN_SIZE:
            raise ValueError(f"image is {w}x{h}, smaller than {MIN_SIZE} px on a side")
        if os.path.exists(lb_file) and not os.path.isfile(lb_file):
            raise ValueError(f"label path {lb_file} is not a file")
        if not os.path.isfile(lb_file):
            return im_file, np.zeros((0, 5), np.float32), (w, h), "", "background", []
        size = os.path.getsize(lb_file)
        if size > MAX_LABEL_BYTES:
            raise ValueError(f"label file {lb_file} is {size} bytes, more than {MAX_LABEL_BYTES}: not read")
        labels, polygons, note = _parse_labels(lb_file, nc)
        return im_file, labels, (w, h), note, "ok" if len(labels) else "background", polygons
    except UnicodeDecodeError:
        return im_file, None, (0, 0), f"label file {lb_file} is not UTF-8 text", "corrupt", []
    except (OSError, ValueError) as e:
        return im_file, None, (0, 0), one_line(e), "corrupt", []


def verify_image_rows(im_file: str, annotated: tuple, nc: int) -> Verified:
    """verify_image_label for an image whose labels were converted from an annotation file: annotated is its rows
    ([cls, cx, cy, w, h] or [cls, polygon...], as a label file's lines), checked and cleaned exactly as the same
    numbers in a label file would be, and the (w, h) the annotation gives, which must be the image's."""
    rows, size, outlines = annotated
    try:
        _, (w, h), stored = checked_image(im_file)
        if w < MIN_SIZE or h < MIN_SIZE:
            raise ValueError(f"image is {w}x{h}, smaller than {MIN_SIZE} px on a side")
        if problem := size_problem(size, (w, h), stored):
            raise ValueError(problem)
        labels, polygons, note = labels_from_rows([(n, row) for n, row in enumerate(rows, 1)], nc, outlines)
        return im_file, labels, (w, h), note, "ok" if len(labels) else "background", polygons
    except (OSError, ValueError) as e:
        return im_file, None, (0, 0), one_line(e), "corrupt", []
