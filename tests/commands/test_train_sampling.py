"""train.py --image-weights and --quad end to end: the Trainer redraws the images each epoch from the per-class
mAPs, quad batches train at twice the size, and both run under torchrun (2 CPU processes, gloo)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train
from utils.train.callbacks import Callback
from utils.train.trainer import quad_scaled

REPO = Path(__file__).resolve().parents[2]
FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--workers", "0", "--noplots", "--noautoanchor"]


class Recorder(Callback):
    """The dataset's indices at each epoch start and the shape of every trained batch."""

    def __init__(self):
        self.indices, self.shapes = [], []

    def on_epoch_start(self, trainer, epoch):
        self.indices.append(list(trainer.dataset.indices))

    def on_batch_end(self, trainer, batch):
        self.shapes.append(tuple(batch.images.shape))


def _rows(results_csv: Path) -> list[dict]:
    with open(results_csv, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_image_weights_and_quad_train(shapes_yaml, tmp_path):
    recorder = Recorder()
    args = ["--data", shapes_yaml, *FAST, "--batch-size", "8", "--epochs", "2", "--project", tmp_path]
    args += ["--image-weights", "--quad"]
    assert train.main(train.parse_opt([str(a) for a in args]), callbacks=[recorder]) == 0
    assert len(_rows(tmp_path / "exp" / "results.csv")) == 2
    # Each epoch draws 16 images with replacement: not the identity order, and a fresh draw each epoch.
    assert all(len(x) == 16 and x != list(range(16)) for x in recorder.indices)
    assert recorder.indices[0] != recorder.indices[1]
    # Quad: each batch of 8 loaded 64 px images trains as 2 images of 128 px.
    assert set(recorder.shapes) == {(2, 3, 128, 128)}


def test_quad_scales_only_the_training_loss():
    def loss_fn(predictions, targets):
        return torch.tensor([1.5]), torch.tensor([0.1, 0.2, 0.3])

    loss, items = quad_scaled(loss_fn)(None, None)
    assert float(loss) == 6.0 and items.tolist() == pytest.approx([0.1, 0.2, 0.3])


@pytest.mark.slow
def test_both_run_under_torchrun(shapes_yaml, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(REPO / "train.py")]
    cmd += ["--data", str(shapes_yaml), *FAST, "--batch-size", "16", "--epochs", "2", "--device", "cpu"]
    cmd += ["--image-weights", "--quad", "--project", str(tmp_path), "--name", "ddp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert [int(r["epoch"]) for r in _rows(tmp_path / "ddp" / "results.csv")] == [0, 1]
    assert (tmp_path / "ddp" / "weights" / "best.pt").exists()
