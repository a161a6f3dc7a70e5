"""Image files: the supported formats, the one image reader (training and inference) and file listing.

Every image, whatever its depth or channels (grey, 16-bit, float, alpha), is read as 3-channel BGR uint8 here, so
a model sees the same pixels when it is trained on a file as when it runs on it. The EXIF orientation of every
format that carries one (JPEG, PNG, WebP, TIFF) is applied here, from the same header reading that tells the label
checker an image's shape, so both always agree.

Reading is bounded: only regular files are opened (a FIFO or /dev/zero named like an image is refused without
blocking), never more than the file's size is read, and an image whose decoded pixels would exceed
MAX_DECODED_BYTES (a few-kilobyte PNG can claim gigabytes) is refused from its header, before decoding.
"""

import io
import math
import os
import stat
import struct
import warnings
from pathlib import Path

import cv2
import numpy as np

from utils.log import one_line

try:  # Pillow (a dependency of torchvision and matplotlib) reads headers: size, bit depth, EXIF orientation
    from PIL import Image, UnidentifiedImageError

    # PIL warns (two lines on stderr) above 89 Mpx; MAX_DECODED_BYTES below is the bound that applies here
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
except ImportError:  # pragma: no cover - without it OpenCV's defaults apply (JPEG orientation only)
    Image = None

IMG_FORMATS = ("bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm")
VID_FORMATS = ("asf", "avi", "gif", "m4v", "mkv", "mov", "mp4", "mpeg", "mpg", "ts", "wmv")
JPEG_SUFFIXES = ("jpg", "jpeg", "mpo")
TRUNCATED_JPEG = "truncated JPEG (no end-of-image marker after the last scan)"
UNREADABLE = "not a readable image (corrupt or unsupported encoding)"
MAX_IMAGE_BYTES = 1 << 30  # a file larger than this is not a photo
MAX_DECODED_BYTES = 576 << 20  # decoded pixels: PIL's own limit (179 Mpx) of 8-bit RGB fits, 16-bit RGBA to 75 Mpx
ORIENTATION = 0x0112  # the EXIF / TIFF orientation tag
_CONVERT_ROWS = 1 << 20  # pixels per block when converting depth: temporaries stay small for any image size


def suffix(path: str | Path) -> str:
    """The lower-case extension without its dot ('a/B.JPG' -> 'jpg'; '' when there is none)."""
    return Path(path).suffix[1:].lower()


def is_image_file(path: str | Path) -> bool:
    """Whether the name of path ends in one of IMG_FORMATS."""
    return str(path).rsplit(".", 1)[-1].lower() in IMG_FORMATS


# --- bounded file reading ---------------------------------------------------------------------------------------


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words, from its st_mode."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. ValueError (one line) for a FIFO, device or socket, or
    a file too large; OSError when it cannot be read. Never blocks on a FIFO, never reads past the file's size."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{file_kind(st.st_mode)}, not a regular file: not read")
    if st.st_size > limit:
        raise ValueError(f"{st.st_size} bytes, more than the {limit} bytes such a file may have: not read")
    # O_NONBLOCK: a FIFO swapped in after stat() cannot block open(); fstat() then sees what was opened
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError("changed while it was opened: not read")
        return f.read(st.st_size)


# --- header, orientation, depth ---------------------------------------------------------------------------------


class ImageInfo:
    """What an image's header says: stored size, EXIF orientation (1-8) and the bytes its decoded pixels take."""

    def __init__(self, width: int, height: int, orientation: int, decoded_bytes: int, fmt: str):
        self.width, self.height, self.orientation, self.decoded_bytes, self.format = (
            width,
            height,
            orientation,
            decoded_bytes,
            fmt,
        )

    @property
    def size(self) -> tuple[int, int]:
        """(w, h) as displayed and as read_image returns it: orientations 5-8 swap the sides."""
        swap = self.orientation in (5, 6, 7, 8)
        return (self.height, self.width) if swap else (self.width, self.height)


def _exif_orientation(im) -> int:
    if im.format == "PNG":  # PIL's getexif() would decode a whole PNG to look for an eXIf chunk after its pixels
        exif = Image.Exif()
        if im.info.get("exif"):
            exif.load(im.info["exif"])
    elif im.format == "TIFF":  # the tag itself: newer Pillows drop it from getexif() once they rotate on load
        return _valid_orientation(im.tag_v2.get(ORIENTATION, 1))
    else:
        exif = im.getexif()
    return _valid_orientation(exif.get(ORIENTATION, 1))


def _valid_orientation(value) -> int:
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _bytes_per_pixel(im, raw: bytes) -> int:
    """Bytes per pixel of the array OpenCV decodes (palettes expand to BGRA, 16-bit stays 16-bit)."""
    channels, depth = max(len(im.getbands()), 4 if im.mode == "P" else 1), 1
    if im.format == "PNG" and raw[12:16] == b"IHDR":
        depth = max(1, raw[24] // 8)
    elif im.format == "TIFF":
        bits = im.tag_v2.get(258, 8)
        depth = max(1, -(-max(bits if isinstance(bits, tuple) else (bits,)) // 8))
        channels = max(channels, int(im.tag_v2.get(277, 1)))
    return channels * depth


def image_info(raw: bytes) -> ImageInfo:
    """The header of encoded image bytes (no pixels decoded). Raises PIL's UnidentifiedImageError for a format it
    does not know, ValueError for an image too large to decode, other exceptions for a damaged header."""
    try:
        im = Image.open(io.BytesIO(raw))
    except Image.DecompressionBombError as e:
        raise ValueError(one_line(e)) from None
    with im:
        w, h = (im.tag_v2.get(256), im.tag_v2.get(257)) if im.format == "TIFF" else im.size
        if not isinstance(w, int) or not isinstance(h, int):
            w, h = im.size
        info = ImageInfo(w, h, _exif_orientation(im), w * h * _bytes_per_pixel(im, raw), im.format or "")
    if info.decoded_bytes > MAX_DECODED_BYTES:
        raise ValueError(
            f"image of {w}x{h} px would take {info.decoded_bytes} bytes decoded, more than {MAX_DECODED_BYTES}"
        )
    return info


def pfm_problem(raw: bytes) -> str | None:
    """Why PFM bytes cannot hold the image their header claims (PIL does not read PFM), or None."""
    parts = raw[:64].split(maxsplit=3)
    try:
        w, h = int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return "damaged PFM header"
    channels = 3 if parts[0] == b"PF" else 1
    if w < 1 or h < 1 or w * h * channels * 4 > len(raw):
        return f"PFM header claims {w}x{h} px, more than the file's {len(raw)} bytes hold"
    return None


def apply_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """The image as an EXIF orientation (1-8) says to display it (2, 4: mirrored; 3: 180; 6, 8: 90 cw, ccw)."""
    if orientation in (5, 6, 7, 8):
        image = np.rot90(image, 1 if orientation in (5, 8) else -1)
        orientation = {5: 4, 6: 1, 7: 4, 8: 1}[orientation]  # what is left after the quarter turn: a flip or nothing
    if orientation == 2:
        image = image[:, ::-1]
    elif orientation == 3:
        image = image[::-1, ::-1]
    elif orientation == 4:
        image = image[::-1]
    return np.ascontiguousarray(image)


def _tiff_upright(raw: bytes) -> bytes:
    """TIFF bytes with the first image's orientation tag set to 1: OpenCV's TIFF decoder would rotate by itself
    (depending on its version); we rotate every format in one place instead."""
    order = {b"II": "<", b"MM": ">"}.get(raw[:2])
    if order is None or len(raw) < 16:
        return raw
    big = struct.unpack(order + "H", raw[2:4])[0] == 43  # BigTIFF: 8-byte counts and offsets
    head, count_fmt, entry, value_at = (8, "Q", 20, 12) if big else (4, "H", 12, 8)
    ifd = struct.unpack(order + ("Q" if big else "I"), raw[head : head + (8 if big else 4)])[0]
    count_size = struct.calcsize(count_fmt)
    if ifd + count_size > len(raw):
        return raw
    n = struct.unpack(order + count_fmt, raw[ifd : ifd + count_size])[0]
    for k in range(min(n, (len(raw) - ifd - count_size) // entry)):
        at = ifd + count_size + k * entry
        tag, kind = struct.unpack(order + "HH", raw[at : at + 4])
        if tag == ORIENTATION and kind == 3:  # SHORT, stored in the entry itself
            patched = bytearray(raw)
            patched[at + value_at : at + value_at + 2] = struct.pack(order + "H", 1)
            return bytes(patched)
    return raw


def _to_uint8(image: np.ndarray) -> np.ndarray:
    """16-bit, float or other integer pixels as uint8, converted a block of rows at a time (small temporaries)."""
    out = np.empty(image.shape, np.uint8)
    rows = max(1, _CONVERT_ROWS // max(1, math.prod(image.shape[1:])))
    float_scale = None
    if image.dtype.kind == "f":  # float images are usually in [0, 1]; NaN counts as 0, infinity as large
        peak = max(
            float(np.nan_to_num(image[i : i + rows].astype(np.float32)).max(initial=0.0))
            for i in range(0, len(image), rows)
        )
        float_scale = 255.0 if peak <= 1.0 else 1.0
    for start in range(0, len(image), rows):
        block = image[start : start + rows]
        if image.dtype == np.uint16:  # 65535 -> 255, rounded: floor((2x + 257) / 514) = round(x / 257)
            out[start : start + rows] = (block.astype(np.uint32) * 2 + 257) // 514
        elif float_scale is not None:
            block = np.nan_to_num(block.astype(np.float32))
            out[start : start + rows] = (block * float_scale).clip(0, 255).round()
        else:
            out[start : start + rows] = block.clip(0, 255)
    return out


def to_bgr_uint8(image: np.ndarray) -> np.ndarray:
    """Grayscale, 16-bit, float and 2- or 4-channel images as 3-channel BGR uint8."""
    if image.dtype != np.uint8:
        image = _to_uint8(image)
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    channels = image.shape[2]
    if channels in (1, 2):  # grey, or grey + alpha
        return cv2.cvtColor(np.ascontiguousarray(image[..., 0]), cv2.COLOR_GRAY2BGR)
    if channels == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    return np.ascontiguousarray(image[..., :3])


# --- truncation -------------------------------------------------------------------------------------------------


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


# --- reading ----------------------------------------------------------------------------------------------------


def header_of(raw: bytes) -> tuple[ImageInfo | None, str]:
    """(header, '') of image bytes; (None, '') when only OpenCV knows the format; (None, reason) when refused."""
    if Image is None:  # pragma: no cover
        return None, ""
    try:
        return image_info(raw), ""
    except ValueError as e:
        return None, str(e)
    except UnidentifiedImageError:
        if raw[:2] in (b"PF", b"Pf"):
            return None, pfm_problem(raw) or ""
        return None, UNREADABLE  # a format only OpenCV knows (EXR, HDR) would be decoded without bounds
    except Exception as e:  # Pillow raises many types for a damaged header; the label checker refuses it too
        return None, f"{UNREADABLE}: {one_line(e)}"[:300]


def decode_image(raw: bytes, extension: str = "") -> tuple[np.ndarray | None, str]:
    """Encoded image bytes as upright BGR uint8, or (None, reason)."""
    problem = truncation(raw, extension)
    if problem:
        return None, problem
    info, problem = header_of(raw)
    if problem:
        return None, problem
    jpeg = info.format in ("JPEG", "MPO") if info else extension in JPEG_SUFFIXES or raw[:2] == b"\xff\xd8"
    if info is None:  # Pillow absent or puzzled: OpenCV's own handling (JPEG orientation only)
        flags = cv2.IMREAD_COLOR if jpeg else cv2.IMREAD_UNCHANGED
    else:
        # JPEGs decode as colour (grey ones too, as cv2.imread does); other formats unchanged, so 16-bit, float and
        # alpha are converted here rather than by OpenCV's defaults. Orientation is ours, never the decoder's.
        flags = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION if jpeg else cv2.IMREAD_UNCHANGED
        if info.format == "TIFF" and info.orientation != 1:
            raw = _tiff_upright(raw)
    try:
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), flags)
    except cv2.error:
        image = None
    if image is None or image.size == 0:
        return None, UNREADABLE
    image = to_bgr_uint8(image)
    return (apply_orientation(image, info.orientation) if info else image), ""


def read_image_checked(path: str | Path) -> tuple[np.ndarray | None, str]:
    """Read an image as BGR uint8 (any depth or channel count, unicode paths); on failure (None, reason)."""
    try:
        raw = read_regular_file(path, MAX_IMAGE_BYTES)
    except ValueError as e:
        return None, str(e)
    except OSError as e:
        return None, f"cannot read file: {e.strerror or e}"
    if not raw:
        return None, "empty file"
    return decode_image(raw, suffix(path))


def read_image(path: str | Path) -> np.ndarray | None:
    """Read an image as 3-channel BGR uint8, or None when it is unreadable or truncated."""
    return read_image_checked(path)[0]


# --- listing ----------------------------------------------------------------------------------------------------


def list_files(folder: Path, recursive: bool = False, skipped: list | None = None) -> list[str]:
    """Sorted paths of the regular files in folder (and its subfolders when recursive); folders are never listed.

    Recursion follows symlinked subfolders (as YOLOv5's glob does) but visits each folder once, so a symlink loop
    or a second link to a folder lists nothing twice. What is passed over (FIFOs, devices, sockets, broken links,
    folders reached again) is appended to `skipped` as (path, reason) when a list is given."""
    if not recursive:
        return sorted(str(p) for p in Path(folder).iterdir() if p.is_file())
    files, seen, real, links = [], set(), [str(folder)], []
    while real or links:
        top = real.pop() if real else links.pop(0)  # the real tree first: its paths win over links into it
        try:
            st = os.stat(top)
            if (st.st_dev, st.st_ino) in seen:
                _skip(skipped, top, f"symbolic link to {os.path.realpath(top)}, a folder already listed: skipped")
                continue
            seen.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(top), key=lambda e: e.name)
        except OSError as e:
            _skip(skipped, top, f"cannot list folder: {e.strerror or e}")
            continue
        for entry in entries:
            try:
                mode = os.stat(entry.path).st_mode  # follows links
            except OSError:
                _skip(skipped, entry.path, "broken symbolic link")
                continue
            if stat.S_ISDIR(mode):
                (links if entry.is_symlink() else real).append(entry.path)
            elif stat.S_ISREG(mode):
                files.append(entry.path)
            else:
                _skip(skipped, entry.path, f"{file_kind(mode)}, not a regular file: skipped")
    return sorted(files)


def _skip(skipped: list | None, path: str, reason: str) -> None:
    if skipped is not None:
        skipped.append((path, reason))
