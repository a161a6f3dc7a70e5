"""utils.images: the one image reader (every depth and channel count to BGR uint8), truncation checks, listing."""

from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from tests.infer.test_sources import _photo, _write
from utils.data.dataset import LoadImagesAndLabels
from utils.images import (
    IMG_FORMATS,
    VID_FORMATS,
    is_image_file,
    jpeg_file_truncated,
    jpeg_truncated,
    list_files,
    read_image,
    read_image_checked,
    truncation,
)

# --- read_image ---------------------------------------------------------------------------------------------


def test_read_image_formats_become_bgr_uint8(tmp_path):
    bgr = _photo()
    gray = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    cases = {
        "color.png": (bgr, bgr),
        "gray.png": (gray, cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)),
        "deep.png": (bgr.astype(np.uint16) * 257, bgr),  # 16-bit: 65535 maps to 255
        "alpha.png": (np.dstack([bgr, np.full(bgr.shape[:2], 7, np.uint8)]), bgr),  # alpha dropped, not blended
        "gray16.tif": ((gray.astype(np.uint16) * 257), cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)),
        "float.pfm": (bgr.astype(np.float32) / 255, bgr),  # float in [0, 1]
    }
    for name, (stored, expected) in cases.items():
        image = read_image(_write(tmp_path / name, stored))
        assert image is not None, name
        assert image.dtype == np.uint8 and image.shape == (100, 200, 3), name
        np.testing.assert_array_equal(image, expected, err_msg=name)


def test_read_image_unicode_path(tmp_path):
    path = tmp_path / "bild_ä_图.png"
    ok, encoded = cv2.imencode(".png", _photo())
    encoded.tofile(str(path))
    assert read_image(path).shape == (100, 200, 3)


def test_read_image_refuses_broken_files(tmp_path):
    jpg = _write(tmp_path / "whole.jpg", _photo(200, 300))
    data = jpg.read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    png = _write(tmp_path / "whole.png", _photo()).read_bytes()
    (tmp_path / "cut.png").write_bytes(png[: len(png) - 30])
    (tmp_path / "text.jpg").write_text("not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    assert read_image(jpg) is not None
    for name in ("cut.jpg", "cut.png", "text.jpg", "empty.png", "missing.png"):
        image, reason = read_image_checked(tmp_path / name)
        assert image is None and reason and "\n" not in reason, name
    assert "truncated" in read_image_checked(tmp_path / "cut.jpg")[1]


def test_jpeg_exif_orientation_is_applied(tmp_path):
    pixels = np.zeros((100, 200, 3), np.uint8)
    pixels[:, :50] = 255  # white band on the left
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    image.save(tmp_path / "rotated.jpg", exif=exif)
    out = read_image(tmp_path / "rotated.jpg")
    assert out.shape == (200, 100, 3)
    assert out[:50].mean() > 200 and out[150:].mean() < 50  # the band is now on top


def test_training_reads_the_pixels_inference_reads(tmp_path, cache_dir):
    """One reader: a 16-bit and an alpha PNG give the training loader the very pixels detect.py sees."""
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    stored = {
        "deep.png": _photo(seed=1).astype(np.uint16) * 256 + 200,  # 16-bit whose low byte OpenCV's >>8 would drop
        "alpha.png": np.dstack([_photo(seed=2), np.full((100, 200), 9, np.uint8)]),
    }
    for name, image in stored.items():
        _write(tmp_path / "images" / name, image)
        (tmp_path / "labels" / name).with_suffix(".txt").write_text("0 0.5 0.5 0.2 0.2\n")
    dataset = LoadImagesAndLabels(str(tmp_path / "images"), img_size=200, augment=False)
    for i, file in enumerate(dataset.im_files):
        loaded, original_shape, _ = dataset.load_image(i)
        assert original_shape == (100, 200)
        np.testing.assert_array_equal(loaded, read_image(file), err_msg=file)
    deep = read_image(tmp_path / "images" / "deep.png")
    expected = ((_photo(seed=1).astype(np.float32) * 256 + 200) / 257).round()  # 65535 -> 255, rounded
    np.testing.assert_array_equal(deep, expected)
    assert (deep != _photo(seed=1)).any()  # not the high byte alone


def test_jpeg_truncation_check():
    whole = cv2.imencode(".jpg", _photo())[1].tobytes()
    assert not jpeg_truncated(whole) and not jpeg_truncated(whole + b"\x00" * 100)  # padding after the end is fine
    assert not jpeg_truncated(whole + b"exif trailer")  # data after the end marker is fine
    assert jpeg_truncated(whole[: len(whole) // 2]) and jpeg_truncated(whole[:-2])
    assert truncation(whole[:-2], "jpg").startswith("truncated JPEG") and truncation(whole, "jpg") is None
    assert truncation(whole[:-2], "bin").startswith("truncated JPEG")  # recognised by its bytes, not its name
    png = cv2.imencode(".png", _photo())[1].tobytes()
    assert truncation(png, "png") is None and truncation(png[:-20], "png") == "truncated PNG (no IEND chunk)"


def test_jpeg_file_truncated_agrees_with_bytes(tmp_path):
    whole = cv2.imencode(".jpg", _photo())[1].tobytes()
    for name, data in {"ok.jpg": whole, "cut.jpg": whole[:-100], "tail.jpg": whole + b"x" * 200}.items():
        (tmp_path / name).write_bytes(data)
        assert jpeg_file_truncated(tmp_path / name) == jpeg_truncated(data) == (name == "cut.jpg"), name


def test_list_files_and_formats(tmp_path):
    (tmp_path / "sub" / "x.jpg").mkdir(parents=True)  # a folder named like an image is not listed
    for name in ("b.JPG", "a.png", "notes.txt", "sub/c.tif"):
        (tmp_path / name).write_bytes(b"")
    assert [Path(f).name for f in list_files(tmp_path)] == ["a.png", "b.JPG", "notes.txt"]
    assert [Path(f).name for f in list_files(tmp_path, recursive=True)] == ["a.png", "b.JPG", "notes.txt", "c.tif"]
    assert [is_image_file(n) for n in ("b.JPG", "x.tiff", "notes.txt", "noext", "clip.mp4")] == [1, 1, 0, 0, 0]
    assert not set(IMG_FORMATS) & set(VID_FORMATS)


@pytest.mark.parametrize("name", ["text.png", "empty.jpg"])
def test_unreadable_images_give_a_reason(tmp_path, name):
    (tmp_path / name).write_bytes(b"" if name == "empty.jpg" else b"not an image")
    image, reason = read_image_checked(tmp_path / name)
    assert image is None and reason in ("empty file", "not a readable image (corrupt or unsupported encoding)")
