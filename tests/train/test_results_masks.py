"""A segment run's results.csv (utils/train/callbacks.py): the mask metrics' columns after the box ones, its fitness
(boxes' plus masks'), zeros before a first validation, and results.png drawn from the wider header."""

import csv
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from utils.eval.charts import plot_results
from utils.eval.evaluator import CocoEvaluator
from utils.eval.metrics import fitness
from utils.eval.validate import ValidationResult
from utils.infer.masks import crop_rle
from utils.train.callbacks import (
    MASK_METRIC_NAMES,
    METRIC_NAMES,
    BatchEnd,
    Console,
    epoch_result,
    write_results_row,
)

SEGMENT_LOSSES = ("box", "seg", "cls", "dfl")


def _validation() -> ValidationResult:
    """Two images: boxes found well, masks less well (a half-filled mask on the second object)."""
    evaluator = CocoEvaluator(["a", "b"])
    shape = (40, 60)
    for image_id, cls in ((1, 0), (2, 1)):
        box = np.array([[10.0, 5.0, 30.0, 25.0]])
        evaluator.add(image_id, box, [cls], box + 0.5, [0.9], [cls], shape=shape)
        crop = np.ones((20, 20), bool)
        predicted = crop.copy()
        predicted[:, 10:] = image_id == 1
        evaluator.add_masks([crop_rle((10, 5), crop, shape)], {0: crop_rle((10, 5), predicted, shape)})
    boxes, masks = evaluator.evaluate(), evaluator.evaluate_masks()
    return ValidationResult(boxes, (0.1, 0.2, 0.3, 0.4), (1.0, 2.0, 3.0), mask_metrics=masks)


def test_mask_columns_follow_the_box_metrics_and_fitness_adds_them():
    validation = _validation()
    result = epoch_result(3, [1.0, 2.0, 3.0, 4.0], [0.01, 0.01, 0.01], validation, SEGMENT_LOSSES)
    columns, row = result.columns(), result.row()
    start = columns.index(METRIC_NAMES[0])
    assert columns[start : start + 8] == [*METRIC_NAMES, *MASK_METRIC_NAMES] and len(columns) == len(row)
    masks, boxes = validation.mask_metrics, validation.metrics
    assert row[start + 4 : start + 8] == [masks.mp, masks.mr, masks.map50, masks.map]
    assert masks.map < boxes.map and result.fitness == pytest.approx(fitness(boxes) + fitness(masks))
    assert columns[start + 8 : start + 12] == [f"val/{n}_loss" for n in SEGMENT_LOSSES]


def test_before_a_first_validation_the_mask_columns_are_zeros(tmp_path):
    first = epoch_result(0, [1.0, 2.0, 3.0, 4.0], [0.01] * 3, None, SEGMENT_LOSSES, masks=True)
    assert first.columns() == epoch_result(1, [1.0] * 4, [0.01] * 3, _validation(), SEGMENT_LOSSES).columns()
    assert first.mask == (0.0, 0.0, 0.0, 0.0) and first.val_losses == [0.0] * 4
    detect = epoch_result(0, [1.0, 2.0, 3.0], [0.01] * 3, None)
    assert not set(MASK_METRIC_NAMES) & set(detect.columns())

    file = tmp_path / "results.csv"
    for epoch in range(3):
        result = epoch_result(epoch, [1.0 / (epoch + 1)] * 4, [0.01] * 3, _validation(), SEGMENT_LOSSES)
        write_results_row(file, result.row(), result.columns())
    rows = list(csv.reader(file.open()))
    assert rows[0] == first.columns() and len(rows) == 4 and all(len(r) == len(rows[0]) for r in rows)
    assert plot_results(file).stat().st_size > 10_000  # 16 panels: losses, box and mask metrics


def test_the_console_shows_a_segment_loss_of_four_or_five_items(log):
    """A segment loss names 4 items (YOLO26's 5): the epoch header and each batch's line show them all."""
    for names in (SEGMENT_LOSSES, (*SEGMENT_LOSSES, "sem")):
        trainer = SimpleNamespace(
            loss=SimpleNamespace(LOSS_NAMES=names), train_loader=[0, 1], epochs=3, device=torch.device("cpu")
        )
        console = Console()
        console.on_epoch_start(trainer, 0)
        batch = BatchEnd(0, 0, 0, [0.5] * len(names), torch.zeros(2, 3, 64, 64), torch.zeros(7, 6), ["a", "b"])
        console.on_batch_end(trainer, batch)
        console.on_batch_end(trainer, batch)
        assert f"{names[-1]}_loss" in log.text and console.bar is None  # both batches shown, the bar closed
