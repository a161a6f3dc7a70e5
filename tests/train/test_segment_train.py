"""train.py with segment models: box-only labels refused before training, and short real runs on polygon labels
(loss items named as the peers log them, FP16 checkpoints recording the task, resume, --image-weights)."""

import csv
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import train
from utils.data.shapes import generate_shapes, write_data_yaml
from utils.train.callbacks import Callback
from utils.train.setup import check_polygon_labels

FAST = ["--img", "64", "--batch-size", "8", "--workers", "0", "--noplots"]


def _train(*args, callbacks=None) -> int:
    return train.main(train.parse_opt([str(a) for a in args]), callbacks=callbacks)


@pytest.fixture(scope="module")
def shapes_seg_yaml(tmp_path_factory):
    """16 train and 8 val shapes images of 64 px labelled with the shapes' outlines (polygon rows)."""
    folder = tmp_path_factory.mktemp("shapes_seg")
    root = generate_shapes(folder / "shapes-seg", n_train=16, n_val=8, img_size=64, polygons=True)
    return write_data_yaml(root, folder / "shapes-seg.yaml")


class InterruptAfterFirstSave(Callback):
    def on_checkpoint_saved(self, trainer, path, result):
        raise KeyboardInterrupt


def _results(run) -> list[dict]:
    with open(run / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_segment_model_given_box_labels_stops_before_training(shapes_yaml, tmp_path, log):
    """The detect shapes set (cls cx cy w h rows): one line, before any run folder or epoch."""
    args = ["--data", shapes_yaml, "--cfg", "yolov5n-seg.yaml", *FAST, "--epochs", 1, "--project", tmp_path]
    assert _train(*args) == 1
    errors = [r.getMessage() for r in log.records if "ERROR" in r.getMessage()]
    assert len(errors) == 1 and "box labels only" in errors[0] and "polygon rows" in errors[0], log.text
    assert "\n" not in errors[0].strip() and not (tmp_path / "exp").exists()


def test_box_rows_among_polygons_are_counted_in_one_warning(log):
    polygon, box = np.array([[0.1, 0.1], [0.5, 0.1], [0.3, 0.4]], np.float32), np.zeros((0, 2), np.float32)
    dataset = SimpleNamespace(segments=[[polygon, box], [box], []])
    check_polygon_labels(dataset)
    assert "2 of 3 training label rows are boxes without a polygon" in log.text
    dataset.segments = [[polygon]]
    check_polygon_labels(dataset)
    assert len(log.records) == 1  # all polygons: nothing to say


@pytest.mark.slow
@pytest.mark.parametrize(
    "cfg, items",
    [("yolov5n-seg.yaml", ("box", "seg", "obj", "cls")), ("yolo11n-seg.yaml", ("box", "seg", "cls", "dfl"))],
)
def test_segment_models_train_and_save_fp16_checkpoints(shapes_seg_yaml, tmp_path, cfg, items, log):
    args = ["--data", shapes_seg_yaml, "--cfg", cfg, *FAST, "--epochs", 2, "--project", tmp_path]
    assert _train(*args) == 0
    rows = _results(tmp_path / "exp")
    losses = [c for c in rows[0] if c.startswith("train/")]
    assert losses == [f"train/{item}_loss" for item in items] and len(rows) == 2
    assert all(float(r["train/seg_loss"]) > 0 for r in rows)
    for name in ("last.pt", "best.pt"):
        ckpt = torch.load(tmp_path / "exp" / "weights" / name, map_location="cpu", weights_only=True)
        floats = [v for v in ckpt["model"].values() if v.is_floating_point()]
        assert ckpt["task"] == "segment" and floats and all(v.dtype == torch.float16 for v in floats)


@pytest.mark.slow
def test_yolo26_segment_resumes_after_an_interrupt(shapes_seg_yaml, tmp_path, log):
    args = ["--data", shapes_seg_yaml, "--cfg", "yolo26n-seg.yaml", *FAST, "--epochs", 2, "--project", tmp_path]
    assert _train(*args, callbacks=[InterruptAfterFirstSave()]) == 130
    assert _train("--resume", "--project", tmp_path) == 0
    assert "at epoch 1" in log.text
    rows = _results(tmp_path / "exp")
    assert [int(r["epoch"]) for r in rows] == [0, 1] and "train/sem_loss" in rows[0]
    assert torch.load(tmp_path / "exp" / "weights" / "last.pt", weights_only=True)["epoch"] == 1


@pytest.mark.slow
def test_segment_image_weights(shapes_seg_yaml, tmp_path):
    args = ["--data", shapes_seg_yaml, "--cfg", "yolo11n-seg.yaml", *FAST, "--epochs", 2, "--project", tmp_path]
    assert _train(*args, "--image-weights") == 0
    assert len(_results(tmp_path / "exp")) == 2
