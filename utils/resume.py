"""--resume: find the run's last.pt, check its resume-only entries and restore the run's options from it.

Every problem is a TrainError with one line naming the file and what is wrong, before anything is trained.
"""

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import torch

from models.checkpoint import load_checkpoint
from utils.datasets import HYP_KEYS
from utils.log import LOGGER
from utils.train_setup import TrainError


def find_resume_checkpoint(resume, project: str | Path) -> Path:
    """--resume's last.pt: the given file, or the newest last.pt under the project folder."""
    if isinstance(resume, str) and resume != "True":
        path = Path(resume)
        if path.is_dir():
            raise TrainError(
                f"--resume {resume} is a folder: give the run's checkpoint, e.g. {path / 'weights' / 'last.pt'}"
            )
        if not path.is_file():
            raise TrainError(f"--resume {resume}: file not found")
        return path
    candidates = list(Path(project).rglob("last.pt")) if Path(project).is_dir() else []
    if not candidates:
        raise TrainError(f"--resume: no last.pt found under {project}, nothing to resume (start a run without it)")
    return max(candidates, key=lambda p: p.stat().st_mtime)


def resume_options(
    opt: argparse.Namespace, build_parser: Callable[[], argparse.ArgumentParser]
) -> tuple[argparse.Namespace, dict]:
    """The saved run's options (plus --device/--workers if given now) and its checkpoint, or TrainError.

    build_parser: train.py's flag parser, against which the saved options are checked.
    """
    last = find_resume_checkpoint(opt.resume, opt.project)
    ckpt = load_checkpoint(last)
    if "train_args" not in ckpt:
        raise TrainError(f"{last} cannot be resumed: it was not written by train.py (no training options inside)")
    if "optimizer" not in ckpt or "train_model" not in ckpt:
        raise TrainError(
            f"{last} cannot be resumed: its training finished and the optimizer state was stripped, nothing to resume"
        )
    check_resume_state(ckpt, last)
    saved = saved_options(ckpt["train_args"], last, build_parser())
    if ckpt["epoch"] + 1 >= saved.epochs:
        raise TrainError(f"{last}: training to {saved.epochs} epochs is finished, nothing to resume")
    defaults = build_parser().parse_args([])
    for key in ("device", "workers"):  # hardware may differ on the resuming machine
        if getattr(opt, key) != getattr(defaults, key):
            setattr(saved, key, getattr(opt, key))
    saved.resume, saved.weights, saved.cfg = True, str(last), ""
    saved.save_dir = str(last.parent.parent)
    LOGGER.info(f"Resuming training from {last} at epoch {ckpt['epoch'] + 1}")
    return saved, ckpt


def check_resume_state(ckpt: dict, last: Path) -> None:
    """TrainError unless the resume-only entries of a checkpoint have the types train.py writes."""

    def whole(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def tensors(v) -> bool:
        return isinstance(v, dict) and bool(v) and all(isinstance(x, torch.Tensor) for x in v.values())

    checks = {
        "epoch": (whole, "a whole number >= 0"),
        "best_fitness": (
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
            "a finite number",
        ),
        "ema_updates": (whole, "a whole number >= 0"),
        "optimizer": (lambda v: isinstance(v, dict) and "state" in v and "param_groups" in v, "an optimizer state"),
        "train_model": (tensors, "a state dict of tensors"),
    }
    for key, (ok, what) in checks.items():
        if key not in ckpt or not ok(ckpt[key]):
            found = f"a {type(ckpt[key]).__name__}" if key in ckpt else "missing"
            raise TrainError(
                f"{last} cannot be resumed: its '{key}' entry must be {what} ({found}); "
                f"not a checkpoint written by train.py, or a damaged one"
            )


# Options a resumed run cannot do without; the others fall back to today's defaults.
SAVED_REQUIRED = ("data", "epochs", "batch_size", "imgsz", "hyp")


def saved_options(args, last: Path, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The run options saved in a checkpoint ('train_args'), checked as the command line would be, or TrainError."""
    where = f"{last} cannot be resumed: its training options"
    if not isinstance(args, dict):
        raise TrainError(f"{where} ('train_args') are a {type(args).__name__}, not a mapping")
    missing = [k for k in SAVED_REQUIRED if k not in args]
    if missing:
        raise TrainError(f"{where} lack {', '.join(missing)}")
    opt = parser.parse_args([])
    for action in parser._actions:
        key = action.dest
        if key in args and key not in ("help", "resume", "weights", "cfg"):  # the last three are set by resume
            problem = _saved_value_problem(action, args[key], getattr(opt, key))
            if problem:
                raise TrainError(f"{where}: {action.option_strings[0]} {problem}")
            setattr(opt, key, args[key])
    for key, value in args.items():  # e.g. save_dir, which is not a flag
        if not hasattr(opt, key):
            setattr(opt, key, value)
    return opt


def _saved_value_problem(action: argparse.Action, value, default) -> str | None:
    """Why a saved option's value is not one the flag accepts, or None."""
    if action.dest == "hyp" and isinstance(value, dict):
        bad = [
            k
            for k in HYP_KEYS
            if k not in value
            or isinstance(value[k], bool)
            or not isinstance(value[k], (int, float))
            or not math.isfinite(value[k])
        ]
        return f"lacks a finite value for {', '.join(bad)}" if bad else None
    if value is None:
        return None if default is None else "is missing (None)"
    values = value if action.nargs in ("+", "*") else [value]
    if action.nargs in ("+", "*") and (not isinstance(value, list) or not value):
        return f"must be a non-empty list, got {value!r}"
    if isinstance(default, bool) or action.type is None and default is None:
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    kind = str if action.type in (None, str) else (float, int) if isinstance(default, float) else int
    for v in values:
        if isinstance(v, bool) or not isinstance(v, kind):
            return f"has the wrong type: {v!r}"
        try:
            v = action.type(str(v)) if action.type not in (None, str) else v
        except (argparse.ArgumentTypeError, ValueError) as e:
            return str(e)
        if action.choices and v not in action.choices:
            return f"must be one of {', '.join(map(str, action.choices))}, got {v!r}"
    return None
