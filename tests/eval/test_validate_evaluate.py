"""utils/eval/validate.py's evaluate(): a live model used as given, the typed result, ground truth and outputs."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models import load_model
from utils.data.hyp import load_hyp
from utils.data.loader import create_dataloader
from utils.eval.coco_io import COCO80_NAMES
from utils.eval.coco_json import load_json_ground_truth
from utils.eval.validate import ValidationOptions, ValidationResult, evaluate
from utils.eval.validate_weights import run as validate_weights
from utils.train.loss import ComputeLoss

NAMES = list(COCO80_NAMES)


@pytest.fixture(scope="module")
def split(shared, tmp_path_factory) -> Path:
    """The first 8 coco128 images as a .txt split."""
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:8]
    path = tmp_path_factory.mktemp("split") / "first8.txt"
    path.write_text("".join(f"{f}\n" for f in files))
    return path


@pytest.fixture(scope="module")
def loader(split):
    """test.py's validation loader for those images at 256 px, batch 4."""
    return create_dataloader(str(split), 256, 4, 32, rect=True, pad=0.5, workers=0, nc=80)[0]


@pytest.fixture(scope="module")
def model(shared):
    return load_model(shared / "weights/yolov5n.pt")


def test_a_training_model_is_left_as_it_was(shared, loader):
    """train.py's call: an unfused model in training mode with the loss function; mode, device and dtype stay."""
    model = load_model(shared / "weights/yolov5n.pt", fuse=False).train()
    model.hyp = load_hyp("hyp.scratch.yaml")
    weights_before = next(model.parameters()).detach().clone()
    result = evaluate(model, loader, NAMES, ComputeLoss(model, model.hyp))
    assert model.training and next(model.parameters()).dtype == torch.float32
    assert torch.equal(next(model.parameters()), weights_before)
    assert isinstance(result, ValidationResult) and len(result.losses) == 3 and all(x > 0 for x in result.losses)
    assert result.metrics.images == 8 and result.metrics.map > 0.2 and result.metrics.maps.shape == (80,)
    assert result.fitness == pytest.approx(0.1 * result.metrics.map50 + 0.9 * result.metrics.map)
    assert result.summary[:4] == (result.metrics.mp, result.metrics.mr, result.metrics.map50, result.metrics.map)
    assert result.summary[4:] == tuple(result.losses)


def test_quiet_by_default_and_writes_nothing(model, loader, tmp_path, log, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = evaluate(model, loader, NAMES)
    assert result.losses == (0.0, 0.0, 0.0) and len(result.speed_ms) == 3 and result.pycocotools is None
    assert not list(tmp_path.iterdir())
    lines = [line for m in log.messages for line in m.splitlines()]
    assert not any(line.startswith(("Speed:", "COCO protocol")) for line in lines)
    assert sum(line.split()[:1] == ["all"] for line in lines) == 1  # the summary row only, no per-class rows


@pytest.mark.slow
def test_the_same_numbers_as_test_py(model, loader, split, shared, tmp_path):
    """evaluate() on test.py's loader scores like test.py's standalone run on the weights file."""
    data = {"val": str(split), "nc": 80, "names": NAMES}
    standalone = validate_weights(
        data,
        weights=str(shared / "weights/yolov5n.pt"),
        batch_size=4,
        imgsz=256,
        workers=0,
        plots=False,
        project=tmp_path,
    )
    ours = evaluate(model, loader, NAMES)
    np.testing.assert_array_equal(ours.metrics.stats, standalone.metrics.stats)
    np.testing.assert_array_equal(ours.metrics.ap, standalone.metrics.ap)
    assert json.loads((tmp_path / "exp/results.json").read_text())["images"] == 8


@pytest.mark.slow
def test_the_coco_json_as_path_or_matched_object(model, loader, shared, log):
    """A JSON path and the same JSON already matched give the same numbers; an unusable path can fall back."""
    ann_json = shared / "datasets/coco128/annotations/instances_train2017.json"
    by_path = evaluate(model, loader, NAMES, options=ValidationOptions(ann_json=ann_json))
    matched = load_json_ground_truth(str(ann_json), NAMES, loader.dataset.im_files)
    by_object = evaluate(model, loader, NAMES, options=ValidationOptions(ann_json=matched))
    np.testing.assert_array_equal(by_path.metrics.stats, by_object.metrics.stats)
    labels = evaluate(model, loader, NAMES)
    fallback = evaluate(model, loader, NAMES, options=ValidationOptions(ann_json="nope.json", ann_json_fallback=True))
    np.testing.assert_array_equal(fallback.metrics.stats, labels.metrics.stats)
    assert any("nope.json" in m and "YOLO labels instead" in m for m in log.messages)


def test_save_txt_rows_are_the_saved_predictions(model, loader, tmp_path):
    """labels/<stem>.txt hold 'cls cx cy w h conf' (%g) of the same boxes as predictions.json, normalised."""
    options = ValidationOptions(save_dir=tmp_path, save_txt=True, save_conf=True, save_json=True)
    result = evaluate(model, loader, NAMES, options=options)
    assert result.pycocotools is not None
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    file = Path(loader.dataset.im_files[0])
    height, width = loader.dataset.shapes[0][::-1]  # shapes are (w, h)
    rows = [line.split() for line in (tmp_path / "labels" / f"{file.stem}.txt").read_text().splitlines()]
    mine = [p for p in predictions if p["image_id"] == int(file.stem)]
    assert len(rows) == len(mine) > 0 and all(len(r) == 6 for r in rows)
    for row, p in zip(rows, mine):
        x, y, w, h = p["bbox"]
        expected = [(x + w / 2) / width, (y + h / 2) / height, w / width, h / height]
        np.testing.assert_allclose([float(v) for v in row[1:5]], expected, atol=2e-3 / min(width, height) + 1e-6)
        assert float(row[5]) == pytest.approx(p["score"], abs=1e-5)
        assert all(v == f"{float(v):g}" for v in row[1:])  # 6 significant digits, no padding


def test_single_class(model, split):
    """With a loader built for --single-cls every box is the one class 'item'."""
    loader = create_dataloader(str(split), 256, 4, 32, single_cls=True, rect=True, pad=0.5, workers=0, nc=80)[0]
    result = evaluate(model, loader, NAMES, options=ValidationOptions(single_cls=True))
    assert result.metrics.names == ["item"]
    assert result.metrics.instances.tolist() == [sum(len(x) for x in loader.dataset.labels)]
