"""Train a YOLOv5 detector on a dataset described by a data YAML.

Usage:
    python train.py --data coco128.yaml --weights yolov5s.pt --img 640        # from pretrained weights
    python train.py --data coco128.yaml --weights '' --cfg yolov5s.yaml       # from scratch
    python train.py --resume                                                   # continue the newest unfinished run
    python -m torch.distributed.run --nproc_per_node 2 train.py --data coco128.yaml --weights yolov5s.pt
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from utils.cli import Parser, int_in, run_cli
from utils.data.config import load_hyp
from utils.log import set_logging
from utils.torch_utils import select_device
from utils.train.callbacks import Callback
from utils.train.evolve import evolve
from utils.train.options import batch_size_arg, check_options, default_hyp, smoothing_arg
from utils.train.resume import resume_options
from utils.train.trainer import RANK, check_project, start_distributed, train

ROOT = Path(__file__).resolve().parent


def build_parser() -> Parser:
    """YOLOv5's train.py flags, with numeric ones range-checked at parse time."""
    p = Parser(description="Train a YOLOv5 detector")
    p.add_argument("--weights", type=str, default="", help="initial weights: '' (scratch), ours or official YOLOv5")
    p.add_argument("--cfg", type=str, default="", help="model YAML, e.g. yolov5s.yaml")
    p.add_argument("--data", type=str, default="coco128.yaml", help="dataset YAML")
    p.add_argument(
        "--hyp",
        type=str,
        default="",
        help="hyperparameter YAML (default: data/hyp.scratch.yaml, YOLOv5's scratch-low values, from --weights and "
        "from scratch alike; data/hyp.finetune.yaml is the VOC-evolved fine-tuning set)",
    )
    p.add_argument("--epochs", type=int_in(1), default=100)
    p.add_argument(
        "--batch-size", type=batch_size_arg, default=16, help="total batch size for all processes, -1: AutoBatch"
    )
    p.add_argument(
        "--imgsz", "--img", "--img-size", type=int_in(32), default=640, help="train and val image size (pixels)"
    )
    p.add_argument("--rect", action="store_true", help="rectangular training batches")
    p.add_argument("--evolve", type=int_in(1), nargs="?", const=300, help="evolve hyperparameters for x generations")
    p.add_argument("--image-weights", action="store_true", help="sample images by class rarity and per-class mAP")
    p.add_argument("--quad", action="store_true", help="4-image collate: batch/4 images of twice the size")
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        help="resume the newest unfinished run under --project, or a given last.pt (one outside a run folder's "
        "weights/ resumes into a new run folder)",
    )
    p.add_argument("--nosave", action="store_true", help="only save the final checkpoint")
    p.add_argument("--noval", action="store_true", help="only validate the final epoch")
    p.add_argument("--noautoanchor", action="store_true", help="disable AutoAnchor")
    p.add_argument("--noplots", "--no-plots", action="store_true", help="save no plot files (test.py: --no-plots)")
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
    p.add_argument("--label-smoothing", type=smoothing_arg, default=0.0, help="label smoothing epsilon, in [0, 1)")
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
    # Accepted for the legacy torch.distributed.launch, which passes it; the rank is read from LOCAL_RANK.
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """YOLOv5's train.py flags; a bad value exits 2 with one line naming the flag."""
    return build_parser().parse_args(argv)


def setup_run(opt: argparse.Namespace) -> tuple[dict, argparse.Namespace, torch.device, dict | None]:
    """Check the options, resolve --resume, pick the device and start distributed training if launched so."""
    resume_ckpt = None
    if RANK not in (-1, 0):
        set_logging(verbose=False)  # only the main process logs progress; others still report warnings
    if opt.resume:
        opt, resume_ckpt = resume_options(opt, build_parser)
        hyp = opt.hyp if isinstance(opt.hyp, dict) else load_hyp(opt.hyp)
    else:
        check_options(opt)
        check_project(opt.project)
        opt.hyp = opt.hyp or default_hyp()
        hyp = load_hyp(opt.hyp)
        opt.hyp_file = str(opt.hyp)  # opt.hyp becomes the values themselves; opt.yaml keeps where they came from
        opt.save_dir = None  # the Trainer reserves a new run folder under --project/--name once set-up has worked
    device = start_distributed(select_device(opt.device), opt.batch_size)
    return hyp, opt, device, resume_ckpt


def _train(opt: argparse.Namespace, callbacks: list[Callback] | None) -> None:
    """Set up (options, resume, device, distributed) and train, or evolve hyperparameters with --evolve."""
    if opt.evolve:
        evolve(opt, callbacks)
    else:
        train(*setup_run(opt), callbacks=callbacks)


def main(opt: argparse.Namespace, callbacks: list[Callback] | None = None) -> int:
    """Run training from parsed options (plus callbacks, e.g. a logger); 0 on success, 1 with a one-line error."""
    try:
        return run_cli(lambda: _train(opt, callbacks))
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
