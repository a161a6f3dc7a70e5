"""A data YAML's `download:`: fetch its archives and unpack them with every member checked to stay inside the
dataset folder.
"""

import stat
import tarfile
import zipfile
import zlib
from pathlib import Path

from tqdm import tqdm

from utils.downloads import is_url, safe_download, url_filename
from utils.errors import DatasetError, DownloadError
from utils.log import LOGGER, PROGRESS_BAR, one_line

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
        text = one_line(spec)
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
            for m in tqdm(members, desc=f"Unzipping {Path(file).name}", unit="file", bar_format=PROGRESS_BAR):
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
            for m in tqdm(members, desc=f"Extracting {Path(file).name}", unit="file", bar_format=PROGRESS_BAR):
                # our checks come first; the 'data' filter also drops unsafe permission bits
                tf.extract(m, dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise DatasetError(f"{file} is not a valid tar archive ({one_line(e)})") from None
    return dest
