"""utils.infer.predict: the Predictor on real weights and images, a stand-in backend, option checks and timing text."""

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from models.api.detector import load_detector
from models.nn.family import YOLO26, YOLOV5
from utils.errors import DetectError
from utils.infer.predict import PredictOptions, Predictor, check_options, detections_text, shapes_text

SHARED = Path(__file__).resolve().parents[3] / "shared"
WEIGHTS = SHARED / "weights" / "yolov5n.pt"
IMAGES = SHARED / "images"
needs_shared = pytest.mark.skipif(not WEIGHTS.is_file(), reason="../shared/weights/yolov5n.pt is not available")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def yolov5n():
    return load_detector(str(WEIGHTS), CPU)


@needs_shared
def test_predictor_on_real_images(yolov5n):
    model, precision = yolov5n
    predictor = Predictor(model, CPU, PredictOptions(img_size=640, classes=0), precision)  # persons only
    predictions = list(predictor.stream(IMAGES, verbose=False))
    assert [Path(p.result.path).name for p in predictions] == ["bus.jpg", "zidane.jpg"]
    for p in predictions:
        h, w = p.result.shape
        assert p.image.shape[:2] == (h, w) and p.result.frame == 0 and not p.video
        boxes = p.result.boxes
        assert boxes.shape[1] == 6 and len(boxes) >= 2 and set(boxes[:, 5].tolist()) == {0.0}
        assert (boxes[:, [0, 2]] <= w).all() and (boxes[:, [1, 3]] <= h).all()  # original pixels, not 640 input
        assert (np.diff(boxes[:, 4]) <= 0).all()  # highest confidence first
        assert p.input_shape[2] % 32 == 0 and p.input_shape[3] % 32 == 0 and max(p.input_shape[2:]) == 640
    assert predictor.count == 2  # the warm-up pass is not counted
    assert predictor.shapes == [(1, 3, 640, 480), (1, 3, 384, 640)]
    assert all(t > 0 for t in predictor.speed_ms)
    assert predictor.speed_line().endswith("per image at shapes (1, 3, 640, 480), (1, 3, 384, 640)")
    assert predictor.skipped == []


@needs_shared
def test_loader_is_built_with_the_model_stride(yolov5n, tmp_path):
    model, precision = yolov5n
    predictor = Predictor(model, CPU, PredictOptions(img_size=[100, 150]), precision)
    assert predictor.img_size == [128, 160]  # rounded up to stride 32
    cv2.imwrite(str(tmp_path / "a.jpg"), cv2.imread(str(IMAGES / "bus.jpg")))
    cv2.imwrite(str(tmp_path / "b.png"), np.zeros((1, 4000, 3), np.uint8))  # too thin to letterbox: skipped
    (prediction,) = predictor.stream(tmp_path, verbose=False)
    assert prediction.input_shape == (1, 3, 128, 96)  # auto: minimum padding to a stride multiple
    assert [Path(p).name for p in predictor.skipped] == ["b.png"]


@needs_shared
def test_classes_the_model_lacks_are_refused(yolov5n):
    model, precision = yolov5n
    with pytest.raises(DetectError, match=r"--classes 80 99: this model's class ids are in \[0, 80\)"):
        Predictor(model, CPU, PredictOptions(classes=[0, 99, 80]), precision)


class _OneBoxBackend(torch.nn.Module):
    """A stand-in inference backend: one confident class-1 box in the middle of every input."""

    names = ["a", "b"]
    stride = torch.tensor([8.0, 16.0])
    family, imgsz = YOLOV5, None

    def forward(self, x):
        h, w = x.shape[2:]
        row = torch.tensor([[w / 2, h / 2, w / 4, h / 4, 0.9, 0.1, 0.8]])  # cx cy w h obj cls0 cls1
        return (row[None].repeat(x.shape[0], 1, 1),)


def test_predictor_runs_any_backend_and_counts_video_frames(tmp_path):
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    if not writer.isOpened():
        pytest.skip("this OpenCV build cannot write MJPG video")
    for i in range(3):
        writer.write(np.full((48, 64, 3), 40 * i, np.uint8))
    writer.release()
    predictor = Predictor(_OneBoxBackend(), CPU, PredictOptions(img_size=64, conf_thres=0.5))
    predictions = list(predictor.stream(str(video), verbose=False))
    assert [p.result.frame for p in predictions] == [1, 2, 3] and all(p.video for p in predictions)
    boxes = predictions[0].result.boxes
    assert boxes.tolist() == [[24.0, 18.0, 40.0, 30.0, pytest.approx(0.72), 1.0]]  # 0.9 * 0.8, original pixels


class _SideBySideBackend(_OneBoxBackend):
    """_OneBoxBackend as a runtime that runs two inputs at once (parallel_runs): records what it started and ran."""

    parallel_runs = 2

    def __init__(self):
        super().__init__()
        self.events = []

    def start(self, x):
        self.events.append(("start", id(x), tuple(x.shape)))

    def forward(self, x):
        self.events.append(("run", id(x), tuple(x.shape)))
        return super().forward(x)


def test_a_backend_that_runs_inputs_side_by_side_gets_the_next_image_started_first(tmp_path):
    for name, (h, w) in {"a.jpg": (48, 64), "b.jpg": (64, 48), "c.jpg": (40, 64)}.items():
        cv2.imwrite(str(tmp_path / name), np.full((h, w, 3), 90, np.uint8))
    options = PredictOptions(img_size=64, conf_thres=0.5)
    expected = [p.result for p in Predictor(_OneBoxBackend(), CPU, options).stream(tmp_path, verbose=False)]
    backend = _SideBySideBackend()
    predictor = Predictor(backend, CPU, options)
    got = [p.result for p in predictor.stream(tmp_path, verbose=False)]
    assert [(r.path, r.frame, r.boxes.tolist()) for r in got] == [(r.path, r.frame, r.boxes.tolist()) for r in expected]
    kinds = [kind for kind, _, _ in backend.events]
    assert kinds == ["run", "start", "start", "run", "start", "run", "run"]  # warm-up, then one image ahead
    started = [(i, shape) for kind, i, shape in backend.events if kind == "start"]
    assert [(i, shape) for kind, i, shape in backend.events[1:] if kind == "run"] == started  # the tensors started
    assert [shape[2:] for _, shape in started] == [(48, 64), (64, 48), (48, 64)]  # a, b, c in order
    assert predictor.count == 3 and predictor.started == {}


def test_check_options_names_the_flag():
    check_options(imgsz=[640, 480], conf_thres=0.0, iou_thres=1, max_det=5, classes=[0, 3], line_thickness=2)
    for options, words in (
        ({"conf_thres": 1.5}, "--conf-thres (conf_thres=)"),
        ({"imgsz": [1, 2, 3]}, "takes one or two values, got 3"),
        ({"max_det": True}, "must be a number, got True"),
        ({"classes": [-1]}, "--classes (classes=)"),
        ({"vid_stride": 0}, "--vid-stride (vid_stride=)"),
    ):
        with pytest.raises(DetectError, match=words.replace("(", r"\(").replace(")", r"\)")):
            check_options(**options)


def test_log_texts():
    names = ["person", "bus"]
    boxes = np.array([[0, 0, 1, 1, 0.9, 1], [0, 0, 1, 1, 0.8, 0], [0, 0, 1, 1, 0.7, 0]], np.float32)
    assert detections_text(boxes, names) == "2 persons, 1 bus, "
    assert detections_text(boxes[:0], names) == "(no detections), "
    shapes = [(1, 3, 32, 64), (1, 3, 64, 32), (1, 3, 64, 64), (1, 3, 96, 64)]
    assert shapes_text(shapes[:1]) == "shape (1, 3, 32, 64)"
    assert shapes_text(shapes[:2]) == "shapes (1, 3, 32, 64), (1, 3, 64, 32)"
    assert shapes_text(shapes) == "4 letterboxed shapes (last (1, 3, 96, 64))"


def test_defaults_come_from_the_model_and_a_given_value_wins(log):
    """Size and thresholds left at None are the model's (training size, family thresholds); given ones win; a
    --max-det above what an end-to-end head can give is capped with a warning."""
    from utils.infer.predict import model_defaults

    model = _OneBoxBackend()
    model.family, model.imgsz = YOLO26, 160
    o = model_defaults(PredictOptions(), model)
    assert (o.img_size, o.conf_thres, o.iou_thres, o.max_det) == (160, 0.25, 0.7, 300)
    assert "YOLO26 model: image size 160 (the size the weights record)" in log.text
    given = model_defaults(PredictOptions(img_size=320, conf_thres=0.5, iou_thres=0.3, max_det=500), model)
    assert (given.img_size, given.conf_thres, given.iou_thres, given.max_det) == (320, 0.5, 0.3, 300)
    assert "--max-det 500: YOLO26 models give at most 300" in log.text
    model.imgsz = 100  # recorded off the stride (16): used at 112, and logged so (issue 35)
    assert model_defaults(PredictOptions(), model).img_size == 112
    assert "image size 112 (the size the weights record, 100, rounded up to a multiple of stride 16)" in log.text
    model.family, model.imgsz = YOLOV5, None
    assert (
        model_defaults(PredictOptions(), model).img_size == 640
        and model_defaults(PredictOptions(), model).iou_thres == 0.45
    )
