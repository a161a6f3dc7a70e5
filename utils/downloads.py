"""Downloads with urllib: official YOLOv5, YOLOv8, YOLO11 and YOLO26 weights from their GitHub releases, images
given as URLs."""

import hashlib
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from utils.errors import DownloadError
from utils.files import REPO_ROOT, resolve_bare_name
from utils.log import LOGGER

GITHUB_RELEASE = "https://github.com/ultralytics/yolov5/releases/download/v7.0"
# Release assets this code can run: the P5 and P6 detection models (not -seg or -cls).
RELEASE_WEIGHTS = re.compile(r"yolov5[nsmlx]6?\.pt")
# The anchor-free detection models, published by the `ultralytics` package in its assets repository; YOLO26 came
# with release v8.4.0, YOLOv8 and YOLO11 are in v8.3.0.
ASSETS_RELEASE = "https://github.com/ultralytics/assets/releases/download"
ANCHOR_FREE_WEIGHTS = {
    re.compile(r"(yolov8|yolo11)[nsmlx]\.pt"): f"{ASSETS_RELEASE}/v8.3.0",
    re.compile(r"yolo26[nsmlx]\.pt"): f"{ASSETS_RELEASE}/v8.4.0",
}
WEIGHTS_DIR = REPO_ROOT / "weights"


def is_url(text: str | Path, schemes: tuple[str, ...] = ("http", "https")) -> bool:
    """True when text is a URL with one of the given schemes and a host."""
    parsed = urllib.parse.urlparse(str(text))
    return parsed.scheme in schemes and bool(parsed.netloc)


def url_filename(url: str) -> str:
    """The file name a URL points at, without its query string ('https://x/a/bus.jpg?s=1' -> 'bus.jpg')."""
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name


def url_cache_file(url: str, folder: str | Path | None = None) -> Path:
    """Where an image URL is cached: <temp>/yolo_downloads/<hash of the whole URL>/<its file name>.

    The folder is keyed on the whole URL (query string included), so two URLs whose files share a name never
    share a cache entry; the file keeps its own name, so outputs are still named after it (bus.jpg)."""
    name = url_filename(url)
    if name in ("", ".", ".."):
        name = "download"
    key = hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return Path(folder or Path(tempfile.gettempdir()) / "yolo_downloads") / key / name


def cached_download(url: str, folder: str | Path | None = None) -> Path:
    """The cached copy of url (see url_cache_file), downloaded first when absent; DownloadError on failure."""
    file = url_cache_file(url, folder)
    if not file.is_file():
        safe_download(url, file)
    return file


def safe_download(url: str, file: str | Path, timeout: float = 30.0, min_bytes: int = 1) -> Path:
    """Download url to file atomically (a temporary file in the same folder, then a rename); return file.

    Raises DownloadError with a one-line message when offline, on HTTP errors, timeouts or a short file.
    """
    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    LOGGER.info("Downloading %s to %s ...", url, file)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".part", dir=file.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            request = urllib.request.Request(url, headers={"User-Agent": "yolo-detect"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                while chunk := response.read(1 << 20):
                    f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        size = Path(tmp).stat().st_size
        if size < min_bytes:
            raise DownloadError(f"download of {url} is too small ({size} bytes < {min_bytes}): not the expected file")
        os.replace(tmp, file)
    except DownloadError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except urllib.error.HTTPError as e:
        Path(tmp).unlink(missing_ok=True)
        raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as e:
        Path(tmp).unlink(missing_ok=True)
        reason = getattr(e, "reason", None) or e
        raise DownloadError(f"cannot download {url}: {reason} (offline? place the file at {file} yourself)") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return file


def attempt_download_weights(
    weights: str | Path, weights_dir: str | Path | None = None, base_url: str = GITHUB_RELEASE, timeout: float = 30.0
) -> Path:
    """Path to a weights file or export: as given if it exists; a bare name missing here from weights_dir (with a
    log line), downloaded from the release when it is an official asset. weights_dir defaults to WEIGHTS_DIR as it
    is when called (tests point it at a temporary folder).

    A path with a folder part (`/some/dir/yolov5n.pt`) is never swapped for weights/yolov5n.pt: it is returned
    as given when missing, so the loader reports it as not found. So are other missing names.
    """
    path, weights_dir = Path(weights), Path(WEIGHTS_DIR if weights_dir is None else weights_dir)
    found = resolve_bare_name(path, weights_dir, "weights")
    if found is not None:
        return found
    release = release_folder(path.name, base_url) if str(path) == path.name else None
    if release is None:
        return path
    return safe_download(f"{release.rstrip('/')}/{path.name}", weights_dir / path.name, timeout, 100_000)


def release_folder(name: str, base_url: str = GITHUB_RELEASE) -> str | None:
    """The release URL an official weights name downloads from, or None for other names. A base_url other than
    YOLOv5's release (a mirror, a test server) serves every official name."""
    if RELEASE_WEIGHTS.fullmatch(name):
        return base_url
    for pattern, release in ANCHOR_FREE_WEIGHTS.items():
        if pattern.fullmatch(name):
            return release if base_url == GITHUB_RELEASE else base_url
    return None
