"""Train a YOLOv5 detector on a dataset described by a data YAML.

Usage:
    python train.py --data coco128.yaml --weights yolov5s.pt --img 640        # from pretrained weights
    python train.py --data coco128.yaml --weights '' --cfg yolov5s.yaml       # from scratch
    python train.py --resume                                                   # continue the newest run
    python -m torch.distributed.run --nproc_per_node 2 train.py --data coco128.yaml --weights yolov5s.pt
"""


import argparse
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from utils.checkpoint import (
    CheckpointError,
    load_checkpoint,
)
from utils.datasets import DatasetError, load_hyp
from utils.downloads import DownloadError
from utils.files import increment_path
from utils.log import LOGGER, one_line, set_logging
from utils.metrics import MetricsError
from utils.torch_utils import DeviceError, select_device
from utils.trainer import LOCAL_RANK, RANK, WORLD_SIZE, TrainError, train

ROOT = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------------------------------
# Command line


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """YOLOv5's train.py flags."""
    p = argparse.ArgumentParser(description="Train a YOLOv5 detector")
    p.add_argument("--weights", type=str, default="", help="initial weights: '' (scratch), ours or official YOLOv5")
    p.add_argument("--cfg", type=str, default="", help="model YAML, e.g. yolov5s.yaml")
    p.add_argument("--data", type=str, default="coco128.yaml", help="dataset YAML")
    p.add_argument("--hyp", type=str, default=str(ROOT / "data" / "hyp.scratch.yaml"), help="hyperparameter YAML")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16, help="total batch size for all processes")
    p.add_argument("--imgsz", "--img", "--img-size", type=int, default=640, help="train and val image size (pixels)")
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
    p.add_argument("--workers", type=int, default=8, help="max dataloader workers (per process in DDP)")
    p.add_argument("--project", default=str(ROOT / "runs" / "train"), help="save to project/name")
    p.add_argument("--name", default="exp", help="save to project/name")
    p.add_argument("--exist-ok", action="store_true", help="existing project/name ok, do not increment")
    p.add_argument("--cos-lr", action="store_true", help="cosine LR schedule")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="label smoothing epsilon")
    p.add_argument("--patience", type=int, default=100, help="early stopping patience (epochs without improvement)")
    p.add_argument("--freeze", nargs="+", type=int, default=[0], help="freeze layers: backbone=10, first3=0 1 2")
    p.add_argument("--save-period", type=int, default=-1, help="save a checkpoint every x epochs (disabled if < 1)")
    p.add_argument("--seed", type=int, default=0, help="global training seed")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                   help="mixed precision (default: on for CUDA; on CPU --amp uses bfloat16 where supported)")
    return p.parse_args(argv)


def find_resume_checkpoint(resume, project: str | Path) -> Path:
    """--resume's last.pt: the given file, or the newest last.pt under the project folder."""
    if isinstance(resume, str) and resume != "True":
        path = Path(resume)
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
        raise TrainError(f"{last} cannot be resumed: its training finished and the optimizer state was stripped, "
                         f"nothing to resume")
    saved = argparse.Namespace(**ckpt["train_args"])
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
        save_dir = str(increment_path(Path(opt.project) / opt.name, exist_ok=opt.exist_ok)) if RANK in (-1, 0) else None
        if RANK != -1:  # all processes must agree on the folder
            box = [save_dir]
            dist.broadcast_object_list(box, 0)
            save_dir = box[0]
        opt.save_dir = save_dir
    return hyp, opt, device, resume_ckpt


def main(opt: argparse.Namespace) -> int:
    """Run training from parsed options; 0 on success, 1 with a one-line error when it cannot be done."""
    try:
        hyp, opt, device, resume_ckpt = setup_run(opt)
        train(hyp, opt, device, resume_ckpt)
        return 0
    except (TrainError, DatasetError, CheckpointError, DeviceError, DownloadError, MetricsError) as e:
        LOGGER.error(f"ERROR: {one_line(e)}")
        return 1
    except OSError as e:  # e.g. a full disk while saving: the previous checkpoint is intact
        LOGGER.error(f"ERROR: {e.__class__.__name__}: {e}")
        return 1
    except KeyboardInterrupt:
        LOGGER.error("Training interrupted")
        return 130
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
