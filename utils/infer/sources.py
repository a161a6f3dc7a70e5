"""Inference inputs: images, folders, globs, .txt lists, videos, webcams and network streams.

Every loader yields (path, image, original, capture, log) tuples: the letterboxed CHW RGB uint8 image,
the original BGR uint8 image, the cv2.VideoCapture for video frames (None for images) and the start of
the log line ('image 1/2 /path/bus.jpg: ').
"""

import glob
import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from utils.data.augment import letterbox
from utils.downloads import cached_download, is_url, url_filename
from utils.errors import SourceError
from utils.images import IMG_FORMATS, VID_FORMATS, list_files, read_image_checked, suffix
from utils.infer.background import in_background
from utils.log import LOGGER

STREAM_SCHEMES = ("rtsp", "rtmp", "http", "https")
READ_AHEAD = 8  # images read_ahead decodes ahead of the caller: the first ones while a runtime compiles its model

Item = tuple[str, np.ndarray, np.ndarray, "cv2.VideoCapture | None", str]


def open_capture(target: str | int) -> cv2.VideoCapture:
    """cv2.VideoCapture with OpenCV's own console warnings muted; callers report failures in one line."""
    logging = getattr(getattr(cv2, "utils", None), "logging", None)
    level = logging.getLogLevel() if logging else None
    if logging:
        logging.setLogLevel(logging.LOG_LEVEL_SILENT)
    try:
        return cv2.VideoCapture(target)
    finally:
        if logging:
            logging.setLogLevel(level)


def prepare(image: np.ndarray, img_size: int | tuple[int, int], stride: int = 32, auto: bool = True) -> np.ndarray:
    """Letterbox a BGR image and return it as a contiguous CHW RGB uint8 array."""
    boxed = letterbox(image, img_size, stride=stride, auto=auto)[0]
    return np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))


def not_regular(path: str | Path) -> str:
    """Why path cannot be read as an image file (missing, or a device, FIFO or socket that could block or never
    end), or ''. Checked with stat, which neither opens nor blocks, before any byte is read."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "file not found"
    except OSError as e:
        return f"cannot read file: {e.strerror or e}"
    return "" if stat.S_ISREG(mode) else "not a regular file (a device, FIFO or socket)"


def too_thin(shape: tuple[int, ...], img_size: int | tuple[int, int] | list[int], option: str = "--img-size") -> str:
    """Why letterboxing to img_size cannot work (a side would shrink to 0 pixels, e.g. 1x4000 at 64), or ''."""
    h, w = shape[:2]
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    r = min(size[0] / h, size[1] / w)
    if round(h * r) >= 1 and round(w * r) >= 1:
        return ""
    return f"{h}x{w} pixels is too thin to resize to {option} {size[0]}x{size[1]}"


def _short(text: str, limit: int = 120) -> str:
    """text cut to limit characters for one-line messages (paths can be thousands of characters long)."""
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _list_entries(path: Path) -> list[str]:
    """Files named in a .txt list. Relative entries resolve from the current directory, as in YOLOv5; one that is
    missing there but exists beside the list resolves from the list's folder, so lists written that way still work."""
    lines = [s.strip() for s in path.read_text(encoding="utf-8-sig", errors="replace").splitlines()]
    files = []
    for line in filter(None, lines):
        entry = Path(line).expanduser()
        if not entry.is_absolute() and not entry.exists() and (path.parent / entry).exists():
            entry = path.parent / entry
        files.append(str(entry))
    return files


def _list_dir(path: Path, source: str) -> list[str]:
    """Files directly inside a folder, sorted (not recursive); raises SourceError when it holds none."""
    files = list_files(path)
    if not files:
        folders = sum(p.is_dir() for p in path.iterdir())
        if folders:
            raise SourceError(
                f"directory {_short(source)} has no files, only {folders} subfolder"
                f"{'s' * (folders > 1)} (folders are not searched; use a glob such as "
                f"'{_short(source)}/**/*.jpg')"
            )
        raise SourceError(f"directory {_short(source)} is empty")
    return files


def _expand(source: str) -> list[str]:
    """File paths named by a file, folder, glob or .txt list; raises SourceError when there are none."""
    path = Path(source).expanduser()
    try:
        # An existing path wins over glob interpretation, so 'a[1].jpg' is that file, not a pattern.
        if path.is_dir():
            return _list_dir(path, source)
        if path.is_file():
            if suffix(path) == "txt":
                files = _list_entries(path)
                if not files:
                    raise SourceError(f"list {_short(source)} names no files")
                return files
            return [str(path)]
    except OSError as e:  # e.g. a name longer than the file system allows
        raise SourceError(f"cannot read source {_short(source)}: {e.strerror or e}") from None
    if path.exists():  # a device, FIFO or socket: reading it could block or never end
        raise SourceError(f"source {_short(source)} is not a regular file or folder")
    if any(c in source for c in "*?["):
        matches = sorted(glob.glob(str(path), recursive=True))
        if not matches:
            raise SourceError(f"no files match {_short(source)}")
        files = _unique_files(f for f in matches if os.path.isfile(f))
        if not files:
            raise SourceError(f"{_short(source)} matches only folders ({len(matches)}), no files")
        return files
    raise SourceError(f"source not found: {_short(source)}")


def _unique_files(files) -> list[str]:
    """files without repeats of one file: '**' follows symlinked folders, and a symlink loop would name every
    image once per level (41 times), so each real file keeps only its first path."""
    seen, unique = set(), []
    for f in files:
        real = os.path.realpath(f)
        if real not in seen:
            seen.add(real)
            unique.append(f)
    return unique


@dataclass
class Source:
    """A checked --source: a stream or webcam to open, or the image and video files it names (in that order)."""

    text: str
    stream: bool = False
    images: list[str] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    listed: bool = False  # the files come from a .txt list, in the list's own order


def _media_files(source: str) -> Source:
    """The supported images and videos a file, folder, glob or .txt list names; SourceError when there are none."""
    files = _expand(source)
    kinds = [suffix(f) for f in files]
    images = [f for f, k in zip(files, kinds) if k in IMG_FORMATS]
    videos = [f for f, k in zip(files, kinds) if k in VID_FORMATS]
    problems = {f: not_regular(f) for f in images + videos}
    missing = {f for f, problem in problems.items() if problem}
    for f in sorted(missing):
        LOGGER.warning("WARNING: skipping %s: %s", f, problems[f])
    images = [f for f in images if f not in missing]
    videos = [f for f in videos if f not in missing]
    if not images and not videos:
        formats = f"images are {', '.join(IMG_FORMATS)}; videos are {', '.join(VID_FORMATS)}"
        if missing:
            found = any(problems[f] != "file not found" for f in missing)
            what = "are regular files (not devices, FIFOs or sockets) that exist" if found else "exist"
            raise SourceError(f"none of the {len(files)} files listed in {source} {what}")
        if len(files) == 1 and str(files[0]) == str(Path(source).expanduser()):
            kind = f"'.{kinds[0]}'" if kinds[0] else "(no extension)"
            raise SourceError(f"unsupported file type {kind} for {source}: {formats}")
        raise SourceError(f"no supported images or videos in {source} ({len(files)} files): {formats}")
    listed = Path(source).expanduser().is_file() and suffix(source) == "txt"
    return Source(source, images=images, videos=videos, listed=listed)


def frame_order(files: list[str]) -> list[str]:
    """Image files in frame order: by name, with runs of digits compared as numbers ('f2.jpg' before 'f10.jpg'), so
    a folder of numbered frames plays in order whether or not its numbers are zero-padded."""

    def key(path: str) -> list:
        return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path) if part]

    return sorted(files, key=key)


class LoadImages:
    """Images and video files from a path, folder, glob or .txt list, one frame at a time. With frames=True (tracking)
    the images are one sequence of frames, read in frame_order; a .txt list keeps the order it gives."""

    def __init__(
        self,
        source: "str | Path | Source",
        img_size: int | tuple[int, int] = 640,
        stride: int = 32,
        auto: bool = True,
        vid_stride: int = 1,
        frames: bool = False,
    ):
        checked = source if isinstance(source, Source) else _media_files(str(source))
        images, videos = checked.images, checked.videos
        if frames and not checked.listed:
            images = frame_order(images)
        self.files = images + videos
        self.video_flag = [False] * len(images) + [True] * len(videos)
        self.img_size, self.stride, self.auto = img_size, stride, auto
        self.vid_stride = max(int(vid_stride), 1)
        self.mode = "image"
        self.cap: cv2.VideoCapture | None = None
        self.index = -1  # position in self.files of the file being read
        self.frame = 0
        self.frames = 0
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.files)

    def _open_video(self, path: str) -> bool:
        self.cap = open_capture(path)
        if not self.cap.isOpened():
            return False
        self.frame = 0
        self.frames = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT) // self.vid_stride)
        return True

    def _next_frame(self) -> np.ndarray | None:
        """The next frame of the open video, honouring vid_stride; None at its end."""
        for _ in range(self.vid_stride - 1):
            if not self.cap.grab():
                return None
        ok, frame = self.cap.read()
        return frame if ok and frame is not None else None

    def _read(self, path: str) -> np.ndarray | None:
        """The BGR image at path, or None (skipped with a warning) when it cannot be read or letterboxed."""
        reason = not_regular(path)  # again: the file may have been replaced by a FIFO since it was listed
        image, reason = read_image_checked(path) if not reason else (None, reason)
        if image is not None and (thin := too_thin(image.shape, self.img_size)):
            image, reason = None, thin
        if image is None:
            LOGGER.warning("WARNING: skipping %s: %s", path, reason)
            self.skipped.append(path)
        return image

    def _frames(self, path: str, index: int, n: int) -> Iterator[Item]:
        """The frames of one video file (skipped with a warning when it cannot be opened or read)."""
        reason = not_regular(path) or ("" if self._open_video(path) else "cannot open video")
        if reason:
            LOGGER.warning("WARNING: skipping %s: %s", path, reason)
            self.skipped.append(path)
            return
        expected = self.frames  # from the container's header
        try:
            while (frame := self._next_frame()) is not None:
                self.frame += 1
                self.frames = max(self.frames, self.frame)  # some containers under-report their length
                log = f"video {index + 1}/{n} ({self.frame}/{self.frames}) {path}: "
                yield path, prepare(frame, self.img_size, self.stride, self.auto), frame, self.cap, log
            if self.frame == 0:
                LOGGER.warning("WARNING: skipping %s: no frames could be read", path)
                self.skipped.append(path)
            elif self.frame < expected:
                LOGGER.warning(
                    "WARNING: video %s ended early: read %d of the %d frames its header announces "
                    "(file cut short or damaged?)",
                    path,
                    self.frame,
                    expected,
                )
        finally:
            self.cap.release()

    def __iter__(self) -> Iterator[Item]:
        n = len(self.files)
        for index, (path, is_video) in enumerate(zip(self.files, self.video_flag)):
            self.index = index
            if is_video:
                self.mode = "video"
                yield from self._frames(path, index, n)
                continue
            self.mode, self.cap = "image", None
            image = self._read(path)
            if image is not None:
                log = f"image {index + 1}/{n} {path}: "
                yield path, prepare(image, self.img_size, self.stride, self.auto), image, None, log


class LoadStreams:
    """One webcam (index) or network stream read by a thread that keeps only the newest frame."""

    def __init__(
        self,
        source: str,
        img_size: int | tuple[int, int] = 640,
        stride: int = 32,
        auto: bool = True,
        vid_stride: int = 1,
        timeout: float = 30.0,
    ):
        self.source = str(source)
        self.img_size, self.stride, self.auto = img_size, stride, auto
        self.vid_stride = max(int(vid_stride), 1)
        self.timeout = timeout
        self.mode = "stream"
        target = int(self.source) if self.source.isnumeric() else self.source
        self.cap = open_capture(target)
        if not self.cap.isOpened():
            raise SourceError(f"cannot open stream {self.source}")
        self.fps = self.cap.get(cv2.CAP_PROP_FPS) or 30.0
        ok, frame = self.cap.read()
        if not ok or frame is None:
            self.cap.release()
            raise SourceError(f"stream {self.source} gives no frames")
        self._frame, self._count, self._done = frame, 1, False
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._reader, daemon=True)
        self._thread.start()

    def _reader(self) -> None:
        """Grab frames as they arrive; decode every vid_stride-th and keep it as the newest. Owns the capture."""
        n = 0
        try:
            while not self._stop.is_set() and self.cap.grab():
                n += 1
                if n % self.vid_stride:
                    continue
                ok, frame = self.cap.retrieve()
                if not ok:
                    break
                with self._lock:
                    self._frame, self._count = frame, self._count + 1
                    self._lock.notify_all()
        finally:
            self.cap.release()  # here, not in close(): releasing while grab() runs in this thread is unsafe
            with self._lock:
                self._done = True
                self._lock.notify_all()

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[Item]:
        seen = 0
        try:
            while True:
                with self._lock:
                    # Wait for a frame newer than the last one yielded, so no frame is processed twice.
                    self._lock.wait_for(lambda last=seen: self._count > last or self._done, timeout=self.timeout)
                    if self._count <= seen:
                        if not self._done:
                            LOGGER.warning(
                                "WARNING: stream %s sent no frame for %.0fs, stopping", self.source, self.timeout
                            )
                        return
                    frame, seen = self._frame, self._count
                yield (
                    self.source,
                    prepare(frame, self.img_size, self.stride, self.auto),
                    frame,
                    None,
                    f"{self.source}: ",
                )
        finally:
            self.close()

    def close(self) -> None:
        """Stop the reader thread, which then releases the capture."""
        self._stop.set()
        self._thread.join(timeout=5)


def is_stream(source: str) -> bool:
    """Webcam index or a stream URL (a URL that does not end in an image or video file name)."""
    if source.isnumeric():
        return True
    return is_url(source, STREAM_SCHEMES) and suffix(url_filename(source)) not in IMG_FORMATS + VID_FORMATS


def check_source(source: str | Path) -> Source:
    """Check a --source cheaply, before any model is loaded: files are listed, URLs of files downloaded to a
    temporary folder; streams are only recognised (opened by load_sources). Raises SourceError."""
    source = str(source)
    if not source.strip():
        raise SourceError("--source is empty: give a file, folder, glob, .txt list, video, webcam index or URL")
    if is_stream(source):
        return Source(source, stream=True)
    if is_url(source):
        source = str(cached_download(source))
    return _media_files(source)


def load_sources(
    source: str | Path | Source,
    img_size: int | tuple[int, int] = 640,
    stride: int = 32,
    auto: bool = True,
    vid_stride: int = 1,
    frames: bool = False,
) -> "LoadImages | LoadStreams":
    """The loader for a --source (a string, or one check_source already checked); frames=True reads its images as
    one sequence of frames (see LoadImages)."""
    checked = source if isinstance(source, Source) else check_source(source)
    if checked.stream:
        return LoadStreams(checked.text, img_size, stride, auto, vid_stride)
    return LoadImages(checked, img_size, stride, auto, vid_stride, frames)


def read_ahead(loader: "LoadImages | LoadStreams", start=None) -> Iterator[tuple[Item, bool, int]]:
    """Each item of loader with whether it is a video frame and the input's index in the loader, both taken as it is
    read. Given start (a callable taking the letterboxed image), each item is started as it is read and handed out
    once the next one has been read and started: a runtime that runs two inputs at once (OpenVINO's streams) then
    runs them side by side while this thread decodes and writes. A live stream is never read ahead: its newest
    frame is the one wanted, and a frame held back would lag. Images (not videos, whose capture the caller reads)
    read ahead are decoded on a thread of their own, up to READ_AHEAD of them: the first ones while the runtime
    compiles its model, the others beside this thread's NMS and writing."""
    ahead, pending = start is not None and loader.mode != "stream", None
    images_only = ahead and not any(getattr(loader, "video_flag", [True]))
    reads = _reads(loader)
    for read in in_background(reads, READ_AHEAD, "read_ahead") if images_only else reads:
        if not ahead:
            yield read
            continue
        start(read[0][1])
        if pending is not None:
            yield pending
        pending = read
    if pending is not None:
        yield pending


def _reads(loader: "LoadImages | LoadStreams") -> Iterator[tuple[Item, bool, int]]:
    """read_ahead's (item, is a video frame, input index) of each item of loader."""
    for item in loader:
        yield item, loader.mode != "image", getattr(loader, "index", 0)
