"""--resume: find the run's last.pt, check its resume-only entries and restore the run's options from it; the run
continues in its own run folder, or in a new one when the checkpoint is not inside one.

Every problem is a TrainError with one line naming the file and what is wrong, before anything is trained.
"""

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import torch

from models.weights.checkpoint import load_checkpoint
from utils.data.hyp import required_hyp_keys
from utils.errors import TrainError, YoloError
from utils.files import RUN_MARKER, is_run_dir
from utils.log import LOGGER


def find_resume_checkpoint(resume, project: str | Path) -> tuple[Path, dict | None]:
    """--resume's last.pt and, when it was already loaded, its contents: the given file, or else the newest
    resumable last.pt under the project folder (see newest_resumable)."""
    if isinstance(resume, str) and resume != "True":
        path = Path(resume)
        if path.is_dir():
            raise TrainError(
                f"--resume {resume} is a folder: give the run's checkpoint, e.g. {path / 'weights' / 'last.pt'}"
            )
        if not path.is_file():
            raise TrainError(f"--resume {resume}: file not found")
        return path, None
    return newest_resumable(Path(project))


def _runs_by_age(project: Path) -> list[tuple[float, Path, Path | None]]:
    """(time, run folder, its last.pt) for each run under project, newest first. A run stopped before it saved a
    checkpoint (opt.yaml and weights/ but no last.pt) is listed too, with None and the time of its opt.yaml."""
    if not project.is_dir():
        return []
    runs = [(last.stat().st_mtime, last.parent.parent, last) for last in project.rglob("last.pt") if last.is_file()]
    for options in project.rglob("opt.yaml"):
        run = options.parent
        if (run / "weights").is_dir() and not (run / "weights" / "last.pt").exists():
            runs.append((options.stat().st_mtime, run, None))
    return sorted(runs, key=lambda r: r[0], reverse=True)


def _is_resumable(ckpt: dict) -> bool:
    """Whether a checkpoint still holds an unfinished run's training state (a finished run's is stripped)."""
    args = ckpt.get("train_args")
    epochs, epoch = args.get("epochs") if isinstance(args, dict) else None, ckpt.get("epoch")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (epochs, epoch)):
        return False
    return "optimizer" in ckpt and "train_model" in ckpt and epoch + 1 < epochs


def newest_resumable(project: Path) -> tuple[Path, dict]:
    """The newest last.pt under project that an unfinished run left (finished runs are passed over, with a line
    saying so), loaded; TrainError when there is none, or when the newest run stopped before saving anything (the
    run the user means: an older one is never resumed in its place)."""
    runs = _runs_by_age(project)
    if not runs:
        raise TrainError(f"--resume: no last.pt found under {project}, nothing to resume (start a run without it)")
    finished, unreadable, found = [], 0, None
    for _, run, last in runs:
        if last is None:
            continue
        try:
            ckpt = load_checkpoint(last)
        except YoloError as e:
            LOGGER.warning(f"WARNING: --resume passes over {last}: {e}")
            unreadable += 1
            continue
        if _is_resumable(ckpt):
            found = last, ckpt
            break
        finished.append(run)
    if runs[0][2] is None:
        hint = f"; to continue an older, unfinished run: --resume {found[0]}" if found else ""
        raise TrainError(
            f"--resume: the newest run, {runs[0][1]}, was interrupted before it saved a checkpoint (no "
            f"weights/last.pt): nothing to resume there, start it again{hint}"
        )
    if found is None:
        others = f", {unreadable} unreadable" if unreadable else ""
        raise TrainError(
            f"--resume: no last.pt under {project} can be resumed ({len(finished)} of finished runs{others}), nothing "
            "to resume; give --resume path/to/last.pt of an unfinished run, or start a new run"
        )
    if finished:
        LOGGER.info(f"--resume: passing over {len(finished)} newer finished run(s), e.g. {finished[0]}")
    return found


def resume_folder(last: Path, opt: argparse.Namespace) -> str | None:
    """Where a resumed run writes: the checkpoint's own run folder when it is <run>/weights/last.pt and <run> was made
    by a run (it holds the run marker), else None: a new run folder under --project/--name, said in one line, so that
    nothing beside a checkpoint kept elsewhere (e.g. ~/Downloads/last.pt) is ever overwritten."""
    weights = last.absolute().parent
    run, new = weights.parent, Path(opt.project) / opt.name
    if weights.name == "weights" and is_run_dir(run):
        return str(run)
    if weights.name == "weights" and (run / "opt.yaml").is_file():
        why = (
            f"{run} has no {RUN_MARKER} marker (a run folder from before markers were written, or copied by hand), "
            "so it is not taken as a run folder and is left untouched"
        )
    else:
        why = f"{last} is not in a run folder's weights/, and nothing is written beside it"
    LOGGER.info(f"--resume: {why}; the resumed run goes to a new run folder under {new}")
    return None


def resume_options(
    opt: argparse.Namespace, build_parser: Callable[[], argparse.ArgumentParser]
) -> tuple[argparse.Namespace, dict]:
    """The saved run's options (plus --device/--workers if given now) and its checkpoint, or TrainError.

    build_parser: train.py's flag parser, against which the saved options are checked. The run folder is the
    checkpoint's own (see resume_folder), or save_dir None and today's --project/--name for a new one.
    """
    last, ckpt = find_resume_checkpoint(opt.resume, opt.project)
    ckpt = ckpt if ckpt is not None else load_checkpoint(last)
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
    saved.save_dir = resume_folder(last, opt)
    if saved.save_dir is None:  # a new folder, numbered under today's --project/--name
        saved.project, saved.name, saved.exist_ok = opt.project, opt.name, False
    LOGGER.info(f"Resuming training from {last} at epoch {ckpt['epoch'] + 1}")
    return saved, ckpt


def check_resume_state(ckpt: dict, last: Path) -> None:
    """TrainError unless the resume-only entries of a checkpoint have the types train.py writes."""

    def whole(v, low: int = 0) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= low

    def tensors(v) -> bool:
        return isinstance(v, dict) and bool(v) and all(isinstance(x, torch.Tensor) for x in v.values())

    checks = {
        # -1: the state a run starts from, saved before its first epoch (see Trainer._save_start)
        "epoch": (lambda v: whole(v, -1), "a whole number >= -1"),
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
            for k in required_hyp_keys(value)
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
