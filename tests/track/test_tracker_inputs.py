"""What the Predictor serves a tracker besides the boxes: the head's input features per prediction row (the model's
tap), an embedding per detection, TrackTrack's recovered boxes (a second NMS at IoU 0.95), and detect.py --track and
Detector.track handing both to the tracker."""

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torchvision.ops import box_iou

import detect
from models.api.detector import Detector
from models.nn.yolo import Model
from utils.boxes import non_max_suppression, scale_boxes
from utils.data.augment import letterbox
from utils.infer.predict import Predictor
from utils.track.appearance import LOOSE_NMS_IOU, RECOVERED_MAX_IOU, TrackerNeeds
from utils.track.track_track import TrackTrack

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
WEIGHTS = SHARED / "weights" / "yolov5n.pt"
BUS = SHARED / "images" / "bus.jpg"
needs_shared = pytest.mark.skipif(not WEIGHTS.is_file(), reason="../shared is not available")


@pytest.mark.parametrize("cfg", ["yolov5n.yaml", "yolo11n.yaml"])
def test_tap_gives_the_head_input_at_each_rows_cell(cfg):
    """Rows are laid out level by level, anchors x cells within a level: a row's feature is its cell's channels,
    averaged in groups down to the narrowest level's count."""
    torch.manual_seed(0)
    model = Model(cfg).eval()
    with torch.no_grad(), model.tap_head_inputs() as tap:
        predictions = model(torch.rand(1, 3, 96, 128))[0]
    maps, rows_per_cell = tap.maps, int(model.model[-1].na)
    width = min(m.shape[1] for m in maps)
    sizes = [m.shape[2] * m.shape[3] for m in maps]
    assert predictions.shape[1] == rows_per_cell * sum(sizes)
    for level, m in enumerate(maps):
        start = rows_per_cell * sum(sizes[:level])
        for anchor, cell in [(0, 0), (rows_per_cell - 1, sizes[level] - 1), (0, sizes[level] // 2)]:
            row = start + anchor * sizes[level] + cell
            expected = m[0].reshape(m.shape[1], -1)[:, cell].reshape(width, -1).mean(1)
            torch.testing.assert_close(tap.rows(torch.tensor([row]))[0], expected)
    assert tap.rows(torch.tensor([], dtype=torch.long)).shape == (0, width)


@pytest.fixture(scope="module")
def detector():
    return Detector(str(WEIGHTS), img_size=320, conf_thres=0.1)


@needs_shared
def test_predictor_serves_embeddings_and_recovered_boxes(detector):
    predictor = detector.predictor
    image = cv2.imread(str(BUS))
    im = letterbox(image, predictor.img_size, stride=predictor.stride)[0].transpose(2, 0, 1)[::-1]
    im = np.ascontiguousarray(im)
    plain, _, _ = predictor.predict(im, image)
    predictor.serve(TrackerNeeds(loose_nms_iou=LOOSE_NMS_IOU, embeddings=True))
    try:
        boxes, _, _ = predictor.predict(im, image)
        extras = predictor.extras
    finally:
        predictor.serve(None)
    np.testing.assert_array_equal(boxes, plain)  # serving a tracker changes no detection
    assert extras.features.shape == (len(boxes), 64) and np.isfinite(extras.features).all()
    assert len(np.unique(extras.features.round(5), axis=0)) == len(boxes)  # each detection its own cell
    # the recovered boxes: a second NMS at IoU 0.95 keeps them, and they overlap no detection by IoU 0.97
    with torch.no_grad():
        x = torch.from_numpy(im)[None].float() / 255
        loose = non_max_suppression(detector.model(x)[0], 0.1, LOOSE_NMS_IOU, max_det=predictor.options.max_det)[0]
    loose[:, :4] = scale_boxes(x.shape[2:], loose[:, :4], image.shape).round()
    recovered = torch.from_numpy(extras.recovered)
    assert len(loose) > len(boxes) and 0 < len(recovered) < len(loose)
    assert (box_iou(recovered[:, :4], torch.from_numpy(boxes[:, :4])).max(1).values < RECOVERED_MAX_IOU).all()
    assert (box_iou(recovered[:, :4], loose[:, :4]).max(1).values > 0.999).all()


@needs_shared
def test_a_model_without_a_tap_warns_and_gives_no_embeddings(detector, log):
    class Wrapped(torch.nn.Module):  # an export or an ensemble: predictions only
        def __init__(self, model):
            super().__init__()
            self.inner, self.names, self.stride, self.family = model, model.names, model.stride, model.family

        def forward(self, x):
            return self.inner(x)

    predictor = detector.predictor
    predictor.serve(None)
    other = Predictor(Wrapped(detector.model), detector.device, predictor.options, log=False)
    other.serve(TrackerNeeds(embeddings=True))
    assert any("with_reid: this model offers no feature maps" in m for m in log.messages)
    image = cv2.imread(str(BUS))
    im = np.ascontiguousarray(letterbox(image, other.img_size, stride=other.stride)[0].transpose(2, 0, 1)[::-1])
    other.predict(im, image)
    assert other.extras.features is None


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("seq")
    image = cv2.imread(str(BUS))
    for i in range(4):
        cv2.imwrite(str(folder / f"f{i + 1}.jpg"), np.ascontiguousarray(image[100:740, 8 * i : 8 * i + 480]))
    return folder


def _spy(monkeypatch) -> list:
    """The recovered boxes and features each TrackTrack update is given."""
    seen, update = [], TrackTrack.update

    def spy(self, detections, frame=None, recovered=None, features=None):
        seen.append((len(detections), recovered, features))
        return update(self, detections, frame, recovered, features)

    monkeypatch.setattr(TrackTrack, "update", spy)
    return seen


@needs_shared
@pytest.mark.slow
def test_detect_and_detector_hand_tracktrack_its_extras(tmp_path, frames, monkeypatch):
    reid = tmp_path / "tt_reid.yaml"
    reid.write_text("tracker_type: tracktrack\nwith_reid: true\ngmc_method: none\n")
    seen = _spy(monkeypatch)
    out = detect.run(weights=str(WEIGHTS), source=str(frames), imgsz=320, project=tmp_path, track=reid, nosave=True)
    assert out.frames == 4 and len(seen) == 4
    assert all(r is not None and f is not None and f.shape == (n, 64) for n, r, f in seen)
    assert any(len(r) for _, r, _ in seen)
    seen.clear()
    detector = Detector(str(WEIGHTS), img_size=320)
    results = [detector.track(cv2.imread(str(p)), tracker="tracktrack.yaml")[0] for p in sorted(frames.iterdir())]
    assert len(seen) == 4 and all(r is not None and f is None for _, r, f in seen)  # no with_reid: no features
    assert all(r.id is not None for r in results[1:])
