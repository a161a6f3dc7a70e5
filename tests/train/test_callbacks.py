"""utils.train.callbacks: results.csv rows from EpochResult, resume truncation, the hook dispatch and the defaults."""

import csv
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from utils.train.callbacks import (
    RESULT_COLUMNS,
    Callback,
    Callbacks,
    Console,
    EpochResult,
    Plots,
    ResultsCsv,
    TensorBoard,
    default_callbacks,
    result_columns,
)
from utils.train.loss import ComputeLoss
from utils.train.loss_anchor_free import AnchorFreeLoss


def _result(epoch: int) -> EpochResult:
    return EpochResult(epoch, [0.1, 0.2, 0.3], 0.5, 0.4, 0.3, 0.2, [0.01, 0.02, 0.03], [0.1, 0.001, 0.001], 0.21)


def _rows(file: Path) -> list[list[str]]:
    with open(file, newline="") as f:
        return list(csv.reader(f))


def test_epoch_result_row_follows_the_columns():
    row = _result(3).row()
    assert len(row) == len(RESULT_COLUMNS)
    named = dict(zip(RESULT_COLUMNS, row))
    assert named["epoch"] == 3 and named["train/obj_loss"] == 0.2 and named["metrics/mAP50-95"] == 0.2
    assert named["val/cls_loss"] == 0.03 and named["lr/pg0"] == 0.1


def test_anchor_free_results_name_their_loss_items(tmp_path):
    result = replace(_result(0), loss_names=AnchorFreeLoss.LOSS_NAMES)
    ResultsCsv().on_epoch_end(SimpleNamespace(save_dir=tmp_path), result)
    header, row = _rows(tmp_path / "results.csv")
    named = dict(zip(header, row))
    assert header[1:4] == ["train/box_loss", "train/cls_loss", "train/dfl_loss"] and "train/obj_loss" not in header
    assert named["train/cls_loss"] == "0.2" and named["val/dfl_loss"] == "0.03"  # the items in the loss's order
    assert RESULT_COLUMNS == result_columns(ComputeLoss.LOSS_NAMES)  # YOLOv5's header is unchanged: box, obj, cls
    assert RESULT_COLUMNS[1:4] == ["train/box_loss", "train/obj_loss", "train/cls_loss"]


def test_results_csv_writes_rows_and_drops_redone_epochs_on_resume(tmp_path):
    logger = ResultsCsv()
    run = SimpleNamespace(save_dir=tmp_path, resuming=False, start_epoch=0)
    logger.on_train_start(run)
    for epoch in range(3):
        logger.on_epoch_end(run, _result(epoch))
    rows = _rows(tmp_path / "results.csv")
    assert rows[0] == RESULT_COLUMNS and [r[0] for r in rows[1:]] == ["0", "1", "2"]
    assert rows[1][7] == "0.2"  # mAP50-95, 6 significant digits
    resumed = SimpleNamespace(save_dir=tmp_path, resuming=True, start_epoch=1)
    logger.on_train_start(resumed)
    logger.on_epoch_end(resumed, _result(1))
    assert [r[0] for r in _rows(tmp_path / "results.csv")[1:]] == ["0", "1"]


def test_callbacks_call_each_hook_in_order():
    calls = []

    class Recorder(Callback):
        def __init__(self, name):
            self.name = name

        def on_epoch_end(self, trainer, result):
            calls.append((self.name, trainer, result.epoch))

    hooks = Callbacks([Recorder("a"), Callback(), Recorder("b")])
    hooks.on_epoch_end("trainer", _result(4))
    hooks.on_train_start("trainer")  # a hook nobody overrides does nothing
    assert calls == [("a", "trainer", 4), ("b", "trainer", 4)]


def test_default_callbacks_follow_noplots():
    assert [type(c) for c in default_callbacks(plots=True)] == [ResultsCsv, Plots, TensorBoard, Console]
    assert [type(c) for c in default_callbacks(plots=False)] == [ResultsCsv, TensorBoard, Console]
