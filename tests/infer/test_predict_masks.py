"""The Predictor on a segment model: the model's task decides; boxes as the detector part gives them, each with its
own mask (computed inside its box at the original size); detect.py draws them and writes polygon rows."""

import cv2
import numpy as np
import pytest
import torch

import detect
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint
from utils.boxes import non_max_suppression, scale_boxes
from utils.data.augment import letterbox
from utils.infer.masks import instance_masks
from utils.infer.predict import PredictOptions, Predictor

CPU = torch.device("cpu")


class _BoxesOnly(torch.nn.Module):
    """The same model seen as a detector: its predictions only, no task."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.names, self.stride, self.family = model, model.names, model.stride, model.family

    def forward(self, x):
        return (self.inner(x)[0],)


@pytest.fixture(scope="module")
def seg_model():
    torch.manual_seed(3)
    model = Model("yolov8n-seg.yaml", nc=2).eval()
    model.names = ["a", "b"]
    return model


def _image() -> np.ndarray:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (150, 230, 3), dtype=np.uint8)
    cv2.circle(image, (80, 70), 40, (250, 250, 250), -1)
    return image


def test_boxes_are_the_detectors_and_each_mask_is_its_own(seg_model):
    options = PredictOptions(img_size=128, conf_thres=0.0, max_det=15)
    image = _image()
    im = letterbox(image, [128, 128], stride=32)[0].transpose(2, 0, 1)[::-1].copy()
    predictor = Predictor(seg_model, CPU, options)
    boxes, masks, input_shape, _ = predictor.predict_masks(im, image)
    plain, _, _ = Predictor(_BoxesOnly(seg_model), CPU, options).predict(im, image)
    assert np.array_equal(boxes, plain) and len(masks) == len(boxes) == 15
    # the coefficients each kept box carried: those of the prediction row it came from
    with torch.no_grad():
        out = seg_model(torch.from_numpy(im)[None].float() / 255)
    rows = non_max_suppression(
        torch.cat((out[0], out.coefficients), 2), 0.0, predictor.options.iou_thres, max_det=15, extra=32
    )[0]
    rows[:, :4] = scale_boxes(input_shape[2:], rows[:, :4], image.shape)
    assert np.allclose(rows[:, :6].numpy(), boxes, atol=1e-4)
    expected = instance_masks(out.protos[0], rows[:, 6:], boxes, input_shape[2:], image.shape[:2])
    assert all(np.array_equal(a, b) for a, b in zip(masks.crops, expected.crops))
    assert any(c.any() for c in masks.crops) and masks.shape == image.shape[:2]


def test_detect_draws_masks_and_writes_polygon_rows(seg_model, tmp_path):
    weights = tmp_path / "seg.pt"
    save_checkpoint(checkpoint_dict(seg_model), weights)
    source = tmp_path / "in.png"
    cv2.imwrite(str(source), _image())
    run = detect.run(
        weights=str(weights),
        source=str(source),
        imgsz=128,
        conf_thres=0.0,
        max_det=5,
        save_txt=True,
        save_conf=True,
        project=str(tmp_path / "runs"),
        name="seg",
    )
    result = run.results[0]
    assert result.masks is not None and len(result.masks) == len(result.boxes) == 5
    rows = [line.split() for line in (run.save_dir / "labels" / "in.txt").read_text().splitlines()]
    outlined = sum(len(result.masks.polygon(i)) >= 3 for i in range(5))
    assert len(rows) == outlined > 0
    for row in rows:  # cls, an even count of normalised coordinates (3 vertices at least), conf
        values = [float(v) for v in row[1:-1]]
        assert row[0] in ("0", "1") and len(values) % 2 == 0 and len(values) >= 6
        assert 0 <= min(values) and max(values) <= 1 and 0 <= float(row[-1]) <= 1
    drawn = cv2.imread(str(run.save_dir / "in.png"))  # lossless: every mask pixel is tinted, others are not
    masked = np.any([result.masks.full(i) for i in range(5)], 0)
    changed = (drawn != _image()).any(2)
    assert masked.any() and changed[masked].mean() > 0.9
    box_pixels = np.zeros_like(masked)
    for x1, y1, x2, y2 in result.boxes[:, :4].astype(int):
        box_pixels[max(y1 - 30, 0) : y2 + 3, max(x1 - 3, 0) : x2 + 3] = True  # box lines and labels above them
    assert not changed[~box_pixels].any()
