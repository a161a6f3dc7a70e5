"""TensorBoard logging: a real two-epoch run read back with tensorboard's EventAccumulator, the callback's hooks on
a stand-in trainer, the graph trace's safety, image logging, and a missing tensorboard."""

import csv
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

import train
from utils.data.shapes import generate_shapes, write_data_yaml
from utils.plots import imwrite
from utils.train import tensorboard_logger
from utils.train.callbacks import RESULT_COLUMNS, BatchEnd, EpochResult, TensorBoard
from utils.train.tensorboard_logger import TensorBoardRun, open_tensorboard

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

SCALAR_TAGS = RESULT_COLUMNS[1:]  # the losses, metrics and lr/pg0..2


def _events(folder: Path):
    """Every event file in folder, loaded (all scalars and images kept)."""
    accumulator = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0})
    return accumulator.Reload()


def _result(epoch: int) -> EpochResult:
    return EpochResult(epoch, [0.1, 0.2, 0.3], 0.5, 0.4, 0.3, 0.2 + epoch, [0.01, 0.02, 0.03], [0.1, 1e-3, 1e-4], 0.2)


@pytest.fixture
def fresh_import(monkeypatch):
    """summary_writer_class() looks for tensorboard again in this test (its answer is cached per process)."""
    tensorboard_logger.summary_writer_class.cache_clear()
    yield monkeypatch
    tensorboard_logger.summary_writer_class.cache_clear()


# ---------------------------------------------------------------------------------------------------------------------
# A real run


@pytest.fixture(scope="module")
def two_epoch_run(tmp_path_factory) -> Path:
    """A two-epoch run from scratch with plots on a tiny shapes set (64 px, 8 train and 4 val images)."""
    folder = tmp_path_factory.mktemp("tb")
    data = write_data_yaml(generate_shapes(folder / "shapes", n_train=8, n_val=4, img_size=64), folder / "shapes.yaml")
    args = ["--data", data, "--cfg", "yolov5n.yaml", "--weights", "", "--img", 64, "--batch-size", 8, "--epochs", 2]
    args += ["--workers", 0, "--noautoanchor", "--project", folder / "runs", "--name", "exp"]
    assert train.main(train.parse_opt([str(a) for a in args])) == 0
    return folder / "runs" / "exp"


@pytest.mark.slow
def test_two_epoch_run_writes_every_scalar_per_epoch(two_epoch_run):
    assert list(two_epoch_run.glob("events.out.tfevents.*")), "no event file in the run folder"
    events = _events(two_epoch_run)
    assert set(SCALAR_TAGS) <= set(events.Tags()["scalars"])
    with open(two_epoch_run / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for tag in SCALAR_TAGS:
        logged = events.Scalars(tag)
        assert [e.step for e in logged] == [0, 1], tag
        expected = [float(row[tag]) for row in rows]  # results.csv keeps 6 significant digits
        assert np.allclose([e.value for e in logged], expected, rtol=1e-5, atol=1e-12), tag
    assert events.Scalars("train/box_loss")[0].value > 0
    assert events.Scalars("lr/pg0")[0].value != events.Scalars("lr/pg1")[0].value  # bias warmup lr vs the others


@pytest.mark.slow
def test_two_epoch_run_logs_the_graph_and_images(two_epoch_run):
    events = _events(two_epoch_run)
    assert events.Tags()["graph"]
    graph_ops = {node.op for node in events.Graph().node}
    assert any("conv" in op.lower() for op in graph_ops)
    images = set(events.Tags()["images"])
    files = {f.stem for f in two_epoch_run.iterdir() if f.suffix in (".png", ".jpg")}
    assert {"train_batch0", "results", "labels"} <= files
    assert images == files  # every plot of the run folder, each once
    batch0 = events.Images("train_batch0")
    assert len(batch0) == 1 and batch0[0].width > 64 and batch0[0].height > 64


# ---------------------------------------------------------------------------------------------------------------------
# The callback on a stand-in trainer


@pytest.mark.slow
def test_callback_logs_results_columns_at_epoch_steps_and_closes(tmp_path, log):
    save_dir = tmp_path / "project" / "exp"
    save_dir.mkdir(parents=True)
    trainer = SimpleNamespace(save_dir=save_dir, plots=False)  # no parts: with plots off the graph is not traced
    callback = TensorBoard()
    callback.on_train_start(trainer)
    assert f"tensorboard --logdir {tmp_path / 'project'}'" in log.text and "http://localhost:6006/" in log.text
    for epoch in (0, 1, 2):
        callback.on_epoch_end(trainer, _result(epoch))
    imwrite(save_dir / "results.png", np.full((20, 30, 3), 200, np.uint8))
    callback.on_train_end(trainer, _result(2))
    assert callback.run is None  # closed
    events = _events(save_dir)
    assert set(events.Tags()["scalars"]) == set(SCALAR_TAGS)
    map_logged = events.Scalars("metrics/mAP50-95")
    assert [e.step for e in map_logged] == [0, 1, 2]
    assert [e.value for e in map_logged] == pytest.approx([0.2, 1.2, 2.2])
    assert events.Scalars("lr/pg2")[0].value == pytest.approx(1e-4)
    assert [(e.step, e.width, e.height) for e in events.Images("results")] == [(2, 30, 20)]
    assert not events.Tags()["graph"]


@pytest.mark.slow
def test_callback_logs_the_first_batch_only_once(tmp_path):
    trainer = SimpleNamespace(save_dir=tmp_path, plots=False)
    imwrite(tmp_path / "train_batch0.jpg", np.zeros((16, 16, 3), np.uint8))
    callback = TensorBoard()
    callback.on_train_start(trainer)
    images, targets = torch.zeros(1, 3, 16, 16), torch.zeros(0, 6)
    for iteration in (0, 1):
        callback.on_batch_end(trainer, BatchEnd(0, iteration, iteration, [0.0] * 3, images, targets, ["a.jpg"]))
    callback.on_train_end(trainer, None)  # train_batch0.jpg is in the folder, but already logged
    assert len(_events(tmp_path).Images("train_batch0")) == 1


# ---------------------------------------------------------------------------------------------------------------------
# TensorBoardRun


@pytest.mark.slow
def test_graph_keeps_train_mode_and_batchnorm_statistics(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.SiLU(), nn.Conv2d(4, 2, 1), nn.BatchNorm2d(2))
    model.train()[4].eval()  # a module in eval mode (as a frozen one may be) stays in eval mode
    bn = model[1]
    statistics = bn.running_mean.clone(), bn.num_batches_tracked.clone()
    run = open_tensorboard(tmp_path)
    run.graph(model, 16, torch.device("cpu"))
    run.close()
    assert [m.training for m in model.modules()] == [True, True, True, True, True, False]
    assert torch.equal(bn.running_mean, statistics[0]) and torch.equal(bn.num_batches_tracked, statistics[1])
    assert _events(tmp_path).Tags()["graph"]


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        raise RuntimeError("cannot trace this\nsecond line of the message")


@pytest.mark.slow
def test_graph_failure_is_one_warning_line(tmp_path, log, capsys):
    model = Untraceable().train()
    run = open_tensorboard(tmp_path)
    run.graph(model, [32, 48], torch.device("cpu"))  # the failure must not raise
    run.close()
    warnings = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    assert warnings == ["WARNING: TensorBoard graph not logged: cannot trace this"]
    assert "Error occurs" not in capsys.readouterr().out  # add_graph's own print is swallowed
    assert model.training and model.conv.training


@pytest.mark.slow
def test_images_in_logs_each_readable_image_once(tmp_path):
    imwrite(tmp_path / "confusion_matrix.png", np.zeros((10, 12, 3), np.uint8))
    imwrite(tmp_path / "val_batch0_pred.jpg", np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    (tmp_path / "notes.txt").write_text("not an image")
    run = TensorBoardRun(tensorboard_logger.summary_writer_class()(log_dir=str(tmp_path)))
    assert run.images_in(tmp_path, step=3) == ["confusion_matrix", "val_batch0_pred"]
    assert run.images_in(tmp_path, step=4) == []  # logged already
    assert not run.image("missing", tmp_path / "missing.png")
    run.close()
    events = _events(tmp_path)
    assert sorted(events.Tags()["images"]) == ["confusion_matrix", "val_batch0_pred"]
    assert [(e.step, e.width, e.height) for e in events.Images("confusion_matrix")] == [(3, 12, 10)]
    assert events.Images("val_batch0_pred")[0].encoded_image_string == (tmp_path / "val_batch0_pred.jpg").read_bytes()


@pytest.mark.slow
def test_images_are_logged_as_their_file_bytes(tmp_path):
    imwrite(tmp_path / "plot.png", np.zeros((4, 5, 4), np.uint8))  # RGBA, as matplotlib saves
    imwrite(tmp_path / "batch.jpg", np.zeros((6, 7, 3), np.uint8))
    imwrite(tmp_path / "other.bmp", np.zeros((6, 7, 3), np.uint8))  # a format TensorBoard does not show
    png = tensorboard_logger.encoded_image(tmp_path / "plot.png", "plot").value[0]
    assert (png.tag, png.image.width, png.image.height, png.image.colorspace) == ("plot", 5, 4, 4)
    assert png.image.encoded_image_string == (tmp_path / "plot.png").read_bytes()
    jpg = tensorboard_logger.encoded_image(tmp_path / "batch.jpg", "batch").value[0].image
    assert (jpg.width, jpg.height, jpg.colorspace) == (7, 6, 3)
    assert tensorboard_logger.encoded_image(tmp_path / "other.bmp", "other") is None
    assert tensorboard_logger.encoded_image(tmp_path / "missing.png", "missing") is None


# ---------------------------------------------------------------------------------------------------------------------
# Without tensorboard


@pytest.mark.slow
def test_missing_tensorboard_is_one_notice_and_the_callback_does_nothing(tmp_path, log, fresh_import):
    fresh_import.setitem(sys.modules, "torch.utils.tensorboard", None)  # makes the import fail: ImportError
    trainer = SimpleNamespace(save_dir=tmp_path, plots=True)  # no parts: tracing would fail if it were tried
    for _ in range(2):  # two runs in one process (e.g. evolution): the notice comes once
        callback = TensorBoard()
        callback.on_train_start(trainer)
        callback.on_batch_end(trainer, BatchEnd(0, 0, 0, [0.0] * 3, torch.zeros(1, 3, 8, 8), torch.zeros(0, 6), []))
        callback.on_epoch_end(trainer, _result(0))
        callback.on_train_end(trainer, _result(0))
        assert callback.run is None
    notices = [r.getMessage() for r in log.records if "TensorBoard" in r.getMessage()]
    assert notices == ["TensorBoard: not installed, so no event files are written (pip install 'tensorboard>=2.14')"]
    assert not list(tmp_path.iterdir())
