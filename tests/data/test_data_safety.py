"""Issue 16, the dataset side: a data YAML never deletes or writes into an existing dataset, hostile files (YAML alias
bombs, oversized labels, crafted label caches, PNG bombs, FIFOs, /dev/zero) are refused or skipped within bounds,
missing --data/--hyp paths are never swapped for files in data/, and the reader agrees with the label checker (EXIF
orientation of every format, --cache disk after an image changes, symlinked subfolders and loops)."""

import hashlib
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from PIL import Image, ImageOps
from test_datasets import grey, make_dataset

from utils.data import config
from utils.data.cache import undone_on_failure
from utils.data.config import load_data_config
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import load_hyp
from utils.errors import DatasetError
from utils.images import read_image, read_image_checked

ROOT = Path(__file__).resolve().parents[2]
LABEL = "0 0.5 0.5 0.2 0.2\n"
pytestmark = pytest.mark.usefixtures("cache_dir")  # label and image caches in a per-test folder


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def warnings_of(log) -> list[str]:
    return [r.getMessage() for r in log.records if r.levelno == logging.WARNING]


def run_bounded(imports: str, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, after `imports`, with 2 GiB more address space than the imports took and a
    timeout: a hostile file that would exhaust memory or block ends the child, never this test session. The code
    may call peak_kb(): the child's own peak resident memory (VmHWM; ru_maxrss would include this process's)."""
    prelude = textwrap.dedent("""
        import re, resource

        def status(key):
            return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

        def peak_kb():
            return status("VmHWM")

    """)
    limit = "resource.setrlimit(resource.RLIMIT_AS, ((status('VmSize') << 10) + (2 << 30),) * 2)\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(imports) + limit + textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ---------------------------------------------------------------------------------------------------------------------
# 1. `generate: shapes` only ever writes into an absent or empty folder


@pytest.fixture
def small_generator(monkeypatch):
    """generate_shapes as load_data_config calls it (root only), making a tiny set; the calls are recorded."""
    import utils.data.shapes

    real, calls = utils.data.shapes.generate_shapes, []
    monkeypatch.setattr(utils.data.shapes, "generate_shapes", lambda root: calls.append(root) or real(root, 4, 2, 64))
    return calls


def test_split_typo_with_generate_leaves_the_dataset_untouched(tmp_path, small_generator):
    root = tmp_path / "mydata"
    make_dataset(root, {"a.jpg": grey(), "b.jpg": grey()}, {"a": LABEL}, split="train")
    make_dataset(root, {"c.jpg": grey()}, {"c": LABEL}, split="val")
    before = tree_hashes(root)
    file = write_yaml(
        tmp_path / "d.yaml",
        {"path": str(root), "train": "images/train", "val": "images/vall", "names": ["a"], "generate": "shapes"},
    )
    with pytest.raises(DatasetError, match="only writes into an absent or empty folder") as e:
        load_data_config(file)
    assert str(root) in str(e.value) and "\n" not in str(e.value)
    assert tree_hashes(root) == before and small_generator == []  # nothing deleted, nothing written


def test_generate_into_absent_or_empty_root_only(tmp_path, small_generator):
    base = {"train": "images/train", "val": "images/val", "names": ["a", "b", "c", "d", "e"], "generate": "shapes"}
    (tmp_path / "empty").mkdir()
    for name in ("absent", "empty"):
        cfg = load_data_config(write_yaml(tmp_path / f"{name}.yaml", {**base, "path": str(tmp_path / name)}))
        assert len(list(Path(cfg["val"]).glob("*.jpg"))) == 2
    (tmp_path / "file").write_text("mine")
    with pytest.raises(DatasetError, match="not empty"):
        load_data_config(write_yaml(tmp_path / "f.yaml", {**base, "path": str(tmp_path / "file")}))
    assert (tmp_path / "file").read_text() == "mine" and len(small_generator) == 2


def test_shapes_command_refuses_a_non_empty_folder(tmp_path, monkeypatch, log):
    """python -m utils.data.shapes --root <a folder of photos>: one ERROR line, exit 1, the photos untouched."""
    import utils.data.shapes
    from utils.cli import run_cli

    root = tmp_path / "photos"
    (root / "images" / "train").mkdir(parents=True)
    (root / "images" / "train" / "holiday.jpg").write_bytes(b"my photo")
    before = tree_hashes(root)
    argv = ["utils.data.shapes", "--root", str(root), "--n-train", "2", "--n-val", "2", "--img", "64"]
    monkeypatch.setattr(sys, "argv", argv)
    assert run_cli(utils.data.shapes.main) == 1
    (error,) = [r.getMessage() for r in log.records if r.levelno >= logging.ERROR]
    assert error.startswith("ERROR:") and str(root) in error and "\n" not in error
    assert tree_hashes(root) == before


# ---------------------------------------------------------------------------------------------------------------------
# 5. bounds: YAML alias bombs, names/nc, oversized label files, crafted label caches, image bombs


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def test_data_yaml_alias_bomb_is_one_line_within_bounds(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("train: x\n" + billion_laughs() + "names: *i\n")  # str() of each name expands 9**9 leaves
    assert len(bomb.read_bytes()) < 800
    out = run_bounded(
        "from utils.data.config import DatasetError, load_data_config\n",
        f"""
        before = peak_kb()
        try:
            load_data_config({str(bomb)!r})
        except DatasetError as e:
            print("refused", peak_kb() - before, "|", e)
        """,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    word, grown_kb, _, message = out.stdout.strip().split(" ", 3)
    assert word == "refused" and "aliases" in message and int(grown_kb) < 50_000


def test_hyp_aliases_are_refused(tmp_path):
    hyp = load_hyp(ROOT / "data" / "hyp.scratch.yaml")
    lines = [f"{k}: {v}" for k, v in hyp.items() if k not in ("lr0", "lrf")]
    file = tmp_path / "hyp.yaml"
    file.write_text("\n".join([*lines, "lr0: &rate 0.01", "lrf: *rate"]) + "\n")  # valid values, via an alias
    with pytest.raises(DatasetError, match="aliases") as e:
        load_hyp(file)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "names, message",
    [
        (["a", ["b", "c"]], r"names\[1\] must be a class name"),
        ({0: "a", 1: {"x": 1}}, r"names\[1\] must be a class name"),
        (["a", None], r"names\[1\] must be a class name"),
    ],
)
def test_names_must_be_a_flat_list_of_names(tmp_path, names, message):
    make_dataset(tmp_path, {"a.jpg": grey()}, {}, split="x")
    file = write_yaml(tmp_path / "d.yaml", {"path": str(tmp_path), "train": "images", "val": "images", "names": names})
    with pytest.raises(DatasetError, match=message) as e:
        load_data_config(file)
    assert "\n" not in str(e.value)


def test_too_many_names_without_nc():
    # what load_data_config does with the names of a YAML without 'nc' (a 100001-name YAML takes seconds to parse)
    with pytest.raises(DatasetError, match="more than 100000 classes"):
        config._names_list(["c"] * 100_001, None, Path("d.yaml"))


def test_label_file_over_10_mb_is_skipped_before_reading(tmp_path, log):
    images = make_dataset(tmp_path, {"big.jpg": grey(), "ok.jpg": grey()}, {"ok": LABEL})
    big = tmp_path / "labels" / "train" / "big.txt"
    big.write_text(LABEL * (11_000_000 // len(LABEL)))  # valid rows, 11 MB
    ds = LoadImagesAndLabels(images, img_size=64)
    assert [Path(f).name for f in ds.im_files] == ["ok.jpg"]
    (warning,) = warnings_of(log)
    assert "big.jpg" in warning and "more than 10485760: not read" in warning


def _cache_of(images: Path, cache_dir: Path) -> Path:
    LoadImagesAndLabels(images, img_size=64)
    (file,) = cache_dir.glob("*.yolo-labels.npz")
    return file


def test_crafted_cache_naming_other_files_is_rechecked(tmp_path, cache_dir, log):
    images = make_dataset(tmp_path, {"a.jpg": grey()}, {"a": LABEL})
    file = _cache_of(images, cache_dir)
    with np.load(file, allow_pickle=False) as z:
        cache = {k: z[k] for k in z.files}
    cache["im_files"] = np.array(["/dev/zero.jpg"])  # the right hash, someone else's image list
    np.savez(file, **cache)
    log.clear()
    ds = LoadImagesAndLabels(images, img_size=64)
    assert ds.im_files == [str(images / "a.jpg")] and "ignoring label cache" in log.text


def test_compressed_cache_member_is_not_inflated(tmp_path, cache_dir, log):
    images = make_dataset(tmp_path, {"a.jpg": grey()}, {"a": LABEL})
    file = _cache_of(images, cache_dir)
    with np.load(file, allow_pickle=False) as z:
        cache = {k: z[k] for k in z.files}
    cache["labels"] = np.zeros((3_000_000, 5), np.float32)  # 60 MB of zeros, a few hundred KB deflated
    np.savez_compressed(file, **cache)
    assert file.stat().st_size < 1_000_000
    log.clear()
    ds = LoadImagesAndLabels(images, img_size=64)
    assert [len(lb) for lb in ds.labels] == [1] and "ignoring label cache" in log.text


def test_file_under_our_cache_name_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    images = make_dataset(tmp_path / "ds", {"a.jpg": grey()}, {"a": LABEL})
    mine = tmp_path / "ds" / "labels" / "train.yolo-labels.npz"
    mine.write_text("my notes, unluckily named")
    LoadImagesAndLabels(images, img_size=64)
    assert mine.read_text() == "my notes, unluckily named"
    assert len(list((tmp_path / "xdg" / "yolo").glob("*.yolo-labels.npz"))) == 1


def png_bomb(path: Path, side: int = 9000) -> Path:
    """A 16-bit RGBA PNG of side x side pixels (648 MB decoded) in under 3 MB of zeros."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row = zlib.compressobj(1), b"\0" * (1 + side * 8)
    idat = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


@pytest.mark.slow
def test_png_bomb_is_refused_from_its_header(tmp_path):
    bomb = png_bomb(tmp_path / "bomb.png")
    assert bomb.stat().st_size < 3_000_000
    out = run_bounded(
        "from utils.images import read_image_checked\n",
        f"""
        before = peak_kb()
        image, reason = read_image_checked({str(bomb)!r})
        print(image is None, peak_kb() - before, "|", reason)
        """,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    refused, grown_kb, _, reason = out.stdout.strip().split(" ", 3)
    assert refused == "True" and "decoded" in reason and int(grown_kb) < 100_000


# ---------------------------------------------------------------------------------------------------------------------
# 7. a missing --data / --hyp path is never swapped for the same-named file in data/


def test_missing_data_path_is_not_swapped_for_data_folder_file(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(config, "download_dataset", lambda *a: calls.append(a))
    for given in (tmp_path / "nowhere" / "coco128.yaml", tmp_path / "coco128"):
        with pytest.raises(DatasetError, match="not found") as e:
            load_data_config(given)
        assert str(given) in str(e.value) and "\n" not in str(e.value)
    assert "pass the bare name coco128.yaml" in str(e.value)
    assert calls == []  # data/coco128.yaml was not read: no download of its dataset started


def test_missing_hyp_path_is_not_swapped(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match="not found"):
        load_hyp(tmp_path / "x" / "hyp.scratch.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError, match="not found"):
        load_hyp("data/hyp.scratch.yaml")  # a folder part, relative to here: no data/ here


def test_bare_names_resolve_in_data_with_a_log_line(tmp_path, monkeypatch, log):
    monkeypatch.chdir(tmp_path)
    assert load_hyp("hyp.scratch.yaml")["lr0"] == load_hyp(ROOT / "data" / "hyp.scratch.yaml")["lr0"]
    assert str(ROOT / "data" / "hyp.scratch.yaml") in log.text
    log.clear()
    mine = {**load_hyp(ROOT / "data" / "hyp.scratch.yaml"), "lr0": 0.5}
    write_yaml(tmp_path / "hyp.scratch.yaml", mine)  # a file here wins over data/, silently
    assert load_hyp("hyp.scratch.yaml")["lr0"] == 0.5 and "using" not in log.text


# ---------------------------------------------------------------------------------------------------------------------
# 10a. EXIF orientation: the reader applies it for every format that carries it, and agrees with the label checker


def oriented(path: Path, orientation: int, fmt: str) -> np.ndarray:
    """Save a 20x60 image with a white strip on its left, tagged with an EXIF orientation; returns its BGR pixels."""
    pixels = np.zeros((20, 60, 3), np.uint8)
    pixels[:, :10] = 255
    pixels[:5, 10:20] = (0, 0, 255)  # a red mark so that mirrored and rotated differ
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels[..., ::-1]).save(
        path, format=fmt, exif=exif, **({"lossless": True} if fmt == "WEBP" else {})
    )
    return pixels


@pytest.mark.parametrize("fmt, ext", [("PNG", "png"), ("WEBP", "webp"), ("TIFF", "tif")])
def test_orientation_of_png_webp_tiff_applied_as_the_checker_sees_it(tmp_path, fmt, ext):
    (tmp_path / "images").mkdir()
    oriented(tmp_path / "images" / f"rot.{ext}", 6, fmt)  # stored sideways: displayed turned 90 degrees clockwise
    out = read_image(tmp_path / "images" / f"rot.{ext}")
    assert out.shape == (60, 20, 3)
    assert out[:5].mean() > 200 and out[20:].mean() < 50  # the white strip is now on top
    ds = LoadImagesAndLabels(tmp_path / "images", img_size=60)
    assert ds.shapes.tolist() == [[20, 60]]  # (w, h) as displayed, the very shape the reader returns
    assert ds.load_image(0)[1] == (60, 20)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_orientation_matches_pillow(tmp_path, orientation):
    file = tmp_path / "o.png"
    oriented(file, orientation, "PNG")
    with Image.open(file) as im:
        expected = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))[..., ::-1]
    np.testing.assert_array_equal(read_image(file), expected)


def test_jpeg_orientation_still_matches_opencv(tmp_path):
    for orientation in (1, 3, 6, 8):
        file = tmp_path / f"o{orientation}.jpg"
        oriented(file, orientation, "JPEG")
        np.testing.assert_array_equal(read_image(file), cv2.imread(str(file)))


# ---------------------------------------------------------------------------------------------------------------------
# 10b. --cache disk: never beside the images, rebuilt when an image changes


def test_disk_cache_follows_a_replaced_image(tmp_path, cache_dir):
    old = np.random.default_rng(1).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    images = make_dataset(tmp_path, {"a.png": old}, {"a": LABEL})
    first = LoadImagesAndLabels(images, img_size=64, cache="disk")
    np.testing.assert_array_equal(first.load_image(0)[0], old)
    new = 255 - old
    assert cv2.imwrite(str(images / "a.png"), new)
    st = (images / "a.png").stat()
    os.utime(images / "a.png", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # even within one clock tick
    second = LoadImagesAndLabels(images, img_size=64, cache="disk")
    np.testing.assert_array_equal(second.load_image(0)[0], new)
    assert len(list(Path(second.npy_files[0]).parent.glob("*.npy"))) == 1  # the stale copy is gone


def test_disk_cache_never_uses_or_writes_over_a_user_file(tmp_path, cache_dir):
    images = make_dataset(tmp_path, {"a.png": grey(), "b.png": grey()}, {"a": LABEL, "b": LABEL})
    np.save(images / "a.npy", np.zeros((48, 64, 3), np.uint8))  # the user's own arrays beside the images
    (images / "b.npy").write_bytes(b"my notes")
    before = tree_hashes(images)
    ds = LoadImagesAndLabels(images, img_size=64, cache="disk")
    assert ds.cache_mode == "disk" and tree_hashes(images) == before
    assert all(str(cache_dir) in f for f in ds.npy_files)
    np.testing.assert_array_equal(ds.load_image(0)[0], grey())  # the image's pixels, not the user's a.npy


def test_caches_made_in_a_failed_block_are_removed_and_older_ones_kept(tmp_path, cache_dir):
    """undone_on_failure (train.py's set-up runs in it): the label cache and --cache disk folder a failing block
    made are removed; the same caches, made by a block that succeeded, survive a later failure."""
    images = make_dataset(tmp_path, {"a.png": grey()}, {"a": LABEL})
    with pytest.raises(RuntimeError), undone_on_failure():
        LoadImagesAndLabels(images, img_size=64, cache="disk")
        assert len(list(cache_dir.iterdir())) == 2  # the .yolo-labels.npz and the .yolo-images folder
        raise RuntimeError("the val split failed")
    assert list(cache_dir.iterdir()) == []
    with undone_on_failure():
        LoadImagesAndLabels(images, img_size=64, cache="disk")
    kept = tree_hashes(cache_dir)
    with pytest.raises(RuntimeError), undone_on_failure():
        LoadImagesAndLabels(images, img_size=64, cache="disk")
        raise RuntimeError("the val split failed")
    assert tree_hashes(cache_dir) == kept and len(kept) == 3


def test_damaged_disk_cache_file_is_not_used(tmp_path, cache_dir):
    pixels = np.random.default_rng(2).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    images = make_dataset(tmp_path, {"a.png": pixels}, {"a": LABEL})
    ds = LoadImagesAndLabels(images, img_size=64, cache="disk")
    np.save(ds.npy_files[0], np.zeros((10, 10, 3), np.uint8))  # not this image's shape
    np.testing.assert_array_equal(ds.load_image(0)[0], pixels)


# ---------------------------------------------------------------------------------------------------------------------
# 10c. symlinked subfolders are followed once; loops list nothing twice


def test_symlinked_subfolder_followed_and_loop_listed_once(tmp_path, log):
    images = make_dataset(tmp_path / "ds", {"a.jpg": grey()}, {"a": LABEL})
    extra = make_dataset(tmp_path / "more", {"b.jpg": grey()}, {"b": LABEL})
    (images / "more").symlink_to(extra, target_is_directory=True)
    (tmp_path / "ds" / "labels" / "train" / "more").symlink_to(extra.parents[1] / "labels" / "train")
    (images / "loop").symlink_to(images, target_is_directory=True)  # images/train/loop -> images/train
    ds = LoadImagesAndLabels(images, img_size=64)
    assert sorted(Path(f).name for f in ds.im_files) == ["a.jpg", "b.jpg"]
    assert [len(lb) for lb in ds.labels] == [1, 1]
    assert any("loop" in w and "already listed" in w for w in warnings_of(log))


# ---------------------------------------------------------------------------------------------------------------------
# 10d. FIFOs and devices are skipped with a warning, never opened


@pytest.mark.slow
def test_fifo_and_device_in_a_folder_or_list_are_skipped(tmp_path):
    images = make_dataset(tmp_path, {"a.jpg": grey()}, {"a": LABEL})
    os.mkfifo(images / "pipe.jpg")
    (images / "zero.jpg").symlink_to("/dev/zero")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{images / 'a.jpg'}\n{images / 'pipe.jpg'}\nimages/train/zero.jpg\n/dev/zero\n")
    out = run_bounded(
        "from utils.data.dataset import LoadImagesAndLabels\n",
        f"""
        for source in ({str(images)!r}, {str(listing)!r}):
            ds = LoadImagesAndLabels(source, img_size=64)
            print("images", len(ds.im_files))
        """,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("images 1") == 2, out.stdout
    warnings = [line for line in out.stdout.splitlines() if line.startswith("WARNING")]
    assert sum("pipe.jpg: a FIFO" in w for w in warnings) == 2 and sum("zero.jpg: a device" in w for w in warnings) == 2
    assert any(w.startswith("WARNING: /dev/zero: a device") for w in warnings)


def test_reader_refuses_fifo_and_dev_zero_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.png")
    out = run_bounded(
        "from utils.images import read_image_checked\n",
        f"""
        for f in ({str(tmp_path / "pipe.png")!r}, "/dev/zero"):
            print(read_image_checked(f))
        """,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(None, 'a FIFO, not a regular file: not read')" in out.stdout
    assert "(None, 'a device, not a regular file: not read')" in out.stdout


def test_regular_files_still_read_after_bounds(tmp_path):
    pixels = np.random.default_rng(3).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    ok, png = cv2.imencode(".png", pixels)
    (tmp_path / "a.png").write_bytes(png.tobytes())
    image, reason = read_image_checked(tmp_path / "a.png")
    assert reason == "" and np.array_equal(image, pixels)
