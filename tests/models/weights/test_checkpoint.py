"""Checkpoints: our FP16 format round trip, official YOLOv5 import, refusal of unsafe or broken files."""

import os
import pickle
import zipfile

import pytest
import torch

from models import load_model
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, load_checkpoint, save_checkpoint
from utils.errors import CheckpointError


class _RunsShell:
    """Pickles as a call to os.system: what a hostile checkpoint would contain."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.slow
def test_round_trip_is_weights_only_fp16_and_same_outputs(tmp_path):
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=3).eval()
    model.names = ["a", "b", "c"]
    path = tmp_path / "ckpt.pt"
    save_checkpoint(checkpoint_dict(model, epoch=4), path)

    raw = torch.load(path, weights_only=True)  # plain tensors and containers only
    assert raw["epoch"] == 4 and raw["names"] == ["a", "b", "c"] and raw["yaml"]["nc"] == 3
    floats = [v for v in raw["model"].values() if v.is_floating_point()]
    assert floats and all(v.dtype == torch.float16 for v in floats)

    loaded = load_model(path, fuse=False)
    assert loaded.names == ["a", "b", "c"] and not loaded.training
    x = torch.rand(1, 3, 96, 128)
    with torch.no_grad():
        expected = model.half().float()(x)[0]  # the same FP16-rounded weights
        torch.testing.assert_close(loaded(x)[0], expected, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(load_model(path)(x)[0], expected, rtol=1e-3, atol=1e-2)  # fused


def test_import_official_yolov5n(shared):
    model = load_model(shared / "weights" / "yolov5n.pt")
    assert len(model.names) == 80 and model.names[0] == "person" and model.names[5] == "bus"
    assert model.stride.tolist() == [8.0, 16.0, 32.0]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # The anchors come from the file (stride-normalised, as YOLOv5 stores them).
    assert torch.allclose(model.model[-1].anchors[2, 2] * 32, torch.tensor([373.0, 326.0]))


def test_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": _RunsShell(marker)}, path)
    with pytest.raises(CheckpointError, match="refusing to load") as err:
        load_model(path)
    assert "\n" not in str(err.value) and "system" in str(err.value)
    assert not marker.exists()


def test_plain_pickle_with_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil_legacy.pt"
    path.write_bytes(pickle.dumps({"model": _RunsShell(marker)}))
    with pytest.raises(CheckpointError):
        load_model(path)
    assert not marker.exists()


def test_missing_truncated_and_foreign_files(tmp_path, shared):
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "nope.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes((shared / "weights" / "yolov5n.pt").read_bytes()[:100_000])
    with pytest.raises(CheckpointError):
        load_model(truncated)
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    with pytest.raises(CheckpointError):
        load_model(text)
    tensor_only = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor_only)
    with pytest.raises(CheckpointError, match="not a model checkpoint"):
        load_model(tensor_only)
    other_zip = tmp_path / "archive.pt"
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(CheckpointError):
        load_model(other_zip)


def test_save_is_atomic(tmp_path, monkeypatch):
    model = Model("yolov5n.yaml", nc=2)
    path = tmp_path / "last.pt"
    save_checkpoint(checkpoint_dict(model, epoch=0), path)

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        save_checkpoint(checkpoint_dict(model, epoch=1), path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["epoch"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind
    assert load_checkpoint(path)["epoch"] == 0


@pytest.mark.slow
def test_import_v7_style_detection_model_pickle(tmp_path, monkeypatch):
    """A pickled models.nn.yolo.DetectionModel with dict names and numpy fields, as YOLOv5 v7.0 writes it."""
    import numpy as np

    import models.nn.yolo

    # Our classes carry YOLOv5's qualified names, so pickling them writes what an official file holds.
    detection_model = type("DetectionModel", (Model,), {"__module__": "models.nn.yolo"})
    monkeypatch.setattr(models.nn.yolo, "DetectionModel", detection_model, raising=False)
    torch.manual_seed(1)
    model = detection_model("yolov5n.yaml", nc=2).eval()
    model.names = {0: "cat", 1: "dog"}
    path = tmp_path / "v7.pt"
    torch.save(
        {
            "epoch": -1,
            "best_fitness": np.array([0.42]),
            "model": model.half(),
            "ema": None,
            "optimizer": None,
            "opt": {"imgsz": 640, "hyp": {"lr0": 0.01}},
            "git": None,
            "date": "2022-11-22",
        },
        path,
    )
    monkeypatch.undo()

    loaded = load_model(path, fuse=False)
    assert type(loaded) is Model and loaded.names == ["cat", "dog"]
    x = torch.rand(1, 3, 128, 160)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x)[0], model.float()(x)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_derived_anchor_grid_buffer_is_ignored(tmp_path):
    model = Model("yolov5n.yaml", nc=2).eval()
    ckpt = checkpoint_dict(model)
    ckpt["model"]["model.24.anchor_grid"] = torch.zeros(3, 1, 3, 1, 1, 2)  # as some older YOLOv5 files hold
    ckpt["model"]["model.24.unknown"] = torch.zeros(1)
    save_checkpoint(ckpt, tmp_path / "extra.pt")
    with pytest.raises(CheckpointError, match="1 unexpected"):  # anything else still fails loudly
        load_model(tmp_path / "extra.pt")
    del ckpt["model"]["model.24.unknown"]
    save_checkpoint(ckpt, tmp_path / "old.pt")
    assert load_model(tmp_path / "old.pt").names == ["0", "1"]
