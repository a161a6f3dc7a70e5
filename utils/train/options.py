"""train.py's option values: argparse types for its flags, the default hyperparameters, and the checks of flag
combinations that cannot run (each a one-line TrainError)."""

import argparse
import math

from models.nn.family import YOLOV5
from utils.cli import Parser, float_in, int_in
from utils.errors import TrainError
from utils.files import DATA_DIR
from utils.log import LOGGER
from utils.train.config import DEFAULT_PROJECT, model_family
from utils.train.distributed import RANK


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


def default_hyp(opt: argparse.Namespace | None = None) -> str:
    """The hyperparameter file when --hyp is not given: the model family's (models/nn/family.py), for the --cfg
    model, or else the --weights model: data/hyp.anchor_free.yaml (Ultralytics' defaults) for YOLOv8, YOLO11 and
    YOLO26; data/hyp.scratch.yaml for YOLOv5, from weights and from scratch alike, as YOLOv5 HEAD (its
    hyp.scratch-low values), and when the model cannot be read (the Trainer then reports why).

    hyp.finetune.yaml (YOLOv5 v3.0's default from weights, evolved on VOC) is only an option: in a 1-epoch fine-tune
    of yolov5n on COCO images it gave mAP50-95 0.182 against 0.278 with these values."""
    family = (model_family(opt.cfg, opt.weights) if opt is not None else None) or YOLOV5
    file = DATA_DIR / family.hyp_file
    why = "Ultralytics' defaults" if family.optimizer == "ultralytics" else "YOLOv5's default"
    LOGGER.info(f"hyperparameters: data/{file.name} ({why}, for {family.title} models; --hyp to choose)")
    return str(file)


def check_options(opt: argparse.Namespace) -> None:
    """Flag values and combinations that cannot run, as one-line TrainErrors (train.py checks them before a
    TrainConfig is built)."""
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


def _add_data_and_model_flags(p: Parser) -> None:
    """What to train on what, how long and how big."""
    p.add_argument(
        "--weights",
        type=str,
        default="",
        help="initial weights: '' (scratch), ours or official (YOLOv5, YOLOv8, YOLO11, YOLO26)",
    )
    p.add_argument(
        "--cfg",
        type=str,
        default="",
        help="model YAML: yolov5n.yaml ... yolov5x.yaml, yolov8n.yaml, yolo11s.yaml, yolo26n.yaml ...",
    )
    p.add_argument("--data", type=str, default="coco128.yaml", help="dataset YAML")
    p.add_argument(
        "--hyp",
        type=str,
        default="",
        help="hyperparameter YAML (default: the model family's: data/hyp.anchor_free.yaml, Ultralytics' values, for "
        "YOLOv8/YOLO11/YOLO26; data/hyp.scratch.yaml, YOLOv5's scratch-low values, for YOLOv5, from --weights and "
        "from scratch alike; data/hyp.finetune.yaml is the VOC-evolved fine-tuning set)",
    )
    p.add_argument("--epochs", type=int_in(1), default=100, help="training epochs")
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


def _add_run_flags(p: Parser) -> None:
    """Resuming, saving, validation, hardware and optimisation."""
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        help="resume the newest unfinished run under --project, or a given last.pt (one outside a run folder's "
        "weights/ resumes into a new run folder)",
    )
    p.add_argument("--nosave", action="store_true", help="only save the final checkpoint")
    p.add_argument(
        "--noval",
        action="store_true",
        help="only validate the final epoch (validation uses the family's thresholds, as test.py does)",
    )
    p.add_argument(
        "--noautoanchor", action="store_true", help="disable AutoAnchor (YOLOv5; the others have no anchors)"
    )
    p.add_argument("--noplots", "--no-plots", action="store_true", help="save no plot files (test.py: --no-plots)")
    p.add_argument("--cache", type=str, nargs="?", const="ram", help="cache images in 'ram' (default) or 'disk'")
    p.add_argument("--device", default="", help="cuda device, i.e. 0 or 0,1,2,3 or cpu")
    p.add_argument("--multi-scale", action="store_true", help="vary image size +/- 50%%")
    p.add_argument("--single-cls", action="store_true", help="train multi-class data as one class")
    p.add_argument(
        "--optimizer",
        choices=["auto", "SGD", "Adam", "AdamW"],
        default="auto",
        help="auto: SGD for YOLOv5 models; for the anchor-free family AdamW or SGD with lr0 as Ultralytics chooses",
    )
    p.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm, only in distributed CUDA training")
    p.add_argument("--workers", type=int_in(0), default=8, help="max dataloader workers (per process in DDP)")
    p.add_argument("--project", default=str(DEFAULT_PROJECT), help="save to project/name")
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


def build_parser() -> Parser:
    """YOLOv5's train.py flags, with numeric ones range-checked at parse time; defaults as TrainConfig's."""
    p = Parser(
        description="Train a YOLOv5, YOLOv8, YOLO11 or YOLO26 detector (from a --cfg YAML or --weights) on a data YAML"
    )
    _add_data_and_model_flags(p)
    _add_run_flags(p)
    # Accepted for the legacy torch.distributed.launch, which passes it; the rank is read from LOCAL_RANK.
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p
