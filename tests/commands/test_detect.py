"""detect.py end to end against the official YOLOv5 outputs, its bad-input handling, and utils.plots."""

import os
import re
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

import detect
from utils.files import RUN_MARKER
from utils.infer.predict import inference_size
from utils.plots import Annotator, colors, plot_images, save_one_box

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
WEIGHTS = SHARED / "weights" / "yolov5n.pt"
IMAGES = SHARED / "images"
REFERENCE = SHARED / "reference" / "detect_yolov5n_640_labels"

needs_shared = pytest.mark.skipif(
    not (WEIGHTS.is_file() and IMAGES.is_dir() and REFERENCE.is_dir()),
    reason="../shared (yolov5n.pt, images, reference labels) is not available",
)


def _read_labels(file: Path) -> np.ndarray:
    return np.loadtxt(file, ndmin=2).reshape(-1, 6)


def _iou_xywh(a: np.ndarray, b: np.ndarray) -> float:
    ax1, ay1, ax2, ay2 = a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2
    bx1, by1, bx2, by2 = b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _assert_matches_reference(labels_dir: Path) -> None:
    """Every reference box has its own same-class box with IoU >= 0.95 and |conf diff| <= 0.02; no extras."""
    references = sorted(REFERENCE.glob("*.txt"))
    assert references
    assert sorted(p.name for p in labels_dir.glob("*.txt")) == [p.name for p in references]
    for ref_file in references:
        ref, ours = _read_labels(ref_file), _read_labels(labels_dir / ref_file.name)
        assert len(ours) == len(ref), f"{ref_file.name}: {len(ours)} boxes, reference has {len(ref)}"
        unused = list(range(len(ours)))
        for r in ref:
            candidates = [(j, _iou_xywh(r[1:5], ours[j, 1:5])) for j in unused if ours[j, 0] == r[0]]
            assert candidates, f"{ref_file.name}: no box of class {int(r[0])} left for {r}"
            j, iou = max(candidates, key=lambda c: c[1])
            assert iou >= 0.95, f"{ref_file.name}: best IoU {iou:.3f} for {r}"
            assert abs(ours[j, 5] - r[5]) <= 0.02, f"{ref_file.name}: conf {ours[j, 5]} vs {r[5]}"
            unused.remove(j)


# --- acceptance: the official outputs --------------------------------------------------------------------------


@pytest.mark.slow
@needs_shared
def test_cli_reproduces_official_labels(tmp_path, monkeypatch, log):
    monkeypatch.chdir(tmp_path)
    assert detect.main(["--weights", str(WEIGHTS), "--source", str(IMAGES), "--save-txt", "--save-conf"]) == 0
    assert "Traceback" not in log.text and not [m for m in log.messages if m.startswith(("ERROR", "WARNING"))]
    exp = tmp_path / "runs" / "detect" / "exp"
    _assert_matches_reference(exp / "labels")
    assert f"image 1/2 {IMAGES / 'bus.jpg'}: 640x480 4 persons, 1 bus, " in log.text
    assert f"image 2/2 {IMAGES / 'zidane.jpg'}: 384x640 2 persons, 1 tie, " in log.text
    (speed,) = [m for m in log.messages if m.startswith("Speed: ")]
    pattern = r"Speed: \d+\.\dms pre-process, \d+\.\dms inference, \d+\.\dms NMS per image at shapes "
    assert re.fullmatch(pattern + r"\(1, 3, 640, 480\), \(1, 3, 384, 640\)", speed), speed  # letterboxed shapes
    absolute = Path.cwd() / "runs" / "detect" / "exp"  # printed absolute, so it can be opened from anywhere
    assert log.messages[-1] == f"Results saved to {absolute}, 2 label files in {absolute / 'labels'}"
    for name in ("bus.jpg", "zidane.jpg"):  # annotated copies at the original size
        assert cv2.imread(str(exp / name)).shape == cv2.imread(str(IMAGES / name)).shape
    names = sorted(p.name for p in exp.iterdir())
    assert names == [RUN_MARKER, "bus.jpg", "labels", "zidane.jpg"]  # no crops, no videos; the run folder's marker


@pytest.mark.slow
@needs_shared
def test_run_returns_detections_and_increments_folders(tmp_path):
    kwargs = dict(weights=str(WEIGHTS), source=str(IMAGES / "bus.jpg"), project=tmp_path, nosave=True)
    first = detect.run(**kwargs)
    second = detect.run(**kwargs, classes=[5], save_txt=True)
    assert first.save_dir == tmp_path / "exp" and second.save_dir == tmp_path / "exp2"
    (result,) = first.results
    assert result.shape == (1080, 810) and result.frame == 0
    assert sorted(result.boxes[:, 5].astype(int).tolist()) == [0, 0, 0, 0, 5]
    assert (result.boxes[:, [0, 2]] <= 810).all() and (result.boxes[:, [1, 3]] <= 1080).all()
    assert all(t > 0 for t in first.speed_ms)
    assert second.results[0].boxes[:, 5].tolist() == [5.0]  # --classes 5: the bus only
    assert [p.name for p in first.save_dir.iterdir()] == [RUN_MARKER]  # --nosave wrote nothing but the marker
    labels = np.loadtxt(second.save_dir / "labels" / "bus.txt", ndmin=2)
    assert labels.shape == (1, 5) and labels[0, 0] == 5  # no --save-conf: cls cx cy w h


@pytest.mark.slow
@needs_shared
def test_augment_and_ensemble_run(tmp_path, log):
    args = ["--source", str(IMAGES / "bus.jpg"), "--project", str(tmp_path), "--save-txt", "--save-conf", "--nosave"]
    assert detect.main(["--weights", str(WEIGHTS), *args, "--name", "one"]) == 0
    assert detect.main(["--weights", str(WEIGHTS), str(WEIGHTS), *args, "--name", "two"]) == 0
    assert detect.main(["--weights", str(WEIGHTS), *args, "--name", "tta", "--augment"]) == 0
    assert any("test-time augmentation" in m for m in log.messages)
    one, two = (_read_labels(tmp_path / n / "labels" / "bus.txt") for n in ("one", "two"))
    np.testing.assert_allclose(two, one, atol=1e-5)  # the same weights twice: the same boxes
    tta = _read_labels(tmp_path / "tta" / "labels" / "bus.txt")
    assert 5 in tta[:, 0] and (tta[:, 0] == 0).sum() >= 3  # still the bus and the persons


@pytest.mark.slow
@needs_shared
def test_folder_with_corrupt_images_processes_the_rest(tmp_path, log):
    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(IMAGES / "bus.jpg", source / "bus.jpg")
    data = (IMAGES / "zidane.jpg").read_bytes()
    (source / "cut.jpg").write_bytes(data[: len(data) // 3])
    (source / "noise.png").write_bytes(os.urandom(500))
    out = detect.run(
        weights=str(WEIGHTS), source=str(source), project=tmp_path / "runs", save_crop=True, hide_conf=True
    )
    assert [Path(r.path).name for r in out.results] == ["bus.jpg"]
    assert sorted(Path(p).name for p in out.skipped) == ["cut.jpg", "noise.png"]
    warnings = [line for line in log.messages if line.startswith("WARNING: skipping")]
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    crops = out.save_dir / "crops"
    assert sorted(p.name for p in (crops / "person").iterdir()) == ["bus.jpg", "bus2.jpg", "bus3.jpg", "bus4.jpg"]
    assert (crops / "bus" / "bus.jpg").is_file()
    assert (out.save_dir / "bus.jpg").is_file() and not (out.save_dir / "cut.jpg").exists()


@needs_shared
def test_video_source_saves_video_and_per_frame_labels(tmp_path):
    frame = cv2.resize(cv2.imread(str(IMAGES / "bus.jpg")), (240, 320))
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 5, (240, 320))
    for _ in range(3):
        writer.write(frame)
    writer.release()
    out = detect.run(weights=str(WEIGHTS), source=str(video), imgsz=320, project=tmp_path / "runs", save_txt=True)
    assert [r.frame for r in out.results] == [1, 2, 3]
    assert sorted(p.name for p in (out.save_dir / "labels").iterdir()) == ["clip_1.txt", "clip_2.txt", "clip_3.txt"]
    saved = cv2.VideoCapture(str(out.save_dir / "clip.mp4"))
    assert saved.isOpened() and int(saved.get(cv2.CAP_PROP_FRAME_COUNT)) == 3


# --- bad inputs: one line, exit 1, no traceback ------------------------------------------------------------


def _assert_one_error_line(code: int, log, expected: str) -> None:
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert code == 1 and "Traceback" not in log.text, log.text
    assert len(errors) == 1 and "\n" not in errors[0] and errors[0].startswith("ERROR: ") and expected in errors[0]


@needs_shared
def test_cli_refuses_malicious_pickle(tmp_path, log):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    evil = tmp_path / "evil.pt"
    torch.save({"model": Payload(), "epoch": 1}, evil)
    code = detect.main(["--weights", str(evil), "--source", str(IMAGES), "--project", str(tmp_path / "r")])
    assert not marker.exists(), "the pickle payload ran"
    _assert_one_error_line(code, log, "refusing to load")


@needs_shared
def test_cli_truncated_weights(tmp_path, log):
    cut = tmp_path / "cut.pt"
    data = WEIGHTS.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    code = detect.main(["--weights", str(cut), "--source", str(IMAGES), "--project", str(tmp_path / "r")])
    _assert_one_error_line(code, log, "cut.pt")
    assert not (tmp_path / "r").exists()


@needs_shared
@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing_source", "source not found"),
        ("empty_dir", "is empty"),
        ("unsupported", "unsupported file type"),
        ("all_corrupt", "could be read"),
        ("foreign_weights", "not a YOLO checkpoint"),
        ("missing_weights", "weights file not found"),
    ],
)
def test_main_bad_inputs_exit_1(tmp_path, log, case, expected):
    source, weights = tmp_path / "in", WEIGHTS
    source.mkdir()
    if case == "missing_source":
        source = source / "nope.jpg"
    elif case == "unsupported":
        source = source / "clip.xyz"
        source.write_text("?")
    elif case == "all_corrupt":
        (source / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    elif case == "foreign_weights":
        weights = tmp_path / "other.pt"
        torch.save({"state": torch.zeros(3)}, weights)
        source = IMAGES
    elif case == "missing_weights":
        weights, source = tmp_path / "absent.pt", IMAGES
    code = detect.main(["--weights", str(weights), "--source", str(source), "--project", str(tmp_path / "r")])
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert code == 1 and len(errors) == 1 and expected in errors[0] and "\n" not in errors[0], log.messages
    if case != "all_corrupt":
        assert not (tmp_path / "r").exists()  # nothing was run, so no run folder was made


# --- options ---------------------------------------------------------------------------------------------------


def test_parse_opt_yolov5_defaults_and_aliases():
    opt = detect.parse_opt([])
    # The size and thresholds are the model's unless given: its training size, its family's thresholds
    assert opt.weights == "yolov5s.pt" and opt.imgsz is None and opt.conf_thres is None and opt.source is None
    assert opt.iou_thres is None and opt.max_det is None and opt.project == "runs/detect" and opt.name == "exp"
    assert opt.line_thickness is None and opt.vid_stride == 1 and opt.half is None and not opt.bf16  # None: scaled
    assert detect.parse_opt(["--img", "320"]).imgsz == [320, 320]
    assert detect.parse_opt(["--imgsz", "320", "480"]).imgsz == [320, 480]
    assert detect.parse_opt(["--img-size", "512"]).imgsz == [512, 512]
    assert detect.parse_opt(["--half"]).half is True and detect.parse_opt(["--no-half"]).half is False
    assert detect.parse_opt(["--classes", "0", "2"]).classes == [0, 2]
    with pytest.raises(SystemExit):
        detect.parse_opt(["--img", "1", "2", "3"])


def test_inference_size_rounds_up(log):
    assert inference_size([640, 480]) == [640, 480] and not log.messages
    assert inference_size(641) == [672, 672]
    assert inference_size([100, 20]) == [128, 32]
    assert sum("multiple of max stride 32" in line for line in log.messages) == 2


# --- plots -------------------------------------------------------------------------------------------------------


def test_colors_palette():
    assert colors(0) != colors(1) and colors(3) == colors(23)
    assert colors(4, bgr=True) == colors(4)[::-1]
    assert all(0 <= v <= 255 for v in colors(7))


def test_annotator_draws_box_and_label():
    im = np.zeros((200, 300, 3), dtype=np.uint8)
    annotator = Annotator(im, line_width=2)
    annotator.box_label([50, 60, 150, 160], "person 0.87", color=(0, 255, 0))
    out = annotator.result()
    assert out[110, 50].tolist() == [0, 255, 0]  # left edge of the box
    assert out[100, 100].tolist() == [0, 0, 0]  # inside stays untouched
    assert (out[40:60, 50:100] != 0).any()  # the label tag above the box


def test_save_one_box_crops_and_never_overwrites(tmp_path):
    im = np.arange(100 * 100 * 3, dtype=np.uint32).reshape(100, 100, 3).astype(np.uint8)
    crop = save_one_box([20, 30, 60, 50], im, file=tmp_path / "c" / "x.jpg", gain=1.0, pad=0)
    assert crop.shape == (20, 40, 3)
    np.testing.assert_array_equal(crop, im[30:50, 20:60])
    save_one_box([0, 0, 99, 99], im, file=tmp_path / "c" / "x.jpg")  # grown past the edges: clipped
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["x.jpg", "x2.jpg"]
    assert cv2.imread(str(tmp_path / "c" / "x2.jpg")).shape == (100, 100, 3)


def test_plot_images_labels_and_predictions(tmp_path):
    images = torch.full((3, 3, 64, 96), 0.5)  # float in [0, 1]
    labels = torch.tensor([[0, 1, 0.5, 0.5, 0.5, 0.5], [2, 0, 0.25, 0.25, 0.2, 0.2]])
    mosaic = plot_images(
        images, labels, paths=["a.jpg", "b.jpg", "c.jpg"], fname=tmp_path / "labels.jpg", names=["person", "bicycle"]
    )
    assert (tmp_path / "labels.jpg").is_file() and mosaic.shape == (128, 192, 3)
    assert mosaic[32, 24].tolist() != mosaic[10, 140].tolist()  # box edge in tile 0 differs from plain grey
    # Predictions in pixels with confidences; the one below 0.25 is not drawn.
    preds = np.array([[1, 0, 48, 32, 40, 30, 0.9], [1, 1, 48, 32, 80, 60, 0.1]])
    uint8 = (images * 255).to(torch.uint8)
    drawn = plot_images(uint8, preds, fname=tmp_path / "preds.jpg", max_size=96)
    assert drawn.shape == (64, 96, 3) and (tmp_path / "preds.jpg").is_file()  # scaled down to max_size
    empty = plot_images(uint8, np.zeros((0, 6)), fname=tmp_path / "none.jpg")
    assert empty.shape == (128, 192, 3)
    np.testing.assert_array_equal(plot_images(uint8, preds[1:], fname=tmp_path / "low.jpg"), empty)  # 0.1: not drawn
    assert (plot_images(uint8, preds[:1], fname=tmp_path / "high.jpg") != empty).any()  # 0.9: drawn
    float_mosaic = plot_images(images, np.zeros((0, 6)), fname=tmp_path / "float.jpg")
    assert np.abs(float_mosaic.astype(int) - empty).max() <= 1  # float images in [0, 1] are scaled to 0-255


def test_plot_images_tensor_conversion_matches_numpy():
    """Tensors and arrays give the bytes of numpy's float32 round trip: [0, 1] scaled, 0-255 clipped, truncated."""
    from utils.plots import _as_uint8_images

    unit = torch.rand(2, 3, 16, 24, generator=torch.Generator().manual_seed(0))
    for images, scale in ((unit, 255), (unit * 300 - 20, 1)):  # [0, 1] is scaled; 0-255 floats are clipped
        expected = (images.numpy().astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
        for given in (images, images.numpy()):
            converted = _as_uint8_images(given)
            assert converted.dtype == np.uint8
            np.testing.assert_array_equal(converted, expected)
    uint8 = (unit * 255).to(torch.uint8)
    np.testing.assert_array_equal(_as_uint8_images(uint8), uint8.numpy())
    assert _as_uint8_images(torch.zeros(0, 3, 8, 8)).shape == (0, 3, 8, 8)
