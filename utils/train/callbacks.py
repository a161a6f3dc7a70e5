"""Training callbacks: what the Trainer reports at each stage, and the loggers that ship with it.

A logger is one class deriving from Callback that overrides the hooks it needs. Each hook receives the Trainer
(read its attributes: save_dir, names, epochs, start_epoch, plots, resuming, labels, ...) and the event's data.
The Trainer calls them on the main process only (rank 0 under DDP), in this order:
on_train_start -> per epoch: on_epoch_start, on_batch_end per batch, on_epoch_end (after validation),
on_checkpoint_saved per file -> on_train_end.

The default loggers, in calling order: ResultsCsv (results.csv), Plots (images, unless --noplots), TensorBoard
(event files in the run folder, see utils.train.tensorboard_logger; nothing when tensorboard is not installed), Console.
"""

import csv
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from utils.eval.validate import ValidationResult
from utils.log import LOGGER, PROGRESS_BAR
from utils.plots import save_batch_plot
from utils.train.loss import ComputeLoss
from utils.train.tensorboard_logger import TensorBoardRun, open_tensorboard

YOLOV5_LOSS_NAMES = ComputeLoss.LOSS_NAMES  # the default; each loss class names its items in LOSS_NAMES
METRIC_NAMES = ("metrics/precision", "metrics/recall", "metrics/mAP50", "metrics/mAP50-95")
MASK_METRIC_NAMES = ("metrics/mask_precision", "metrics/mask_recall", "metrics/mask_mAP50", "metrics/mask_mAP50-95")


def result_columns(loss_names: tuple[str, ...] = YOLOV5_LOSS_NAMES, masks: bool = False) -> list[str]:
    """The results.csv header of a run whose loss items are loss_names (YOLOv5: box, obj, cls; anchor-free: box,
    cls, dfl); a segment run (masks) has its mask metrics after the box ones."""
    train = [f"train/{n}_loss" for n in loss_names]
    val = [f"val/{n}_loss" for n in loss_names]
    metrics = [*METRIC_NAMES, *(MASK_METRIC_NAMES if masks else ())]
    return ["epoch", *train, *metrics, *val, "lr/pg0", "lr/pg1", "lr/pg2"]


RESULT_COLUMNS = result_columns()  # YOLOv5's


@dataclass
class BatchEnd:
    """One finished training batch: running mean losses of the epoch so far and the batch itself."""

    epoch: int
    index: int  # batch index within the epoch
    iteration: int  # batches since the start of training
    mean_losses: list[float]  # in the loss's LOSS_NAMES order
    images: torch.Tensor  # the batch as trained (0-1 floats, after multi-scale)
    targets: torch.Tensor  # (n, 6) image index, class, xywh normalised
    paths: list[str]


@dataclass
class EpochResult:
    """One epoch: its training losses, the latest validation and the learning rates it trained at."""

    epoch: int
    train_losses: list[float]  # means over the epoch, in loss_names order
    precision: float
    recall: float
    map50: float
    map: float  # mAP50-95
    val_losses: list[float]
    lrs: list[float]  # per parameter group
    fitness: float  # a segment run's: its boxes' plus its masks' (ValidationResult.fitness)
    loss_names: tuple[str, ...] = YOLOV5_LOSS_NAMES
    mask: tuple[float, float, float, float] | None = None  # a segment run's mask P, R, mAP50, mAP50-95

    def columns(self) -> list[str]:
        """The names of row()'s values: the results.csv header."""
        return result_columns(self.loss_names, masks=self.mask is not None)

    def row(self) -> list[float]:
        """The values of a results.csv row, in columns() order."""
        metrics = [self.precision, self.recall, self.map50, self.map, *(self.mask or ())]
        return [self.epoch, *self.train_losses, *metrics, *self.val_losses, *self.lrs]


def epoch_result(
    epoch: int,
    train_losses: list[float],
    lrs: list[float],
    validation: ValidationResult | None,
    loss_names: tuple[str, ...] = YOLOV5_LOSS_NAMES,
    masks: bool | None = None,
) -> EpochResult:
    """An epoch's EpochResult from its training losses, lrs and validation (zeros where there is none yet); masks:
    the run scores masks too (a segment model: its mask columns, zeros until its first validation; None: whether
    the validation has mask metrics)."""
    if masks is None:
        masks = validation is not None and validation.mask_metrics is not None
    mask = (0.0, 0.0, 0.0, 0.0) if masks else None
    if validation is None:
        zeros = [0.0] * len(loss_names)
        return EpochResult(epoch, train_losses, 0.0, 0.0, 0.0, 0.0, zeros, lrs, 0.0, loss_names, mask)
    m, k = validation.metrics, validation.mask_metrics
    if masks and k is not None:
        mask = (k.mp, k.mr, k.map50, k.map)
    losses = [float(x) for x in validation.losses]
    fitness = validation.fitness
    return EpochResult(epoch, train_losses, m.mp, m.mr, m.map50, m.map, losses, lrs, fitness, loss_names, mask)


class Callback:
    """Base class: every hook does nothing."""

    def on_train_start(self, trainer) -> None:
        """Set-up is done (model, data, optimizer, run folder); the first epoch is next."""

    def on_epoch_start(self, trainer, epoch: int) -> None:
        """An epoch's first batch is next."""

    def on_batch_end(self, trainer, batch: BatchEnd) -> None:
        """A batch was trained (not called for a batch skipped for a non-finite loss)."""

    def on_epoch_end(self, trainer, result: EpochResult) -> None:
        """An epoch was trained and validated."""

    def on_checkpoint_saved(self, trainer, path: Path, result: EpochResult) -> None:
        """A checkpoint file (last.pt, best.pt, epochN.pt) was written for result's epoch."""

    def on_train_end(self, trainer, results: EpochResult | None) -> None:
        """Training finished (results: the final validation of best.pt, or the last epoch's, or None)."""


class Callbacks:
    """A list of callbacks called in order at each hook."""

    def __init__(self, callbacks: list[Callback]):
        self.callbacks = list(callbacks)

    def __getattr__(self, hook: str):
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def call(*args) -> None:
            for callback in self.callbacks:
                getattr(callback, hook)(*args)

        return call


# ---------------------------------------------------------------------------------------------------------------------
# results.csv


def write_results_row(file: Path, values: list, columns: list[str] = RESULT_COLUMNS) -> None:
    """Append one epoch's row to results.csv (the header, columns, first when the file is new)."""
    new = not file.exists()
    with open(file, "a", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(columns)
        writer.writerow([int(values[0])] + [f"{float(v):.6g}" for v in values[1:]])


def truncate_results(file: Path, start_epoch: int) -> None:
    """Keep results.csv rows of epochs before start_epoch, so a resumed epoch is never listed twice."""
    if not file.exists():
        return
    with open(file, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    kept = rows[:1] + [r for r in rows[1:] if r and r[0].strip().isdigit() and int(r[0]) < start_epoch]
    with open(file, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(kept)


class ResultsCsv(Callback):
    """save_dir/results.csv, one row per epoch; a resumed run first drops the rows of epochs it redoes."""

    def on_train_start(self, trainer) -> None:
        if trainer.resuming:
            truncate_results(trainer.save_dir / "results.csv", trainer.start_epoch)

    def on_epoch_end(self, trainer, result: EpochResult) -> None:
        write_results_row(trainer.save_dir / "results.csv", result.row(), result.columns())


# ---------------------------------------------------------------------------------------------------------------------
# Plots (matplotlib, loaded lazily: it is slow to import): a plotting failure must never stop training


def _plot(name: str, *args) -> None:
    """Call a plotting function of utils.eval.charts; a failure is only a warning."""
    try:
        from utils.eval import charts

        getattr(charts, name)(*args)
    except Exception as e:  # a plot must never stop training
        LOGGER.warning(f"WARNING: {name} failed: {e}")


class Plots(Callback):
    """labels.jpg at the start of a new run, the first three training batches, results.png at the end."""

    def on_train_start(self, trainer) -> None:
        if not trainer.resuming:
            _plot("plot_labels", trainer.labels, trainer.names, trainer.save_dir)

    def on_batch_end(self, trainer, batch: BatchEnd) -> None:
        if batch.iteration < 3:
            file = trainer.save_dir / f"train_batch{batch.iteration}.jpg"
            save_batch_plot(batch.images, batch.targets, batch.paths, file, trainer.names)

    def on_train_end(self, trainer, results: EpochResult | None) -> None:
        _plot("plot_results", trainer.save_dir / "results.csv")


# ---------------------------------------------------------------------------------------------------------------------
# TensorBoard


class TensorBoard(Callback):
    """Event files in the run folder: the results.csv values per epoch (same tags, step = epoch); with plots on,
    the model graph, the first training batch and, at the end, every image of the run folder."""

    def __init__(self):
        self.run: TensorBoardRun | None = None

    def on_train_start(self, trainer) -> None:
        self.run = open_tensorboard(trainer.save_dir)
        if self.run is not None and trainer.plots:
            self.run.graph(trainer.parts.model, trainer.imgsz, trainer.device)

    def on_batch_end(self, trainer, batch: BatchEnd) -> None:
        if self.run is not None and batch.iteration == 0:  # the mosaic Plots has just written, if plots are on
            self.run.image("train_batch0", trainer.save_dir / "train_batch0.jpg", step=0)

    def on_epoch_end(self, trainer, result: EpochResult) -> None:
        if self.run is not None:
            self.run.scalars(dict(zip(result.columns()[1:], result.row()[1:])), result.epoch)

    def on_train_end(self, trainer, results: EpochResult | None) -> None:
        if self.run is not None:
            self.run.images_in(trainer.save_dir, step=results.epoch if results is not None else 0)
            self.run.close()
            self.run = None


# ---------------------------------------------------------------------------------------------------------------------
# Console


class Console(Callback):
    """The run's progress on the console: a progress bar per epoch with running losses, and a closing line."""

    def __init__(self):
        self.bar = None

    def on_train_start(self, trainer) -> None:
        LOGGER.info(
            f"Image sizes {trainer.imgsz} train, {trainer.imgsz} val\n"
            f"Using {trainer.train_loader.num_workers} dataloader workers\n"
            f"Logging results to {trainer.save_dir}\nStarting training for {trainer.epochs} epochs..."
        )

    def on_epoch_start(self, trainer, epoch: int) -> None:
        losses = [f"{name}_loss" for name in trainer.loss.LOSS_NAMES]  # 3, or a segment loss's 4 or 5
        LOGGER.info(("\n" + "%11s" * (4 + len(losses))) % ("Epoch", "GPU_mem", *losses, "Instances", "Size"))
        self.bar = tqdm(total=len(trainer.train_loader), bar_format=PROGRESS_BAR)

    def on_batch_end(self, trainer, batch: BatchEnd) -> None:
        device = trainer.device
        mem = f"{torch.cuda.memory_reserved(device) / 1e9 if device.type == 'cuda' else 0:.3g}G"
        size = batch.images.shape[-1]
        self.bar.set_description(
            ("%11s" * 2 + "%11.4g" * (2 + len(batch.mean_losses)))
            % (f"{batch.epoch}/{trainer.epochs - 1}", mem, *batch.mean_losses, batch.targets.shape[0], size)
        )
        self.bar.update(1)
        if self.bar.n == self.bar.total:  # the epoch's training is done: validation prints next
            self.close_bar()

    def on_epoch_end(self, trainer, result: EpochResult) -> None:
        self.close_bar()

    def on_train_end(self, trainer, results: EpochResult | None) -> None:
        self.close_bar()
        LOGGER.info(f"Results saved to {trainer.save_dir}")

    def close_bar(self) -> None:
        """Close the epoch's progress bar, if open."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def default_callbacks(plots: bool) -> list[Callback]:
    """The loggers every run has: console, results.csv and TensorBoard, plus plots unless --noplots."""
    # TensorBoard after Plots (it logs the images Plots writes), Console last (it closes the run's output).
    return [ResultsCsv(), *([Plots()] if plots else []), TensorBoard(), Console()]
