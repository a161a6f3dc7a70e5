"""Input loaders (images, folders, globs, lists, videos, streams), image reading and downloads."""

import socket
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from utils.downloads import attempt_download_weights, is_url, safe_download, url_filename
from utils.errors import DownloadError, SourceError
from utils.infer.background import in_background
from utils.infer.sources import (
    LoadImages,
    LoadStreams,
    check_source,
    is_stream,
    load_sources,
    prepare,
    read_ahead,
)


def _photo(h: int = 100, w: int = 200, seed: int = 0) -> np.ndarray:
    """A BGR image with structure (so JPEG encoding is not trivial)."""
    rng = np.random.default_rng(seed)
    image = cv2.resize(rng.integers(0, 255, (h // 10 + 1, w // 10 + 1, 3), dtype=np.uint8), (w, h))
    cv2.rectangle(image, (10, 10), (w // 2, h // 2), (0, 0, 255), -1)
    return image


def _write(path: Path, image: np.ndarray) -> Path:
    assert cv2.imwrite(str(path), image), path
    return path


def _write_video(path: Path, frames: int = 6, size: tuple[int, int] = (64, 48)) -> Path:
    """A tiny video file: mp4v in .mp4, falling back to MJPG in .avi where mp4v cannot be written."""
    for file, codec in ((path.with_suffix(".mp4"), "mp4v"), (path.with_suffix(".avi"), "MJPG")):
        writer = cv2.VideoWriter(str(file), cv2.VideoWriter_fourcc(*codec), 10, size)
        if writer.isOpened():
            for i in range(frames):
                frame = np.full((size[1], size[0], 3), 20 * i, dtype=np.uint8)
                writer.write(frame)
            writer.release()
            return file
    pytest.skip("this OpenCV build can write neither mp4v nor MJPG video")


def test_prepare_is_letterboxed_chw_rgb():
    bgr = _photo(100, 200)
    im = prepare(bgr, 64, stride=32)
    assert im.shape == (3, 32, 64) and im.dtype == np.uint8 and im.flags.c_contiguous
    # Red rectangle in BGR is channel 2; after BGR->RGB it is channel 0.
    assert im[0, 5, 5] > 200 and im[2, 5, 5] < 50


# --- LoadImages -----------------------------------------------------------------------------------------------


def test_directory_loads_supported_images_sorted(tmp_path):
    for i, name in enumerate(("b.jpg", "a.png", "c.bmp")):
        _write(tmp_path / name, _photo(seed=i))
    (tmp_path / "notes.txt").write_text("not an input")
    loader = LoadImages(tmp_path, img_size=64, stride=32)
    items = list(loader)
    assert [Path(p).name for p, *_ in items] == ["a.png", "b.jpg", "c.bmp"]
    for k, (path, im, im0, cap, log) in enumerate(items):
        assert im.shape == (3, 32, 64) and im0.shape == (100, 200, 3) and cap is None
        assert log == f"image {k + 1}/3 {path}: "


def test_glob_and_txt_list(tmp_path):
    sub = tmp_path / "imgs"
    sub.mkdir()
    for name in ("one.jpg", "two.jpg", "three.png"):
        _write(sub / name, _photo())
    assert [Path(p).name for p, *_ in LoadImages(str(sub / "*.jpg"), 64)] == ["one.jpg", "two.jpg"]
    listing = tmp_path / "list.txt"
    # Relative entries missing from the current directory resolve against the list's folder; a missing entry is
    # warned about and skipped.
    listing.write_text(f"imgs/three.png\n\n{sub / 'one.jpg'}\nimgs/gone.jpg\n")
    loader = LoadImages(listing, 64)
    assert [Path(p).name for p, *_ in loader] == ["three.png", "one.jpg"]


def test_corrupt_image_in_folder_is_skipped(tmp_path):
    _write(tmp_path / "good.jpg", _photo())
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 garbage")
    loader = LoadImages(tmp_path, 64)
    assert [Path(p).name for p, *_ in loader] == ["good.jpg"]
    assert [Path(p).name for p in loader.skipped] == ["bad.jpg"]


def test_video_file_frames_and_stride(tmp_path):
    video = _write_video(tmp_path / "clip", frames=6)
    items = list(LoadImages(video, img_size=64, stride=32))
    assert len(items) == 6
    path, im, im0, cap, log = items[2]
    assert cap is not None and im0.shape == (48, 64, 3) and im.shape == (3, 64, 64)
    assert log == f"video 1/1 (3/6) {video}: "
    assert abs(int(items[2][2].mean()) - 40) <= 3  # third frame was filled with 40
    assert len(list(LoadImages(video, img_size=64, vid_stride=2))) == 3


def test_images_come_before_videos(tmp_path):
    _write_video(tmp_path / "a_clip", frames=2)
    _write(tmp_path / "z.jpg", _photo())
    kinds = [cap is None for _, _, _, cap, _ in LoadImages(tmp_path, 64)]
    assert kinds == [True, False, False]


def _touch(path: Path) -> Path:
    path.write_text("?")
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.jpg", "not found"),
        (lambda d: d, "is empty"),
        (lambda d: _touch(d / "x.xyz"), "unsupported file type '.xyz'"),
        (lambda d: _touch(d / "readme.md").parent, "no supported images or videos"),
        (lambda d: d / "nothing" / "*.jpg", "no files match"),
    ],
)
def test_bad_sources_raise_one_line(tmp_path, make, message):
    with pytest.raises(SourceError) as info:
        load_sources(make(tmp_path), 64)
    assert message in str(info.value) and "\n" not in str(info.value)


# --- streams ------------------------------------------------------------------------------------------------------


def test_stream_classification():
    assert is_stream("0") and is_stream("rtsp://cam.local/live") and is_stream("https://host/live")
    assert not is_stream("https://host/path/bus.jpg?x=1") and not is_stream("bus.jpg")
    assert not is_stream("data/0")


def test_load_streams_reads_a_capture_until_it_ends(tmp_path):
    video = _write_video(tmp_path / "live", frames=5)
    items = list(LoadStreams(str(video), img_size=64, stride=32, timeout=10))
    assert 1 <= len(items) <= 5  # the reader keeps only the newest frame, so some may be dropped
    path, im, im0, cap, log = items[0]
    assert path == str(video) and im.shape == (3, 64, 64) and im0.shape == (48, 64, 3)


def test_read_ahead_starts_each_image_before_the_previous_is_handed_out(tmp_path):
    _write(tmp_path / "a.jpg", _photo(seed=1))
    _write(tmp_path / "b.jpg", _photo(seed=2))
    _write_video(tmp_path / "c_clip", frames=2)
    plain = [(item[0], video, index) for item, video, index in read_ahead(LoadImages(tmp_path, 64))]
    assert [(Path(p).name, video, index) for p, video, index in plain] == [
        ("a.jpg", False, 0),
        ("b.jpg", False, 1),
        ("c_clip.mp4", True, 2),
        ("c_clip.mp4", True, 2),
    ]  # the video flag and input index as read, though the loader has moved on when an item is handed out
    events = []
    for item, video, index in read_ahead(LoadImages(tmp_path, 64), lambda im: events.append(("start", im))):
        events.append(("out", item[1]))
        assert (item[0], video, index) == plain[len([e for e in events if e[0] == "out"]) - 1]
    kinds = [kind for kind, _ in events]
    assert kinds == ["start", "start", "out", "start", "out", "start", "out", "out"]  # one image ahead
    starts, outs = [im for kind, im in events if kind == "start"], [im for kind, im in events if kind == "out"]
    assert all(a is b for a, b in zip(starts, outs))  # the images started are the ones handed out, in order


def test_images_read_ahead_are_decoded_on_a_thread_of_their_own_in_order(tmp_path):
    for i in range(12):  # more than READ_AHEAD: the reader waits for the caller
        _write(tmp_path / f"{i:02d}.jpg", _photo(seed=i))
    (tmp_path / "05.jpg").write_bytes(b"not a jpeg")  # skipped with a warning, by the reader
    plain = [(item[0], item[2].sum(), index) for item, _, index in read_ahead(LoadImages(tmp_path, 64))]
    loader, readers, started = LoadImages(tmp_path, 64), [], []

    def start(im):
        started.append(im)
        readers.extend(t.name for t in threading.enumerate() if t.name == "read_ahead")

    ahead = [(item[0], item[2].sum(), index) for item, _, index in read_ahead(loader, start)]
    assert ahead == plain and len(plain) == 11 and loader.skipped == [str(tmp_path / "05.jpg")]
    assert len(started) == 11 and readers  # started while the reader thread was alive


def test_in_background_raises_its_error_in_the_caller_and_stops_with_it():
    def failing():
        yield 1
        raise SourceError("cannot read it")

    with pytest.raises(SourceError, match="cannot read it"):
        assert list(in_background(failing(), 2)) == [1]
    made = []

    def counting():
        for i in range(1000):
            made.append(i)
            yield i

    items = in_background(counting(), 2, "counting")
    assert next(items) == 0
    items.close()  # the caller stops: the thread ends rather than waiting to hand out the rest
    thread = next((t for t in threading.enumerate() if t.name == "counting"), None)
    if thread is not None:
        thread.join(timeout=5)
    assert not any(t.name == "counting" for t in threading.enumerate()) and len(made) <= 5


def test_a_live_stream_is_never_read_ahead(tmp_path):
    video = _write_video(tmp_path / "live", frames=3)
    started = []
    items = list(read_ahead(LoadStreams(str(video), img_size=64, stride=32, timeout=10), started.append))
    assert items and started == [] and all(video and index == 0 for _, video, index in items)


def test_unopenable_stream_is_one_line_error():
    with pytest.raises(SourceError, match="cannot open stream"):
        LoadStreams("rtsp://127.0.0.1:1/nothing", timeout=1)


# --- downloads ----------------------------------------------------------------------------------------------------


def _closed_port_url(path: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{path}"  # nothing listens there: refused at once


def test_url_helpers():
    assert is_url("https://a.b/c.jpg") and not is_url("c.jpg") and not is_url("rtsp://a/b")
    assert url_filename("https://a.b/x/bus%20two.jpg?s=1") == "bus two.jpg"


def test_safe_download_is_atomic(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * 5000)
    out = safe_download(src.as_uri(), tmp_path / "dl" / "copy.bin")
    assert out.read_bytes() == src.read_bytes()
    with pytest.raises(DownloadError, match="too small"):
        safe_download(src.as_uri(), tmp_path / "dl" / "small.bin", min_bytes=10_000)
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["copy.bin"]  # no partial files left


def test_offline_download_fails_in_one_line(tmp_path):
    with pytest.raises(DownloadError) as info:
        safe_download(_closed_port_url("bus.jpg"), tmp_path / "bus.jpg", timeout=5)
    assert "\n" not in str(info.value) and "cannot download" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_attempt_download_weights(tmp_path):
    weights_dir = tmp_path / "weights"
    existing = tmp_path / "mine.pt"
    existing.write_bytes(b"w")
    assert attempt_download_weights(existing, weights_dir) == existing
    # Names that are not release assets come back unchanged, for the loader to report as missing.
    assert attempt_download_weights("custom.pt", weights_dir) == Path("custom.pt")
    with pytest.raises(DownloadError, match="yolov5n.pt"):
        attempt_download_weights("yolov5n.pt", weights_dir, base_url=_closed_port_url("v7.0"), timeout=5)
    assert not (weights_dir / "yolov5n.pt").exists()
    release = tmp_path / "release"
    release.mkdir()
    (release / "yolov5n.pt").write_bytes(b"0" * 200_000)
    got = attempt_download_weights("yolov5n.pt", weights_dir, base_url=release.as_uri())
    assert got == weights_dir / "yolov5n.pt" and got.stat().st_size == 200_000
    assert attempt_download_weights("yolov5n.pt", weights_dir, base_url="http://unused") == got  # found locally


# --- issue #8: sources that used to be misread -----------------------------------------------------------------


def test_existing_file_with_glob_characters_is_that_file(tmp_path):
    _write(tmp_path / "a[1].jpg", _photo())
    _write(tmp_path / "a1.jpg", _photo())  # what the pattern a[1].jpg would match instead
    assert [Path(p).name for p, *_ in load_sources(tmp_path / "a[1].jpg", 64)] == ["a[1].jpg"]
    assert [Path(p).name for p, *_ in load_sources(tmp_path / "a[1]*.jpg", 64)] == ["a1.jpg"]  # still a glob


def test_folder_with_only_subfolders_says_so(tmp_path):
    for name in ("train", "val"):
        (tmp_path / name).mkdir()
        _write(tmp_path / name / "x.jpg", _photo())
    with pytest.raises(SourceError) as info:
        load_sources(tmp_path, 64)
    message = str(info.value)
    assert "has no files, only 2 subfolders" in message and "**/*.jpg" in message and "\n" not in message


def test_video_cut_short_is_warned_about(tmp_path, log):
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    rng = np.random.default_rng(0)
    for _ in range(20):
        writer.write(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))  # noise: frames of similar size
    writer.release()
    assert len(list(LoadImages(video, 64))) == 20 and not log.messages  # the whole file: no warning
    data = video.read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: len(data) // 2])
    read = len(list(LoadImages(cut, 64)))
    assert 0 < read < 20
    warnings = [m for m in log.messages if m.startswith("WARNING")]
    assert warnings == [
        f"WARNING: video {cut} ended early: read {read} of the 20 frames its header announces "
        "(file cut short or damaged?)"
    ]


def test_list_entries_resolve_from_the_current_directory(tmp_path, monkeypatch):
    cwd, lists = tmp_path / "work", tmp_path / "lists"
    for folder in (cwd / "imgs", lists / "imgs"):
        folder.mkdir(parents=True)
    _write(cwd / "imgs" / "a.jpg", _photo(60, 80))  # the file YOLOv5 reads
    _write(lists / "imgs" / "a.jpg", _photo(40, 50))  # a decoy beside the list
    _write(lists / "imgs" / "only_here.jpg", _photo(30, 30))  # missing from cwd: the list's folder is the fallback
    listing = lists / "list.txt"
    listing.write_text("imgs/a.jpg\nimgs/only_here.jpg\n")
    monkeypatch.chdir(cwd)
    items = list(load_sources(listing, 64))
    assert [p for p, *_ in items] == ["imgs/a.jpg", str(lists / "imgs" / "only_here.jpg")]
    assert [im0.shape[:2] for _, _, im0, _, _ in items] == [(60, 80), (30, 30)]


def test_empty_source_string_is_refused():
    with pytest.raises(SourceError, match="--source is empty"):
        load_sources("", 64)
    with pytest.raises(SourceError, match="--source is empty"):
        load_sources("  ", 64)


def test_image_too_thin_to_letterbox_is_skipped(tmp_path, log):
    _write(tmp_path / "line.png", np.full((1, 4000, 3), 100, np.uint8))  # 1 pixel high: 0 pixels at 64
    _write(tmp_path / "ok.png", np.full((2, 60, 3), 100, np.uint8))
    loader = LoadImages(tmp_path, img_size=64)
    assert [Path(p).name for p, *_ in loader] == ["ok.png"] and [Path(p).name for p in loader.skipped] == ["line.png"]
    assert (
        f"WARNING: skipping {tmp_path / 'line.png'}: 1x4000 pixels is too thin to resize to --img-size 64x64"
        in log.messages
    )


def test_list_saved_with_a_bom(tmp_path):
    image = _write(tmp_path / "a.jpg", _photo())
    listing = tmp_path / "list.txt"
    listing.write_text(f"{image}\n", encoding="utf-8-sig")  # as Windows Notepad saves UTF-8
    assert [p for p, *_ in load_sources(listing, 64)] == [str(image)]


def test_device_file_is_not_read():
    with pytest.raises(SourceError, match="/dev/null is not a regular file or folder"):
        load_sources("/dev/null", 64)


def test_check_source_lists_files_and_opens_nothing(tmp_path, log):
    _write(tmp_path / "b.jpg", _photo())
    _write(tmp_path / "a.png", _photo())
    video = _write_video(tmp_path / "clip")
    (tmp_path / "notes.txt").write_text("not a list of this folder")
    checked = check_source(tmp_path)
    assert [Path(f).name for f in checked.images] == ["a.png", "b.jpg"] and checked.videos == [str(video)]
    assert not checked.stream and check_source("0").stream  # a webcam is recognised, not opened
    assert check_source("rtsp://127.0.0.1:1/live").stream  # nothing listens there: not contacted yet
    loader = load_sources(checked, 64, stride=32)  # the checked files, not listed again
    assert isinstance(loader, LoadImages) and loader.files == checked.images + checked.videos
    assert [item[1].shape for item in loader][:2] == [(3, 32, 64), (3, 32, 64)]  # letterboxed with this stride
    assert not log.messages


def test_image_folder_as_frames_plays_in_frame_order(tmp_path):
    for name in ("f10.jpg", "f2.jpg", "f1.jpg", "g1.jpg"):
        _write(tmp_path / name, _photo(32, 48))
    names = [Path(item[0]).name for item in LoadImages(tmp_path, img_size=64)]
    assert names == ["f1.jpg", "f10.jpg", "f2.jpg", "g1.jpg"]  # plain name order, as YOLOv5 reads a folder
    names = [Path(item[0]).name for item in load_sources(str(tmp_path), img_size=64, frames=True)]
    assert names == ["f1.jpg", "f2.jpg", "f10.jpg", "g1.jpg"]  # numbered frames in number order
    listed = tmp_path / "list.txt"
    listed.write_text("f10.jpg\nf1.jpg\n")
    names = [Path(item[0]).name for item in load_sources(str(listed), img_size=64, frames=True)]
    assert names == ["f10.jpg", "f1.jpg"]  # a list keeps its own order
