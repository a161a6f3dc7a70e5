"""Train a YOLOv5 detector on a dataset described by a data YAML.

Usage:
    python train.py --data coco128.yaml --weights yolov5s.pt --img 640        # from pretrained weights
    python train.py --data coco128.yaml --weights '' --cfg yolov5s.yaml       # from scratch
    python train.py --resume                                                   # continue the newest run
    python -m torch.distributed.run --nproc_per_node 2 train.py --data coco128.yaml --weights yolov5s.pt
"""

import argparse
import math
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from models.checkpoint import (
    load_checkpoint,
)
from utils.cli import Parser, float_in, int_in, run_cli
from utils.datasets import HYP_KEYS, load_hyp
from utils.files import increment_path
from utils.log import LOGGER, set_logging
from utils.torch_utils import select_device
from utils.trainer import LOCAL_RANK, RANK, WORLD_SIZE, TrainError, train

ROOT = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------------------------------
# Command line


def _batch_size(text: str) -> int:
    """argparse type for --batch-size: an integer >= 1; YOLOv5's -1 (AutoBatch) is not supported."""
    try:
        return int_in(1)(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} (AutoBatch -1 is not supported)") from None


def _smoothing(text: str) -> float:
    """argparse type for --label-smoothing: a number in [0, 1) (1 would make every target uniform)."""
    value = float_in(-math.inf, math.inf)(text)  # a finite number, or float_in's message
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value:g}")
    return value


def build_parser() -> Parser:
    """YOLOv5's train.py flags, with numeric ones range-checked at parse time."""
    p = Parser(description="Train a YOLOv5 detector")
    p.add_argument("--weights", type=str, default="", help="initial weights: '' (scratch), ours or official YOLOv5")
    p.add_argument("--cfg", type=str, default="", help="model YAML, e.g. yolov5s.yaml")
    p.add_argument("--data", type=str, default="coco128.yaml", help="dataset YAML")
    p.add_argument("--hyp", type=str, default=str(ROOT / "data" / "hyp.scratch.yaml"), help="hyperparameter YAML")
    p.add_argument("--epochs", type=int_in(1), default=100)
    p.add_argument("--batch-size", type=_batch_size, default=16, help="total batch size for all processes")
    p.add_argument(
        "--imgsz", "--img", "--img-size", type=int_in(32), default=640, help="train and val image size (pixels)"
    )
    p.add_argument("--rect", action="store_true", help="rectangular training batches")
    p.add_argument("--resume", nargs="?", const=True, default=False, help="resume the newest run, or a given last.pt")
    p.add_argument("--nosave", action="store_true", help="only save the final checkpoint")
    p.add_argument("--noval", action="store_true", help="only validate the final epoch")
    p.add_argument("--noautoanchor", action="store_true", help="disable AutoAnchor")
    p.add_argument("--noplots", action="store_true", help="save no plot files")
    p.add_argument("--cache", type=str, nargs="?", const="ram", help="cache images in 'ram' (default) or 'disk'")
    p.add_argument("--device", default="", help="cuda device, i.e. 0 or 0,1,2,3 or cpu")
    p.add_argument("--multi-scale", action="store_true", help="vary image size +/- 50%%")
    p.add_argument("--single-cls", action="store_true", help="train multi-class data as one class")
    p.add_argument("--optimizer", type=str, choices=["SGD", "Adam", "AdamW"], default="SGD")
    p.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm, only in distributed CUDA training")
    p.add_argument("--workers", type=int_in(0), default=8, help="max dataloader workers (per process in DDP)")
    p.add_argument("--project", default=str(ROOT / "runs" / "train"), help="save to project/name")
    p.add_argument("--name", default="exp", help="save to project/name")
    p.add_argument("--exist-ok", action="store_true", help="existing project/name ok, do not increment")
    p.add_argument("--cos-lr", action="store_true", help="cosine LR schedule")
    p.add_argument("--label-smoothing", type=_smoothing, default=0.0, help="label smoothing epsilon, in [0, 1)")
    p.add_argument(
        "--patience",
        type=int_in(0),
        default=100,
        help="early stopping patience (epochs without improvement; 0 disables)",
    )
    p.add_argument("--freeze", nargs="+", type=int_in(0), default=[0], help="freeze layers: backbone=10, first3=0 1 2")
    p.add_argument("--save-period", type=int, default=-1, help="save a checkpoint every x epochs (disabled if < 1)")
    p.add_argument("--seed", type=int, default=0, help="global training seed")
    p.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mixed precision (default: on for CUDA; on CPU --amp uses bfloat16 where supported)",
    )
    return p


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """YOLOv5's train.py flags; a bad value exits 2 with one line naming the flag."""
    return build_parser().parse_args(argv)


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


def resume_options(opt: argparse.Namespace) -> tuple[argparse.Namespace, dict]:
    """The saved run's options (plus --device/--workers if given now) and its checkpoint, or TrainError."""
    last = find_resume_checkpoint(opt.resume, opt.project)
    ckpt = load_checkpoint(last)
    if "train_args" not in ckpt:
        raise TrainError(f"{last} cannot be resumed: it was not written by train.py (no training options inside)")
    if "optimizer" not in ckpt or "train_model" not in ckpt:
        raise TrainError(
            f"{last} cannot be resumed: its training finished and the optimizer state was stripped, nothing to resume"
        )
    check_resume_state(ckpt, last)
    saved = saved_options(ckpt["train_args"], last)
    if ckpt["epoch"] + 1 >= saved.epochs:
        raise TrainError(f"{last}: training to {saved.epochs} epochs is finished, nothing to resume")
    defaults = parse_opt([])
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


def saved_options(args, last: Path) -> argparse.Namespace:
    """The run options saved in a checkpoint ('train_args'), checked as the command line would be, or TrainError."""
    where = f"{last} cannot be resumed: its training options"
    if not isinstance(args, dict):
        raise TrainError(f"{where} ('train_args') are a {type(args).__name__}, not a mapping")
    missing = [k for k in SAVED_REQUIRED if k not in args]
    if missing:
        raise TrainError(f"{where} lack {', '.join(missing)}")
    parser = build_parser()
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


# ---------------------------------------------------------------------------------------------------------------------
# Entry points


def setup_run(opt: argparse.Namespace) -> tuple[dict, argparse.Namespace, torch.device, dict | None]:
    """Check the options, resolve --resume, pick the device and start distributed training if launched so."""
    resume_ckpt = None
    if RANK not in (-1, 0):
        set_logging(verbose=False)  # only the main process logs progress; others still report warnings
    if opt.resume:
        opt, resume_ckpt = resume_options(opt)
        hyp = opt.hyp if isinstance(opt.hyp, dict) else load_hyp(opt.hyp)
    else:
        hyp = load_hyp(opt.hyp)
        if not opt.cfg and not opt.weights:
            raise TrainError("either --cfg or --weights must be given")
    if opt.epochs < 1:
        raise TrainError(f"--epochs must be at least 1, got {opt.epochs}")
    if opt.batch_size < 1:
        raise TrainError(f"--batch-size must be a positive number, got {opt.batch_size} (AutoBatch is not supported)")
    if opt.cache not in (None, "ram", "disk", "val"):
        raise TrainError(f"--cache must be 'ram' or 'disk', got '{opt.cache}'")
    device = select_device(opt.device)
    if LOCAL_RANK != -1:
        if opt.batch_size % WORLD_SIZE:
            raise TrainError(f"--batch-size {opt.batch_size} must be a multiple of the {WORLD_SIZE} processes")
        if device.type == "cuda":
            if torch.cuda.device_count() <= LOCAL_RANK:
                raise TrainError(f"not enough CUDA devices for {WORLD_SIZE} processes")
            torch.cuda.set_device(LOCAL_RANK)
            device = torch.device("cuda", LOCAL_RANK)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", timeout=timedelta(hours=3))
    if not opt.resume:
        if Path(opt.project).exists() and not Path(opt.project).is_dir():
            raise TrainError(f"--project {opt.project} is a file, not a folder")
        save_dir = str(increment_path(Path(opt.project) / opt.name, exist_ok=opt.exist_ok)) if RANK in (-1, 0) else None
        if RANK != -1:  # all processes must agree on the folder
            box = [save_dir]
            dist.broadcast_object_list(box, 0)
            save_dir = box[0]
        opt.save_dir = save_dir
    return hyp, opt, device, resume_ckpt


def _command(opt: argparse.Namespace) -> None:
    """Set up (options, resume, device, distributed) and train."""
    train(*setup_run(opt))


def main(opt: argparse.Namespace) -> int:
    """Run training from parsed options; 0 on success, 1 with a one-line error when it cannot be done."""
    try:
        return run_cli(lambda: _command(opt))
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def run(**kwargs) -> int:
    """Programmatic use: run(data='coco128.yaml', imgsz=320, weights='yolov5n.pt'); returns the exit code."""
    opt = parse_opt([])
    for k, v in kwargs.items():
        setattr(opt, k, v)
    return main(opt)


if __name__ == "__main__":
    sys.exit(main(parse_opt()))
