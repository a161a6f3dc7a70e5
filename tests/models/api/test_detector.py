"""models.api.detector: the Detector on every input kind against detect.py's boxes, Results, bad inputs,
load_detector."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

import detect
from models import Detector, Results, load_detector
from utils.errors import DetectorError, SourceError, YoloError

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared"
WEIGHTS = SHARED / "weights" / "yolov5n.pt"
BUS = SHARED / "images" / "bus.jpg"
REFERENCE = SHARED / "reference" / "detect_yolov5n_640_labels" / "bus.txt"
COCO = SHARED / "datasets" / "coco128" / "images" / "train2017"
needs_shared = pytest.mark.skipif(
    not (WEIGHTS.is_file() and REFERENCE.is_file() and COCO.is_dir()), reason="../shared is not available"
)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def detector():
    return Detector(str(WEIGHTS), device="cpu")


def _iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of (n, 4) and (m, 4) xyxy boxes."""
    lt, rb = torch.max(a[:, None, :2], b[:, :2]), torch.min(a[:, None, 2:], b[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    area = lambda x: (x[:, 2:] - x[:, :2]).prod(1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b) - inter)


def assert_matches_reference(result: Results, reference: Path = REFERENCE) -> None:
    """Each reference box (class, xywhn, conf) has a box of the same class with IoU >= 0.95, conf within 0.02."""
    ref = torch.from_numpy(np.loadtxt(reference, ndmin=2)).float()
    h, w = result.orig_shape
    xy, wh = ref[:, 1:3] * torch.tensor([w, h]), ref[:, 3:5] * torch.tensor([w, h])
    ref_xyxy = torch.cat((xy - wh / 2, xy + wh / 2), 1)
    assert len(result) == len(ref), result
    iou = _iou(ref_xyxy, result.xyxy.float())
    for i in range(len(ref)):
        j = int(iou[i].argmax())
        assert iou[i, j] >= 0.95 and int(result.cls[j]) == int(ref[i, 0]), (i, iou[i])
        assert abs(float(result.conf[j]) - float(ref[i, 5])) <= 0.02


@pytest.mark.slow
@needs_shared
def test_every_input_kind_gives_the_reference_boxes(detector):
    bgr = cv2.imread(str(BUS))
    rgb = np.ascontiguousarray(bgr[..., ::-1])
    tensor = torch.from_numpy(rgb).permute(2, 0, 1)
    inputs = [str(BUS), BUS, bgr, Image.open(BUS), tensor, tensor.float() / 255, tensor[None]]
    results = detector(inputs)
    assert len(results) == len(inputs)
    for result in results:
        assert_matches_reference(result)
        assert torch.equal(result.boxes, results[0].boxes)  # every kind is the same image: identical boxes
    assert_matches_reference(detector(rgb, rgb=True)[0])
    assert results[0].path == str(BUS) and results[2].path == "image2"


@pytest.mark.slow
@needs_shared
def test_boxes_equal_detect_save_txt(detector, tmp_path):
    files = sorted(COCO.glob("*.jpg"))[:4]
    source = tmp_path / "src"
    source.mkdir()
    for f in files:
        (source / f.name).symlink_to(f)
    args = ["--weights", str(WEIGHTS), "--source", str(source), "--device", "cpu", "--save-txt", "--save-conf"]
    assert detect.main([*args, "--project", str(tmp_path), "--name", "d", "--nosave"]) == 0
    for f, result in zip(files, detector(files)):
        label = tmp_path / "d" / "labels" / f"{f.stem}.txt"
        rows = np.loadtxt(label, ndmin=2) if label.is_file() else np.zeros((0, 6))
        ours = torch.cat((result.cls[:, None], result.xywhn, result.conf[:, None]), 1).flip(0).numpy()
        np.testing.assert_allclose(ours, rows, atol=1e-5)  # detect writes %g (6 significant digits)


@needs_shared
def test_results_api(detector, tmp_path):
    result = detector(str(BUS))[0]
    assert repr(result) == "Results(bus.jpg 810x1080: 4 persons, 1 bus)"
    assert result.orig_shape == (1080, 810) and result.names[5] == "bus"
    assert result.xyxy.shape == (5, 4) and result.xywhn.max() <= 1 and (result.conf[:-1] >= result.conf[1:]).all()
    plotted = result.plot()
    assert plotted.shape == result.image.shape and not np.array_equal(plotted, result.image)
    saved = result.save(tmp_path / "out")
    assert saved == tmp_path / "out" / "bus.jpg" and cv2.imread(str(saved)).shape == (1080, 810, 3)
    crops = result.crop(tmp_path / "out")
    assert len(crops) == 5 and len(list((tmp_path / "out" / "crops" / "person").glob("*.jpg"))) == 4
    data = json.loads(result.to_json())
    assert data == result.to_dict() and len(data["boxes"]) == 5 and data["boxes"][0]["name"] == "person"


@needs_shared
@pytest.mark.parametrize(
    "bad, words",
    [
        ("missing.jpg", "cannot read image"),
        ([], "no inputs"),
        (np.zeros((64, 64), np.uint8), "shape (H, W, 3)"),
        (np.zeros((64, 64, 3), np.float32), "must be uint8"),
        (torch.zeros(4, 64, 64), "(3, H, W) or (B, 3, H, W)"),
        (torch.full((3, 64, 64), 2.0), "values in [0, 1]"),
        (torch.zeros(3, 64, 64, dtype=torch.int32), "uint8 or float"),
        (42, "cannot detect on a int"),
    ],
)
def test_bad_inputs_raise_one_line(detector, tmp_path, bad, words):
    if isinstance(bad, str):
        bad = str(tmp_path / bad)
    with pytest.raises(DetectorError) as info:
        detector(bad)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, YoloError)


@needs_shared
@pytest.mark.parametrize(
    "image, words",
    [
        (np.zeros((100, 100, 3), np.uint8), "not a ndarray of shape (100, 100, 3)"),
        (torch.zeros(1, 3, 64, 64), "not a Tensor of shape (1, 3, 64, 64)"),
        (Image.new("RGB", (20, 20)), "not a Image"),
        ([np.zeros((8, 8, 3), np.uint8)], "not a list"),
    ],
)
def test_stream_of_an_image_is_one_line(detector, image, words):
    """stream() reads sources (paths, URLs, webcams); an image given to it is one line saying what to call instead,
    not an array's repr over many lines (issue 35)."""
    with pytest.raises(SourceError) as info:
        next(detector.stream(image))
    assert words in str(info.value) and "detector(image)" in str(info.value) and "\n" not in str(info.value)


def test_corrupt_file_and_bad_options(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff garbage")
    with pytest.raises(YoloError, match="--conf-thres"):
        Detector(str(WEIGHTS), device="cpu", conf_thres=2)
    if WEIGHTS.is_file():
        with pytest.raises(DetectorError, match="cannot read image"):
            Detector(str(WEIGHTS), device="cpu")(broken)


@pytest.mark.slow
@needs_shared
def test_ensemble_of_the_same_weights_gives_the_same_boxes(detector):
    ensemble = Detector([str(WEIGHTS), str(WEIGHTS)], device="cpu")
    assert type(ensemble.model).__name__ == "Ensemble"
    ours, single = ensemble(str(BUS))[0], detector(str(BUS))[0]
    assert torch.equal(ours.boxes[:, :4], single.boxes[:, :4]) and torch.allclose(ours.conf, single.conf)


@needs_shared
def test_augment_runs_and_finds_the_bus(log):
    model, precision = load_detector(str(WEIGHTS), CPU, augment=True)
    assert type(model).__name__ == "TTAModel" and not precision.half
    assert any("test-time augmentation" in m for m in log.messages)
    result = Detector(model, device="cpu")(str(BUS))[0]
    assert "bus" in repr(result) and "person" in repr(result)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """An 8-frame video panning across bus.jpg (8 px a frame): the same objects in every frame, moving."""
    image = cv2.imread(str(BUS))
    path = tmp_path_factory.mktemp("clip") / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (480, 640))
    for i in range(8):
        writer.write(np.ascontiguousarray(image[100 : 100 + 640, 8 * i : 8 * i + 480]))
    writer.release()
    return path


def _frames(path: Path) -> list[np.ndarray]:
    cap, frames = cv2.VideoCapture(str(path)), []
    while (frame := cap.read()[1]) is not None:
        frames.append(frame)
    return frames


@pytest.mark.slow
@needs_shared
def test_stream_yields_one_result_per_frame_lazily(detector, clip):
    stream = detector.stream(str(clip))
    first = next(stream)  # made on demand: a generator, not a list
    rest = list(stream)
    assert [r.frame for r in [first, *rest]] == list(range(1, 9)) and first.id is None
    same = detector(_frames(clip)[0])[0]  # the frame as an array: the same boxes
    assert torch.allclose(first.boxes, same.boxes) and first.path == str(clip)


def _bus_id(result: Results) -> int:
    """The identity of the largest box (the bus)."""
    areas = (result.xyxy[:, 2:] - result.xyxy[:, :2]).prod(1)
    return int(result.id[int(areas.argmax())])


@pytest.mark.slow
@needs_shared
def test_track_keeps_identities_on_a_video_and_in_a_frame_loop(clip):
    detector = Detector(str(WEIGHTS), device="cpu", img_size=320)
    on_video = detector.track(str(clip), tracker="bytetrack.yaml")
    assert len(on_video) == 8 and all(r.id is not None and len(r.id) == len(r) for r in on_video)
    assert {_bus_id(r) for r in on_video} == {_bus_id(on_video[0])}  # the bus keeps one identity
    looped = [detector.track(frame, tracker="bytetrack.yaml", persist=True)[0] for frame in _frames(clip)]
    assert [r.id.tolist() for r in looped] == [r.id.tolist() for r in on_video[: len(looped)]]
    again = detector.track(_frames(clip)[0], tracker="bytetrack.yaml", persist=False)[0]
    assert sorted(again.id.tolist()) == list(range(1, len(again) + 1))  # a fresh tracker numbers from 1
    stream = detector.track(str(clip), tracker="bytetrack.yaml", stream=True)
    assert not isinstance(stream, list) and len(list(stream)) == 8


@pytest.mark.slow
@needs_shared
def test_saved_frames_and_arrays_never_overwrite_each_other(detector, clip, tmp_path):
    frames = list(detector.stream(str(clip)))[:2]
    saved = [r.save(tmp_path / "out") for r in frames]
    saved += [detector(_frames(clip)[0])[0].save(tmp_path / "out") for _ in range(2)]
    assert len({p.name for p in saved}) == 4 and all(p.is_file() for p in saved)
    assert [p.name for p in saved[:2]] == ["clip_1.jpg", "clip_2.jpg"]
