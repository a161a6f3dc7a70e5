"""Image files: the supported formats, the one image reader (training and inference) and file listing.

Every image, whatever its depth or channels (grey, 16-bit, float, alpha), is read as 3-channel BGR uint8 here, so
a model sees the same pixels when it is trained on a file as when it runs on it.
"""

import os
from pathlib import Path

import cv2
import numpy as np

IMG_FORMATS = ("bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm")
VID_FORMATS = ("asf", "avi", "gif", "m4v", "mkv", "mov", "mp4", "mpeg", "mpg", "ts", "wmv")
JPEG_SUFFIXES = ("jpg", "jpeg", "mpo")
TRUNCATED_JPEG = "truncated JPEG (no end-of-image marker after the last scan)"


def suffix(path: str | Path) -> str:
    """The lower-case extension without its dot ('a/B.JPG' -> 'jpg'; '' when there is none)."""
    return Path(path).suffix[1:].lower()


def is_image_file(path: str | Path) -> bool:
    """Whether the name of path ends in one of IMG_FORMATS."""
    return str(path).rsplit(".", 1)[-1].lower() in IMG_FORMATS


def to_bgr_uint8(image: np.ndarray) -> np.ndarray:
    """Grayscale, 16-bit, float and 2- or 4-channel images as 3-channel BGR uint8."""
    if image.dtype == np.uint16:
        image = (image.astype(np.float32) / 257.0).round().astype(np.uint8)  # 65535 -> 255
    elif image.dtype.kind == "f":
        image = np.nan_to_num(image.astype(np.float32))
        scale = 255.0 if image.max(initial=0.0) <= 1.0 else 1.0  # float images are usually in [0, 1]
        image = (image * scale).clip(0, 255).round().astype(np.uint8)
    elif image.dtype != np.uint8:
        image = image.clip(0, 255).astype(np.uint8)
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    channels = image.shape[2]
    if channels in (1, 2):  # grey, or grey + alpha
        return cv2.cvtColor(image[..., 0], cv2.COLOR_GRAY2BGR)
    if channels == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    return np.ascontiguousarray(image[..., :3])


def jpeg_truncated(raw: bytes) -> bool:
    """True when JPEG bytes lack the end-of-image marker (FF D9) after the last scan (FF DA): a cut-off file."""
    if raw[-64:].rstrip(b"\x00").endswith(b"\xff\xd9"):  # the usual ending: no need to search the whole file
        return False
    return raw.rfind(b"\xff\xd9") < raw.rfind(b"\xff\xda")  # FF D9 cannot occur inside entropy-coded data


def jpeg_file_truncated(file: str | Path) -> bool:
    """jpeg_truncated for a file, reading only its last bytes when they end the image properly."""
    with open(file, "rb") as f:
        f.seek(max(os.path.getsize(file) - 64, 0))
        if f.read().rstrip(b"\x00").endswith(b"\xff\xd9"):
            return False
        f.seek(0)
        return jpeg_truncated(f.read())


def truncation(raw: bytes, extension: str) -> str | None:
    """Why encoded image bytes look cut off, or None. Checked before decoding, as decoders fill in grey silently."""
    if extension in JPEG_SUFFIXES or raw[:2] == b"\xff\xd8":
        return TRUNCATED_JPEG if jpeg_truncated(raw) else None
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and b"IEND" not in raw[-12:]:
        return "truncated PNG (no IEND chunk)"
    return None


def read_image_checked(path: str | Path) -> tuple[np.ndarray | None, str]:
    """Read an image as BGR uint8 (any depth or channel count, unicode paths); on failure (None, reason)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return None, f"cannot read file: {e.strerror or e}"
    if not raw:
        return None, "empty file"
    extension = suffix(path)
    problem = truncation(raw, extension)
    if problem:
        return None, problem
    # JPEGs decode as colour so OpenCV applies their EXIF orientation (as cv2.imread does); other formats
    # decode unchanged so 16-bit, float and alpha images are converted here rather than by OpenCV's defaults.
    jpeg = extension in JPEG_SUFFIXES or raw[:2] == b"\xff\xd8"
    try:
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR if jpeg else cv2.IMREAD_UNCHANGED)
    except cv2.error:
        image = None
    if image is None or image.size == 0:
        return None, "not a readable image (corrupt or unsupported encoding)"
    return to_bgr_uint8(image), ""


def read_image(path: str | Path) -> np.ndarray | None:
    """Read an image as 3-channel BGR uint8, or None when it is unreadable or truncated."""
    return read_image_checked(path)[0]


def list_files(folder: Path, recursive: bool = False) -> list[str]:
    """Sorted paths of the files in folder (and its subfolders when recursive); folders are never listed."""
    entries = folder.rglob("*") if recursive else folder.iterdir()
    return sorted(str(p) for p in entries if p.is_file())
