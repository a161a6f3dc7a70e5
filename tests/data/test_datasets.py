"""Dataset loading: YAML configs, label and image checks, the label cache, rectangular batches, the dataloader."""

import logging
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import yaml

from utils.boxes import scale_boxes, xywhn2xyxy
from utils.data import config, download, label_loading
from utils.data.config import load_data_config
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import HYP_KEYS, load_hyp
from utils.data.loader import create_dataloader
from utils.errors import DatasetError
from utils.files import REPO_ROOT

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder


def make_dataset(root: Path, images: dict, labels: dict, split: str = "train") -> Path:
    """Write images {name.ext: array} and label texts {stem: str} in YOLO layout; returns the images folder."""
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    (root / "labels" / split).mkdir(parents=True, exist_ok=True)
    for name, im in images.items():
        assert cv2.imwrite(str(root / "images" / split / name), im)
    for stem, text in labels.items():
        (root / "labels" / split / f"{stem}.txt").write_text(text)
    return root / "images" / split


def grey(h: int = 48, w: int = 64) -> np.ndarray:
    return np.full((h, w, 3), 90, np.uint8)


# ---------------------------------------------------------------------------------------------------------------------
# label checks


@pytest.mark.parametrize(
    "text, reason",
    [
        ("0 0.5 0.5 0.2\n", "5 columns"),
        ("0 0.5 0.5 0.2 0.2 0.1\n", "5 columns"),
        ("3 0.5 0.5 0.2 0.2\n", "class 3"),
        ("-1 0.5 0.5 0.2 0.2\n", "class -1"),
        ("1.5 0.5 0.5 0.2 0.2\n", "class 1.5"),
        ("0 nan 0.5 0.2 0.2\n", "non-finite"),
        ("0 0.5 inf 0.2 0.2\n", "non-finite"),
        ("0 0.5 abc 0.2 0.2\n", "non-numeric"),
        ("0 0.5 0.5 1.2 0.2\n", "normalised"),
        ("0 -0.02 0.5 0.2 0.2\n", "normalised"),
    ],
)
def test_malformed_label_skips_image_with_warning(tmp_path, log, text, reason):
    images = make_dataset(
        tmp_path,
        {"good.jpg": grey(), "bad.jpg": grey()},
        {"good": "1 0.5 0.5 0.2 0.2\n", "bad": "0 0.3 0.3 0.1 0.1\n" + text},
    )
    ds = LoadImagesAndLabels(images, img_size=64, nc=3)
    assert [Path(f).name for f in ds.im_files] == ["good.jpg"]
    warnings = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "bad.jpg" in warnings[0] and reason in warnings[0], warnings
    assert "1 images, 0 backgrounds, 1 corrupt" in log.text


def test_duplicates_dropped_and_overshoot_clipped(tmp_path, log):
    text = (
        "0 0.5 0.5 0.2 0.2\n"
        "0 0.5 0.5 0.2 0.2\n"  # duplicate
        "1 0.5 0.5 1.008 0.4\n"  # 0.004 over both edges: clipped to the full width
        "2 1.005 0.5 0.1 0.1\n"  # centre 0.005 past the right edge: box cut at x = 1
        "\n"
    )  # blank lines are fine
    images = make_dataset(tmp_path, {"a.png": grey()}, {"a": text})
    ds = LoadImagesAndLabels(images, img_size=64, nc=3)
    np.testing.assert_allclose(
        ds.labels[0],
        [
            [0, 0.5, 0.5, 0.2, 0.2],
            [1, 0.5, 0.5, 1.0, 0.4],
            [2, (0.955 + 1) / 2, 0.5, 0.045, 0.1],
        ],
        atol=1e-6,
    )
    assert "1 duplicate label(s) removed" in log.text
    assert "1 images, 0 backgrounds, 0 corrupt (3 boxes)" in log.text


def test_polygon_labels_become_boxes(tmp_path):
    images = make_dataset(tmp_path, {"a.png": grey()}, {"a": "1 0.1 0.2 0.5 0.2 0.3 0.6\n"})
    ds = LoadImagesAndLabels(images, img_size=64, nc=3)
    np.testing.assert_allclose(ds.labels[0], [[1, 0.3, 0.4, 0.4, 0.4]], atol=1e-6)


def test_backgrounds_and_single_cls(tmp_path, log):
    images = make_dataset(
        tmp_path,
        {"a.jpg": grey(), "b.jpg": grey(), "c.jpg": grey()},
        {"a": "2 0.5 0.5 0.2 0.2\n1 0.2 0.2 0.1 0.1\n", "b": ""},
    )  # c has no label file
    ds = LoadImagesAndLabels(images, img_size=64, nc=1, single_cls=True)  # nc=1 as train.py passes it
    assert len(ds) == 3 and [len(x) for x in ds.labels] == [2, 0, 0]
    assert (ds.labels[0][:, 0] == 0).all()
    assert "3 images, 2 backgrounds, 0 corrupt (2 boxes)" in log.text


# ---------------------------------------------------------------------------------------------------------------------
# image checks


def test_corrupt_truncated_and_tiny_images_skipped(tmp_path, log):
    ok, jpeg = cv2.imencode(".jpg", np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    images = make_dataset(tmp_path, {"good.jpg": grey(), "tiny.png": grey(6, 40)}, {"good": "0 0.5 0.5 0.2 0.2\n"})
    (images / "garbage.jpg").write_bytes(b"this is not an image" * 20)
    (images / "truncated.jpg").write_bytes(jpeg.tobytes()[: len(jpeg) // 2])
    (images / "empty.png").write_bytes(b"")
    (images / "trailing.jpg").write_bytes(jpeg.tobytes() + b"camera junk")  # complete image + trailing bytes: fine
    ds = LoadImagesAndLabels(images, img_size=64)
    assert sorted(Path(f).name for f in ds.im_files) == ["good.jpg", "trailing.jpg"]
    warnings = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert any("truncated.jpg" in w and "truncated JPEG" in w for w in warnings)
    assert any("tiny.png" in w and "smaller than 10 px" in w for w in warnings)
    assert "2 images, 1 backgrounds, 4 corrupt" in log.text
    assert ds[0][0].shape == (3, 64, 64)


def test_all_corrupt_is_an_error(tmp_path):
    images = make_dataset(tmp_path, {}, {})
    (images / "garbage.jpg").write_bytes(b"junk" * 100)
    with pytest.raises(DatasetError, match="all are corrupt"):
        LoadImagesAndLabels(images, img_size=64)


def test_no_images_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no images found"):
        LoadImagesAndLabels(tmp_path / "empty")
    with pytest.raises(DatasetError, match="does not exist"):
        LoadImagesAndLabels(tmp_path / "missing")


def test_grey_16bit_and_rgba_load_as_3_channel_rgb(tmp_path):
    gray = np.full((32, 40), 200, np.uint8)
    deep = np.full((32, 40), 32768, np.uint16)  # 16-bit mid-grey -> 128
    rgba = np.zeros((32, 40, 4), np.uint8)
    rgba[..., 2], rgba[..., 3] = 255, 128  # red (BGR order), half transparent
    images = make_dataset(tmp_path, {"gray.png": gray, "deep.png": deep, "rgba.png": rgba}, {})
    ds = LoadImagesAndLabels(images, img_size=40)
    out = {Path(ds[i][2]).stem: ds[i][0] for i in range(len(ds))}
    for img in out.values():
        assert img.dtype == torch.uint8 and img.shape == (3, 40, 40)
    centre = (slice(None), 20, 20)
    assert out["gray"][centre].tolist() == [200, 200, 200]
    assert all(abs(v - 128) <= 1 for v in out["deep"][centre].tolist())
    assert out["rgba"][centre].tolist() == [255, 0, 0]  # output is RGB


def test_exif_orientation_applied(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    im = pil.new("RGB", (60, 20), (0, 0, 0))
    im.paste((255, 255, 255), (0, 0, 10, 20))  # white strip on the left
    exif = pil.Exif()
    exif[0x0112] = 6  # stored sideways: displayed rotated 90 degrees clockwise
    (tmp_path / "images").mkdir()
    im.save(tmp_path / "images" / "rot.jpg", exif=exif, quality=95)
    ds = LoadImagesAndLabels(tmp_path / "images", img_size=60)
    assert ds.shapes.tolist() == [[20, 60]]  # (w, h) as displayed
    img, _, _, shapes = ds[0]
    assert shapes[0] == (60, 20)
    assert img[:, 2, 30].float().mean() > 200 and img[:, 40, 30].float().mean() < 50  # the strip is now on top


# ---------------------------------------------------------------------------------------------------------------------
# cache


def test_cache_reused_and_rebuilt_when_labels_change(tmp_path, log, monkeypatch):
    monkeypatch.delenv("YOLO_CACHE_DIR")  # the dataset is a tmp_path copy: its cache goes beside its labels
    images = make_dataset(
        tmp_path, {"a.jpg": grey(), "b.jpg": grey()}, {"a": "0 0.5 0.5 0.2 0.2\n", "b": "1 0.5 0.5 0.4 0.4\n"}
    )
    LoadImagesAndLabels(images, img_size=64, nc=2)
    cache = tmp_path / "labels" / "train.yolo-labels.npz"
    assert cache.is_file() and "New cache created" in log.text

    def fail(*args):
        raise AssertionError("verified again although the cache is valid")

    verify = label_loading.verify_image_label

    monkeypatch.setattr(label_loading, "verify_image_label", fail)
    log.clear()
    ds = LoadImagesAndLabels(images, img_size=64, nc=2)
    assert "New cache created" not in log.text and [len(x) for x in ds.labels] == [1, 1]
    monkeypatch.setattr(label_loading, "verify_image_label", verify)

    label = tmp_path / "labels" / "train" / "b.txt"
    label.write_text("1 0.5 0.5 0.4 0.4\n0 0.1 0.1 0.1 0.1\n")
    os.utime(label, ns=(label.stat().st_atime_ns, label.stat().st_mtime_ns + 10**9))  # even within one tick
    ds = LoadImagesAndLabels(images, img_size=64, nc=2)
    assert "New cache created" in log.text and [len(x) for x in ds.labels] == [1, 2]


def test_pickled_cache_is_not_loaded_nor_replaced(tmp_path, monkeypatch, log):
    monkeypatch.delenv("YOLO_CACHE_DIR")  # the dataset is a tmp_path copy: its cache goes beside its labels
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    images = make_dataset(tmp_path, {"a.jpg": grey()}, {"a": "0 0.5 0.5 0.2 0.2\n"})
    cache = tmp_path / "labels" / "train.yolo-labels.npz"
    with open(cache, "wb") as f:  # a pickle under our cache's name: not ours, so neither loaded nor replaced
        np.save(f, np.array({"hash": "x", "version": 1}), allow_pickle=True)
    before = cache.read_bytes()
    ds = LoadImagesAndLabels(images, img_size=64)
    assert len(ds.labels[0]) == 1 and cache.read_bytes() == before
    assert "ignoring label cache" in log.text
    (saved,) = (tmp_path / "xdg" / "yolo").glob("*.yolo-labels.npz")  # written where it replaces nothing
    with np.load(saved, allow_pickle=False) as z:
        assert "labels" in z.files


def test_read_only_labels_folder_caches_elsewhere(tmp_path, log, monkeypatch):
    monkeypatch.delenv("YOLO_CACHE_DIR")  # without it, the user cache folder is the fallback
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache_dir = tmp_path / "xdg" / "yolo"
    images = make_dataset(tmp_path, {"a.jpg": grey()}, {"a": "0 0.5 0.5 0.2 0.2\n"})
    labels = tmp_path / "labels"
    labels.chmod(0o555)
    try:
        LoadImagesAndLabels(images, img_size=64)
        assert not (labels / "train.yolo-labels.npz").exists()  # honoured even when running as root
        assert len(list(cache_dir.glob("*.yolo-labels.npz"))) == 1 and "not writable" in log.text
        log.clear()
        LoadImagesAndLabels(images, img_size=64)
        assert "New cache" not in log.text and "not writable" not in log.text
    finally:
        labels.chmod(0o755)


def test_disk_and_ram_image_cache(tmp_path, cache_dir):
    im = np.random.default_rng(1).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    images = make_dataset(tmp_path, {"a.png": im}, {"a": "0 0.5 0.5 0.2 0.2\n"})
    plain = LoadImagesAndLabels(images, img_size=64)[0][0]
    disk = LoadImagesAndLabels(images, img_size=64, cache="disk")
    assert disk.cache_mode == "disk" and not (images / "a.npy").exists()  # never beside the images
    assert disk.npy_files[0].startswith(str(cache_dir)) and os.path.isfile(disk.npy_files[0])
    assert torch.equal(disk[0][0], plain)
    ram = LoadImagesAndLabels(images, img_size=64, cache="ram")
    assert ram.cache_mode == "ram" and ram.ims[0] is not None
    assert torch.equal(ram[0][0], plain)


# ---------------------------------------------------------------------------------------------------------------------
# output geometry, rectangular batches, collate, dataloader


def test_letterboxed_labels_map_back_to_original(tmp_path):
    images = make_dataset(tmp_path, {"a.jpg": grey(100, 200)}, {"a": "0 0.25 0.5 0.1 0.2\n"})
    ds = LoadImagesAndLabels(images, img_size=128)
    img, labels, _, shapes = ds[0]
    assert img.shape == (3, 128, 128) and labels.shape == (1, 6)
    assert shapes == ((100, 200), ((0.64, 0.64), (0.0, 32.0)))
    box = xywhn2xyxy(labels[:, 2:], 128, 128)
    np.testing.assert_allclose(box.numpy(), [[25.6, 57.6, 38.4, 70.4]], atol=1e-4)  # 128x64 + 32 px top pad
    back = scale_boxes((128, 128), box, shapes[0], shapes[1])
    np.testing.assert_allclose(back.numpy(), [[40, 40, 60, 60]], atol=1e-3)


@pytest.mark.parametrize("pad, landscape, portrait", [(0.0, (256, 320), (320, 288)), (0.5, (288, 352), (352, 320))])
def test_rect_batch_shapes(tmp_path, pad, landscape, portrait):
    sizes = {"c.jpg": (120, 60), "a.jpg": (50, 100), "d.jpg": (100, 90), "b.jpg": (80, 100)}  # (h, w)
    images = make_dataset(
        tmp_path, {k: grey(*hw) for k, hw in sizes.items()}, {Path(k).stem: "0 0.5 0.5 0.5 0.5\n" for k in sizes}
    )
    ds = LoadImagesAndLabels(images, img_size=320, batch_size=2, rect=True, pad=pad)
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg", "d.jpg", "c.jpg"]  # by h/w
    assert ds.batch_shapes.tolist() == [list(landscape), list(portrait)]
    for i in range(4):
        img, labels, _, shapes = ds[i]
        assert tuple(img.shape[1:]) == (landscape if i < 2 else portrait)
        box = scale_boxes(img.shape[1:], xywhn2xyxy(labels[:, 2:], img.shape[2], img.shape[1]), shapes[0], shapes[1])
        h0, w0 = shapes[0]
        np.testing.assert_allclose(box.numpy(), [[w0 / 4, h0 / 4, w0 * 3 / 4, h0 * 3 / 4]], atol=0.6)


def test_collate_and_dataloader(tmp_path):
    images = make_dataset(
        tmp_path,
        {f"{i}.jpg": grey() for i in range(5)},
        {str(i): "".join(f"{c} 0.5 0.5 0.{c + 1} 0.2\n" for c in range(i)) for i in range(5)},
    )
    loader, ds = create_dataloader(images, 64, 4, 32, workers=0, rect=True, pad=0.5)
    imgs, labels, paths, shapes = next(iter(loader))
    assert imgs.shape == (4, 3, 64, 96) and imgs.dtype == torch.uint8 and len(paths) == 4 == len(shapes)
    assert labels.shape == (0 + 1 + 2 + 3, 6)
    assert labels[:, 0].tolist() == [1, 2, 2, 3, 3, 3]  # image index within the batch
    assert len(loader) == 2


def test_dataloader_workers_and_seeding(tmp_path):
    images = make_dataset(
        tmp_path,
        {f"{i}.jpg": np.full((48, 64, 3), 20 * i, np.uint8) for i in range(6)},
        {str(i): "0 0.5 0.5 0.4 0.4\n" for i in range(6)},
    )
    hyp = load_hyp("hyp.scratch.yaml")
    runs = []
    for _ in range(2):
        loader, _ = create_dataloader(images, 64, 3, 32, hyp=hyp, augment=True, workers=2, shuffle=True, seed=3)
        assert loader.num_workers == 2 and loader.persistent_workers
        runs.append([(b[0].clone(), b[1].clone()) for b in loader])
    for (i1, l1), (i2, l2) in zip(*runs):
        assert torch.equal(i1, i2) and torch.equal(l1, l2)  # same seed, same augmentation


def test_batch_larger_than_dataset(tmp_path):
    images = make_dataset(tmp_path, {f"{i}.jpg": grey() for i in range(3)}, {})
    loader, _ = create_dataloader(images, 64, 16, 32, workers=0)  # clipped, as YOLOv5
    assert loader.batch_size == 3 and len(loader) == 1


def test_split_as_txt_list_and_list_of_folders(tmp_path):
    a = make_dataset(tmp_path / "one", {"x.jpg": grey()}, {"x": "0 0.5 0.5 0.2 0.2\n"})
    b = make_dataset(tmp_path / "two", {"y.jpg": grey(), "z.jpg": grey()}, {})
    (tmp_path / "list.txt").write_text("./one/images/train/x.jpg\n\ntwo/images/train/y.jpg\n")
    assert len(LoadImagesAndLabels(tmp_path / "list.txt", img_size=64)) == 2
    assert len(LoadImagesAndLabels([str(a), str(b)], img_size=64)) == 3


# ---------------------------------------------------------------------------------------------------------------------
# data and hyperparameter YAMLs


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_load_data_config(tmp_path):
    images = make_dataset(tmp_path / "ds", {"a.jpg": grey()}, {})
    make_dataset(tmp_path / "ds", {"b.jpg": grey()}, {}, split="val")
    cfg = load_data_config(
        write_yaml(
            tmp_path / "d.yaml",
            {
                "path": str(tmp_path / "ds"),
                "train": "images/train",
                "val": ["images/val", "images/train"],
                "names": {0: "cat", 1: "dog"},
                "ann_json": "annotations/val.json",
            },
        )
    )
    assert cfg["train"] == str(images) and cfg["val"] == [str(tmp_path / "ds/images/val"), str(images)]
    assert cfg["test"] is None and cfg["nc"] == 2 and cfg["names"] == ["cat", "dog"]
    assert cfg["ann_json"] == str(tmp_path / "ds/annotations/val.json") and cfg["path"] == str(tmp_path / "ds")
    # without `path`, splits are relative to the YAML's folder
    cfg = load_data_config(
        write_yaml(tmp_path / "e.yaml", {"train": "ds/images/train", "val": "ds/images/val", "nc": 1, "names": ["x"]})
    )
    assert cfg["train"] == str(images) and cfg["names"] == ["x"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"train": "ds", "val": "ds", "nc": 3, "names": ["a", "b"]}, "nc is 3 but 2 names"),
        ({"train": "ds", "val": "ds", "names": {0: "a", 2: "b"}}, "none missing"),
        ({"train": "ds", "val": "nowhere", "names": ["a"]}, "nowhere does not exist and d.yaml has no 'download'"),
        ({"names": ["a"]}, "needs 'train'"),
        ({"train": "ds", "val": "no", "names": ["a"], "download": "import os; os.system('echo hi')"}, "never run"),
    ],
)
def test_bad_data_config(tmp_path, data, message):
    (tmp_path / "ds").mkdir()
    with pytest.raises(DatasetError, match=message):
        load_data_config(write_yaml(tmp_path / "d.yaml", data))


def test_data_yaml_errors_are_one_line(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_data_config(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("train: [a, b\nval: :::\n")
    with pytest.raises(DatasetError) as e:
        load_data_config(tmp_path / "broken.yaml")
    assert "\n" not in str(e.value)


def test_coco128_yaml_resolves_beside_repo_and_downloads(monkeypatch):
    calls = []
    monkeypatch.setattr(config, "download_dataset", lambda spec, root, missing: calls.append((spec, root)))
    if (REPO_ROOT.parent / "datasets" / "coco128" / "images" / "train2017").exists():
        pytest.skip("../datasets/coco128 exists here, so nothing would be downloaded")
    with pytest.raises(DatasetError, match="still incomplete"):
        load_data_config("coco128.yaml")  # a bare name resolves to data/
    ((spec, root),) = calls
    assert spec == "https://github.com/ultralytics/assets/releases/download/v0.0.0/coco128.zip"
    assert root == (REPO_ROOT.parent / "datasets" / "coco128").resolve()
    data = yaml.safe_load((REPO_ROOT / "data" / "coco128.yaml").read_text())
    assert data["nc"] == 80 and len(data["names"]) == 80 and data["names"][0] == "person"


def test_generate_shapes_on_first_use(tmp_path, monkeypatch):
    data = yaml.safe_load((REPO_ROOT / "data" / "shapes.yaml").read_text())
    data["path"] = str(tmp_path / "shapes")
    calls = []
    real = __import__("utils.data.shapes", fromlist=["generate_shapes"]).generate_shapes
    monkeypatch.setattr("utils.data.shapes.generate_shapes", lambda root: calls.append(root) or real(root, 8, 4))
    cfg = load_data_config(write_yaml(tmp_path / "shapes.yaml", data))
    assert len(calls) == 1 and cfg["nc"] == 5 and len(list(Path(cfg["val"]).glob("*.jpg"))) == 4
    load_data_config(tmp_path / "shapes.yaml")
    assert len(calls) == 1  # not regenerated once present


def test_hyp_files():
    scratch, finetune = load_hyp("hyp.scratch.yaml"), load_hyp("data/hyp.finetune.yaml")
    assert tuple(scratch) == HYP_KEYS and set(finetune) == set(HYP_KEYS)
    assert (scratch["lr0"], scratch["lrf"], scratch["momentum"], scratch["mosaic"], scratch["fliplr"]) == (
        0.01,
        0.01,
        0.937,
        1.0,
        0.5,
    )
    assert (finetune["lr0"], finetune["anchor_t"], finetune["mixup"]) == (0.0032, 2.91, 0.243)
    for name in ("hyp.scratch.yaml", "hyp.finetune.yaml"):  # every key is documented
        lines = [ln for ln in (REPO_ROOT / "data" / name).read_text().splitlines() if ln and ln[0].isalpha()]
        assert len(lines) == len(HYP_KEYS) and all("  # " in ln for ln in lines)


def test_bad_hyp(tmp_path):
    good = load_hyp("hyp.scratch.yaml")
    with pytest.raises(DatasetError, match="unknown hyperparameter.*lr00"):
        load_hyp(write_yaml(tmp_path / "h.yaml", {**good, "lr00": 0.1}))
    with pytest.raises(DatasetError, match="missing hyperparameter.*mosaic"):
        load_hyp(write_yaml(tmp_path / "h.yaml", {k: v for k, v in good.items() if k != "mosaic"}))
    with pytest.raises(DatasetError, match="lr0 must be a finite number"):
        load_hyp(write_yaml(tmp_path / "h.yaml", {**good, "lr0": "fast"}))
    assert load_hyp(write_yaml(tmp_path / "h.yaml", {**good, "anchors": 3}))["anchors"] == 3


# ---------------------------------------------------------------------------------------------------------------------
# coco128 from ../shared (read-only)


def test_coco128_from_shared(shared, cache_dir, log):
    root = shared / "datasets" / "coco128"
    labels_dir = root / "labels"
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in labels_dir.iterdir()}
    cfg = {
        "path": str(root),
        "train": "images/train2017",
        "val": "images/train2017",
        "nc": 80,
        "names": [str(i) for i in range(80)],
        "ann_json": "annotations/instances_train2017.json",
    }
    tmp_yaml = cache_dir.parent / "coco128_shared.yaml"
    cfg = load_data_config(write_yaml(tmp_yaml, cfg))
    assert Path(cfg["ann_json"]).is_file()
    loader, ds = create_dataloader(cfg["val"], 640, 16, 32, rect=True, pad=0.5, workers=0, nc=80)
    assert len(ds) == 128 and sum(len(x) for x in ds.labels) == 929
    assert sum(len(x) == 0 for x in ds.labels) == 2
    assert "128 images, 2 backgrounds, 0 corrupt (929 boxes)" in log.text
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in labels_dir.iterdir()} == before
    assert len(list(cache_dir.glob("*.yolo-labels.npz"))) == 1  # $YOLO_CACHE_DIR: never beside ../shared's labels
    imgs, targets, paths, shapes = next(iter(loader))
    assert imgs.shape[0] == 16 and max(imgs.shape[2:]) == 672 and targets.shape[1] == 6  # 640 + 0.5 stride pad


def test_download_bash_command_is_not_run(tmp_path):
    target = tmp_path / "made"
    with pytest.raises(DatasetError, match="never run: read it and run it yourself") as e:
        download.download_dataset(f"bash -c 'mkdir -p {target}'", tmp_path / "ds")
    assert not target.exists() and f"mkdir -p {target}" in str(e.value)
