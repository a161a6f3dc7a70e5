"""Issue #8 for datasets: nothing from a data YAML is executed, safe archive extraction, batch clipped to small
sets, training refuses a dataset without labels, our own label-cache name, YOLOv5's resize and batch order,
and malformed YAML / label / image files that end in one line (or a warning and a skip), never a traceback."""

import io
import logging
import math
import os
import tarfile
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from test_datasets import grey, make_dataset

import test as test_cli
from utils.data import download
from utils.data.config import load_data_config
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import load_hyp
from utils.data.loader import create_dataloader
from utils.errors import DatasetError

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def warnings_of(log) -> list[str]:
    return [r.getMessage() for r in log.records if r.levelno == logging.WARNING]


# ---------------------------------------------------------------------------------------------------------------------
# 1. a data YAML's `download:` is never executed


def commands(marker: Path) -> list:
    return [
        f"bash touch {marker}",
        f"bash -c 'touch {marker}'",
        f"import pathlib\npathlib.Path('{marker}').touch()\n",  # YOLOv5's inline-Python form
        [f"touch {marker}"],
        ["https://example.com/data.zip", 3],  # a list with a non-string
        {"url": "https://example.com/data.zip"},
        "https://example.com/run.sh",  # a URL, but not of an archive
    ]


@pytest.mark.parametrize("index", range(7))
def test_download_command_is_never_run(tmp_path, index):
    marker = tmp_path / "marker"
    spec = commands(marker)[index]
    data = {
        "path": str(tmp_path / "ds"),
        "train": "images/train",
        "val": "images/val",
        "names": ["a"],
        "download": spec,
    }
    with pytest.raises(DatasetError) as e:
        load_data_config(write_yaml(tmp_path / "d.yaml", data))
    assert not marker.exists()
    assert not (tmp_path / "ds").exists()  # nothing downloaded or created
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "ds" / "images" / "train") in msg and "yourself" in msg


def test_download_command_is_never_run_by_test_py(tmp_path, log):
    marker = tmp_path / "marker"
    specs = (f"bash touch {marker}", f"bash -c 'touch {marker}'", f"import os\nos.system('touch {marker}')\n")
    for i, spec in enumerate(specs):
        data = {
            "path": str(tmp_path / "ds"),
            "train": "images/train",
            "val": "images/val",
            "names": ["a"],
            "download": spec,
        }
        yaml_file = write_yaml(tmp_path / f"d{i}.yaml", data)
        log.clear()
        rc = test_cli.main(
            ["--data", str(yaml_file), "--weights", str(tmp_path / "w.pt"), "--project", str(tmp_path / "runs")]
        )
        errors = [r.getMessage() for r in log.records if r.levelno >= logging.ERROR]
        assert not marker.exists()
        assert rc == 1 and len(errors) == 1 and "\n" not in errors[0], errors
        assert "never run" in errors[0] and "images/train does not exist" in errors[0]


def tar_bytes(members: list[tarfile.TarInfo], data: bytes = b"x") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for m in members:
            tf.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    "bad, reason",
    [
        (member("../evil.txt"), "outside"),
        (member("/tmp/evil-abs.txt"), "outside"),
        (member("ds/link", tarfile.SYMTYPE, "/etc/passwd"), "link"),
        (member("ds/hard", tarfile.LNKTYPE, "ds/a.txt"), "link"),
        (member("ds/dev", tarfile.CHRTYPE), "special"),
    ],
)
def test_unsafe_tar_members_refused(tmp_path, bad, reason):
    archive = tmp_path / "data.tar.gz"
    archive.write_bytes(tar_bytes([member("ds/a.txt"), bad]))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(DatasetError, match=reason):
        download.untar(archive, dest)
    assert not list(dest.iterdir()) and not (tmp_path / "evil.txt").exists()  # refused before extracting anything


def test_unsafe_zip_members_refused(tmp_path):
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ds/a.txt", "x")
        link = zipfile.ZipInfo("ds/link")
        link.external_attr = 0o120777 << 16  # a symbolic link (S_IFLNK)
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(DatasetError, match="is a link"):
        download.unzip(archive, tmp_path / "out")
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../evil.txt", "x")
    with pytest.raises(DatasetError, match="outside"):
        download.unzip(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


@pytest.mark.parametrize("suffix", [".zip", ".tar", ".tar.gz", ".tgz"])
def test_archive_url_downloaded_and_extracted_beside_root(tmp_path, monkeypatch, capsys, suffix):
    """A URL of an archive is fetched (safe_download, stubbed: no network) and extracted into the root's parent."""
    src = make_dataset(tmp_path / "src" / "ds", {"a.jpg": grey()}, {"a": "0 0.5 0.5 0.2 0.2\n"})
    archive = tmp_path / f"ds{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w") as zf:
            for f in sorted((tmp_path / "src").rglob("*")):
                zf.write(f, f.relative_to(tmp_path / "src"))
    else:
        with tarfile.open(archive, "w" if suffix == ".tar" else "w:gz") as tf:
            tf.add(tmp_path / "src" / "ds", "ds")
    fetched = []

    def fake_download(url, file, **kwargs):
        fetched.append(url)
        Path(file).write_bytes(archive.read_bytes())
        return Path(file)

    monkeypatch.setattr(download, "safe_download", fake_download)
    root = tmp_path / "datasets" / "ds"
    cfg = load_data_config(
        write_yaml(
            tmp_path / "d.yaml",
            {
                "path": str(root),
                "train": "images/train",
                "val": "images/train",
                "names": ["a"],
                "download": f"https://example.com/files/ds{suffix}?raw=1",
            },
        )
    )
    assert fetched == [f"https://example.com/files/ds{suffix}?raw=1"]
    assert (Path(cfg["train"]) / "a.jpg").read_bytes() == (src / "a.jpg").read_bytes()
    assert sorted(p.name for p in (tmp_path / "datasets").iterdir()) == ["ds"]  # the archive is removed
    assert "100%" in capsys.readouterr().err  # the extraction progress bar


# ---------------------------------------------------------------------------------------------------------------------
# 4. batches larger than the dataset; training without labels


@pytest.mark.parametrize("batch", [32, 16, 3])
def test_batch_clipped_to_small_dataset(tmp_path, log, batch):
    images = make_dataset(tmp_path, {f"{i}.jpg": grey() for i in range(3)}, {"0": "0 0.5 0.5 0.2 0.2\n"})
    loader, ds = create_dataloader(images, 64, batch, 32, workers=0, rect=True)
    assert loader.batch_size == 3 and len(loader) == 1 and next(iter(loader))[0].shape[0] == 3
    assert ("reduced to 3" in log.text) == (batch > 3)


def test_batch_clipped_after_corrupt_image_dropped(tmp_path, log):
    images = make_dataset(tmp_path, {f"{i}.jpg": grey() for i in range(3)}, {"0": "0 0.5 0.5 0.2 0.2\n"})
    (images / "3.jpg").write_bytes(b"not an image" * 10)
    hyp = load_hyp("hyp.scratch.yaml")
    loader, ds = create_dataloader(images, 64, 4, 32, hyp=hyp, augment=True, workers=0, shuffle=True)
    assert len(ds) == 3 and loader.batch_size == 3
    imgs, labels, paths, _ = next(iter(loader))
    assert imgs.shape == (3, 3, 64, 64) and len(paths) == 3
    assert any("3.jpg" in w for w in warnings_of(log))


@pytest.mark.parametrize("batch", [0, -3, 2.5])
def test_bad_batch_size(tmp_path, batch):
    images = make_dataset(tmp_path, {"a.jpg": grey()}, {})
    with pytest.raises(DatasetError, match="batch size must be a positive integer"):
        create_dataloader(images, 64, batch, 32, workers=0)


def test_training_refuses_dataset_without_labels(tmp_path, log):
    images = make_dataset(tmp_path, {f"{i}.jpg": grey() for i in range(8)}, {"0": ""})  # one empty file, no boxes
    with pytest.raises(DatasetError) as e:
        create_dataloader(images, 64, 16, 32, workers=0, require_labels=True)
    msg = str(e.value)
    lb = tmp_path / "labels" / "train"
    assert f"all 1 label files in {lb} are empty and 7 of the 8 images in {images} have none" in msg
    assert "\n" not in msg
    loader, ds = create_dataloader(images, 64, 16, 32, workers=0)  # validation: a warning only
    assert len(ds) == 8 and any("training needs at least one labelled box" in w for w in warnings_of(log))
    (lb / "0.txt").unlink()
    with pytest.raises(DatasetError, match=f"no labels found in {lb} for the 8 images in {images}: training needs"):
        create_dataloader(images, 64, 16, 32, workers=0, require_labels=True)
    assert not list(tmp_path.rglob("*.yolo-labels.npz"))  # a split without boxes leaves no cache anywhere
    (lb / "0.txt").write_text("")
    (tmp_path / "labels" / "train" / "5.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    loader, ds = create_dataloader(images, 64, 16, 32, workers=0, require_labels=True)  # one box is enough
    assert sum(len(lb) for lb in ds.labels) == 1


# ---------------------------------------------------------------------------------------------------------------------
# 9. label caches: our own name, never YOLOv5's, never inside ../shared


def test_writable_dataset_gets_only_our_cache_and_yolov5_cache_untouched(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    images = make_dataset(
        tmp_path / "ds",
        {"a.jpg": grey(), "b.jpg": grey()},
        {"a": "0 0.5 0.5 0.2 0.2\n", "b": "0 0.4 0.4 0.2 0.2\n"},
        split="train2017",
    )
    v5 = tmp_path / "ds" / "labels" / "train2017.cache"
    with open(v5, "wb") as f:  # a YOLOv5 cache (pickled dict) claiming other labels
        np.save(f, np.array({"hash": "x", "version": 0.7, "msgs": [], "results": (0, 0, 0, 0, 0)}), allow_pickle=True)
    os.utime(v5, ns=(1_000_000_000, 1_000_000_000))
    before = (v5.read_bytes(), v5.stat().st_mtime_ns)
    for _ in range(2):  # built, then reused
        ds = LoadImagesAndLabels(images, img_size=64)
        assert [len(lb) for lb in ds.labels] == [1, 1]
    assert sorted(p.name for p in (tmp_path / "ds" / "labels").iterdir()) == [
        "train2017",
        "train2017.cache",
        "train2017.yolo-labels.npz",
    ]
    assert (v5.read_bytes(), v5.stat().st_mtime_ns) == before
    with np.load(tmp_path / "ds" / "labels" / "train2017.yolo-labels.npz", allow_pickle=False) as z:
        assert int(z["counts"].sum()) == 2
    assert not (tmp_path / "xdg").exists()


def test_yolo_cache_dir_keeps_writable_dataset_untouched(tmp_path, cache_dir):
    images = make_dataset(tmp_path / "ds", {"a.jpg": grey()}, {"a": "0 0.5 0.5 0.2 0.2\n"})
    before = sorted(str(p) for p in (tmp_path / "ds").rglob("*"))
    LoadImagesAndLabels(images, img_size=64)
    LoadImagesAndLabels(images, img_size=64, cache=None)
    assert sorted(str(p) for p in (tmp_path / "ds").rglob("*")) == before
    assert len(list(cache_dir.glob("*.yolo-labels.npz"))) == 1


# ---------------------------------------------------------------------------------------------------------------------
# 10. YOLOv5's geometry on coco128: ceil when resizing, numpy's default argsort for rectangular batches


def coco128_sizes(images: Path) -> tuple[list[str], np.ndarray]:
    files = sorted(str(p) for p in images.iterdir())
    return files, np.array([cv2.imread(f).shape[1::-1] for f in files])  # (w, h)


def test_coco128_rect_batches_follow_numpy_argsort(shared):
    images = shared / "datasets" / "coco128" / "images" / "train2017"
    ds = LoadImagesAndLabels(images, img_size=640, batch_size=16, rect=True, pad=0.5, stride=32, nc=80)
    files, wh = coco128_sizes(images)
    ar = wh[:, 1] / wh[:, 0]
    order = ar.argsort()  # numpy's default kind, as YOLOv5
    assert len(np.unique(ar)) < len(ar)  # tied aspect ratios exist, so the sort kind matters
    assert ds.im_files == [files[i] for i in order]
    shapes = []
    for b in range(0, len(order), 16):
        a = ar[order[b : b + 16]]
        shapes.append((a.max(), 1) if a.max() < 1 else (1, 1 / a.min()) if a.min() > 1 else (1, 1))
    expected = np.ceil(np.array(shapes) * 640 / 32 + 0.5).astype(int) * 32
    assert ds.batch_shapes.tolist() == expected.tolist()


@pytest.mark.slow
def test_coco128_resize_uses_ceil(shared):
    images = shared / "datasets" / "coco128" / "images" / "train2017"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (shared / "datasets" / "coco128").rglob("*"))
    ds = LoadImagesAndLabels(images, img_size=640, nc=80)
    files, wh = coco128_sizes(images)
    assert ds.im_files == files
    differs = 0
    for i in range(len(files)):
        (w0, h0), r = wh[i], 640 / wh[i].max()
        ceil = (math.ceil(h0 * r), math.ceil(w0 * r))
        assert ds.load_image(i)[2] == ceil
        differs += (round(h0 * r), round(w0 * r)) != ceil
    assert differs  # some coco128 images tell ceil from round
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (shared / "datasets" / "coco128").rglob("*")) == before


# ---------------------------------------------------------------------------------------------------------------------
# 11 and beyond: malformed labels, images and YAMLs


def test_label_with_utf8_bom_keeps_image(tmp_path, log):
    images = make_dataset(tmp_path, {"a.jpg": grey(), "b.jpg": grey()}, {"b": "0 0.5 0.5 0.2 0.2\n"})
    (tmp_path / "labels" / "train" / "a.txt").write_bytes("\ufeff1 0.5 0.5 0.4 0.4\n".encode())
    ds = LoadImagesAndLabels(images, img_size=64, nc=2)
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg"]
    np.testing.assert_allclose(ds.labels[0], [[1, 0.5, 0.5, 0.4, 0.4]])
    assert not warnings_of(log)


def test_image_list_with_utf8_bom_or_nul(tmp_path):
    make_dataset(tmp_path, {"a.jpg": grey(), "b.jpg": grey()}, {})
    (tmp_path / "list.txt").write_bytes("\ufeffimages/train/a.jpg\nimages/train/b.jpg\n".encode())
    assert len(LoadImagesAndLabels(tmp_path / "list.txt", img_size=64)) == 2
    (tmp_path / "list.txt").write_bytes(b"images/train/a.jpg\nimages/train/b\0.jpg\n")
    with pytest.raises(DatasetError, match="line 2: not a file path"):
        LoadImagesAndLabels(tmp_path / "list.txt", img_size=64)


def test_unreadable_label_files_skip_their_image(tmp_path, log):
    images = make_dataset(
        tmp_path, {"good.jpg": grey(), "dir.jpg": grey(), "latin.jpg": grey()}, {"good": "0 0.5 0.5 0.2 0.2\n"}
    )
    (tmp_path / "labels" / "train" / "dir.txt").mkdir()  # a folder where the label file should be
    (tmp_path / "labels" / "train" / "latin.txt").write_bytes("0 0.5 0.5 0.2 0.2 # caf\xe9\n".encode("latin-1"))
    ds = LoadImagesAndLabels(images, img_size=64)
    assert [Path(f).name for f in ds.im_files] == ["good.jpg"]
    warnings = warnings_of(log)
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert any("dir.jpg" in w and "is not a file" in w for w in warnings)
    assert any("latin.jpg" in w and "not UTF-8" in w for w in warnings)


def test_odd_images_skipped(tmp_path, log):
    ok, png = cv2.imencode(".png", np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    images = make_dataset(tmp_path, {"good.jpg": grey(), "one.png": grey(1, 1)}, {"good": "0 0.5 0.5 0.2 0.2\n"})
    (images / "cut.png").write_bytes(png.tobytes()[: len(png) // 2])
    (images / "zero.jpg").write_bytes(b"")
    (images / "folder.jpg").mkdir()  # a folder with an image suffix is not an image
    ds = LoadImagesAndLabels(images, img_size=64)
    assert [Path(f).name for f in ds.im_files] == ["good.jpg"]
    warnings = warnings_of(log)
    assert len(warnings) == 3 and all("\n" not in w for w in warnings)
    assert "1 images, 0 backgrounds, 3 corrupt" in log.text


@pytest.mark.parametrize(
    "data, message",
    [
        ({"nc": "abc", "names": None}, "'nc' must be a positive integer"),
        ({"nc": 0}, "'nc' must be a positive integer"),
        ({"nc": 2.0, "names": ["a", "b"]}, "'nc' must be a positive integer"),
        ({"nc": 10**12, "names": None}, "more than 100000 classes"),
        ({"names": []}, "needs 'names'|'names' is empty"),
        ({"names": "abc"}, "'names' must be a list"),
        ({"train": 3.5}, "'train' must be a path or a list of paths"),
        ({"train": True}, "'train' must be a path or a list of paths"),
        ({"val": {"a": 1}}, "'val' must be a path or a list of paths"),
        ({"val": ["images", None]}, "'val' must be a path or a list of paths"),
        ({"val": []}, "'val' must be a path or a list of paths"),
        ({"path": ["a", "b"]}, "'path' must be a folder path"),
        ({"path": 5}, "'path' must be a folder path"),
        ({"path": "a\0b"}, "'path' must be a folder path"),
        ({"ann_json": 7.5}, "'ann_json' must be a path"),
        ({"val": ["images", "missing"]}, "missing does not exist"),
        ({"train": 2017}, "2017 does not exist"),
    ],
)
def test_malformed_data_yaml_is_one_line(tmp_path, data, message):
    make_dataset(tmp_path, {"a.jpg": grey()}, {}, split="x")
    base = {"path": str(tmp_path), "train": "images", "val": "images", "names": ["a"]}
    with pytest.raises(DatasetError, match=message) as e:
        load_data_config(write_yaml(tmp_path / "d.yaml", {**base, **data}))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("lr0", -0.01, "lr0 must be >= 0"),
        ("mosaic", 1.5, "mosaic must be in \\[0, 1\\]"),
        ("fliplr", -0.5, "fliplr must be in \\[0, 1\\]"),
        ("anchors", -1, "anchors must be >= 0"),
        ("anchors", [10, 13], "anchors must be a finite number"),
    ],
)
def test_out_of_range_hyp_is_one_line(tmp_path, key, value, message):
    hyp = {**load_hyp("hyp.scratch.yaml"), key: value}
    with pytest.raises(DatasetError, match=message) as e:
        load_hyp(write_yaml(tmp_path / "h.yaml", hyp))
    assert "\n" not in str(e.value)
