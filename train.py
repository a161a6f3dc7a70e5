"""Train a detector (YOLOv5, YOLOv8, YOLO11 or YOLO26) on a dataset described by a data YAML.

Usage:
    python train.py --data coco128.yaml --weights yolov5s.pt --img 640        # from pretrained weights
    python train.py --data coco128.yaml --weights '' --cfg yolov5s.yaml       # from scratch
    python train.py --data coco128.yaml --weights '' --cfg yolo11n.yaml       # YOLO11, Ultralytics' hyperparameters
    python train.py --resume                                                   # continue the newest unfinished run
    python -m torch.distributed.run --nproc_per_node 2 train.py --data coco128.yaml --weights yolov5s.pt
"""

import argparse
import sys

import torch
import torch.distributed as dist

from utils.cli import run_cli
from utils.data.hyp import load_hyp
from utils.log import set_logging
from utils.torch_utils import fit_threads_to_idle_cores, select_device
from utils.train.callbacks import Callback
from utils.train.config import TrainConfig
from utils.train.distributed import MAIN_PROCESS, start_distributed
from utils.train.evolve import evolve
from utils.train.options import build_parser, check_options, default_hyp
from utils.train.resume import resume_options
from utils.train.run_folder import check_project
from utils.train.trainer import train


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """train.py's flags (YOLOv5's, for every family); a bad value exits 2 with one line naming the flag."""
    return build_parser().parse_args(argv)


def run_config(opt: argparse.Namespace) -> tuple[TrainConfig, dict | None]:
    """The run's TrainConfig from the flags and, with --resume, the checkpoint it continues (its saved options,
    checked as the command line would be). --evolve refuses --resume itself, with its own message."""
    if opt.resume and not opt.evolve:
        saved, resume_ckpt = resume_options(opt, build_parser)
        hyp = saved.hyp if isinstance(saved.hyp, dict) else load_hyp(saved.hyp)
        return TrainConfig.from_namespace(saved, hyp=hyp), resume_ckpt
    check_options(opt)
    check_project(opt.project)
    hyp_file = opt.hyp or default_hyp(opt)
    # A new run's folder is reserved by the Trainer once set-up has worked: save_dir starts as None.
    return TrainConfig.from_namespace(opt, hyp=load_hyp(hyp_file), hyp_file=str(hyp_file), save_dir=None), None


def setup_run(opt: argparse.Namespace) -> tuple[TrainConfig, torch.device, dict | None]:
    """The run's config and checkpoint to resume (see run_config), its device, and distributed training joined
    when launched by torchrun."""
    if not MAIN_PROCESS:
        set_logging(verbose=False)  # only the main process logs progress; others still report warnings
    config, resume_ckpt = run_config(opt)
    device = start_distributed(select_device(config.device), config.batch_size)
    return config, device, resume_ckpt


def _train(opt: argparse.Namespace, callbacks: list[Callback] | None, fit_threads: bool) -> None:
    """Set up (options, resume, device, distributed) and train, or evolve hyperparameters with --evolve.

    fit_threads (the command line): on a CPU, torch's threads cut to the cores other processes leave idle. Two
    threads on a 2-core CPU that other jobs also use spun in their parallel regions: a yolo11n-seg step at load 13
    cost ~10x the CPU seconds of a one-thread step (docs/segmentation.md)."""
    if opt.evolve:
        evolve(run_config(opt)[0], callbacks)
        return
    config, device, resume_ckpt = setup_run(opt)
    if fit_threads and device.type == "cpu":
        fit_threads_to_idle_cores()
    train(config, device, resume_ckpt, callbacks=callbacks)


def main(opt: argparse.Namespace, callbacks: list[Callback] | None = None, fit_threads: bool = False) -> int:
    """Run training from parsed options (plus callbacks, e.g. a logger); 0 on success, 1 with a one-line error.
    fit_threads: fit torch's CPU threads to the idle cores (the command line does; see _train)."""
    try:
        return run_cli(lambda: _train(opt, callbacks, fit_threads))
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
    sys.exit(main(parse_opt(), fit_threads=True))
