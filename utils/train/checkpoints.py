"""The Trainer's checkpoint files: written atomically (a full disk is one TrainError line), stripped of the resume
state when training ends, and the FP16 rounding that the saved weights have."""

import errno
import os
from copy import deepcopy
from pathlib import Path

import torch
from torch import nn

from models.weights.checkpoint import load_checkpoint, save_checkpoint
from utils.errors import TrainError
from utils.log import LOGGER

# Checkpoint entries only needed to resume; removed when training ends.
RESUME_KEYS = ("optimizer", "scaler", "ema_updates", "train_model", "best_epoch")


def save_or_explain(ckpt: dict, path: Path) -> None:
    """save_checkpoint (atomic: a failed write leaves the previous file intact); a full disk becomes a TrainError."""
    try:
        save_checkpoint(ckpt, path)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        raise TrainError(
            f"the disk is full (ENOSPC): could not write {path} (an earlier {path.name} there is kept "
            f"intact); free some space, then continue with --resume"
        ) from None


def strip_optimizer(path: str | Path) -> None:
    """Drop the resume-only entries of a checkpoint, leaving FP16 weights, config and metadata."""
    ckpt = load_checkpoint(path)
    for k in RESUME_KEYS:
        ckpt.pop(k, None)
    ckpt["model"] = {k: v.half() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    save_or_explain(ckpt, Path(path))
    LOGGER.info(f"Optimizer stripped from {path}, {os.path.getsize(path) / 1e6:.1f}MB")


def fp16_rounded(model: nn.Module) -> nn.Module:
    """A copy of the model with weights rounded through FP16, the precision checkpoints store."""
    copy = deepcopy(model)
    with torch.no_grad():
        for v in copy.state_dict().values():
            if v.is_floating_point():
                v.copy_(v.half().float())
    return copy


def interrupt_message(save_dir: Path | None, saved_epoch: int | None, nosave: bool) -> str:
    """The line a Ctrl-C leaves: which state the run folder's last.pt holds and the command that continues it, or why
    there is nothing to continue from (saved_epoch: the epoch whose end state last.pt holds, -1 the start, None
    nothing)."""
    if saved_epoch is None:
        why = " (--nosave)" if nosave else ""
        return f"Training interrupted: no checkpoint was saved in {save_dir}{why}, nothing to resume"
    last = save_dir / "weights" / "last.pt"
    state = "its starting state" if saved_epoch < 0 else f"the state after epoch {saved_epoch}"
    return (
        f"Training interrupted: {last} holds {state}; continue from epoch {saved_epoch + 1} with: "
        f"python train.py --resume {last}"
    )
