"""The training engine behind train.py: model and optimiser set-up, the epoch loop with AMP and EMA, checkpoints.

train.py parses the command line and calls train(); each helper here is also usable on its own (tests,
scripts/gpu_check.py).
"""

import argparse
import csv
import errno
import math
import os
import random
import time
from contextlib import contextmanager, nullcontext
from copy import deepcopy
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import yaml
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.optim import lr_scheduler
from tqdm import tqdm

from models.checkpoint import (
    checkpoint_dict,
    fp16_state_dict,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from models.yolo import Model
from utils.augment import check_img_size, letterbox
from utils.autoanchor import check_anchors
from utils.datasets import create_dataloader, load_data_config
from utils.downloads import DownloadError, attempt_download_weights
from utils.errors import YoloError
from utils.log import LOGGER
from utils.loss import ComputeLoss
from utils.metrics import fitness
from utils.plots import save_batch_plot
from utils.torch_utils import ModelEMA, cpu_supports_bf16, de_parallel, init_seeds
from utils.validate import run as validate

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))  # set by torch.distributed.run
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))
NBS = 64  # nominal batch size: gradients are accumulated up to it and weight decay is scaled to it
RESULT_COLUMNS = [
    "epoch",
    "train/box_loss",
    "train/obj_loss",
    "train/cls_loss",
    "metrics/precision",
    "metrics/recall",
    "metrics/mAP50",
    "metrics/mAP50-95",
    "val/box_loss",
    "val/obj_loss",
    "val/cls_loss",
    "lr/pg0",
    "lr/pg1",
    "lr/pg2",
]
# Checkpoint entries only needed to resume; removed when training ends.
RESUME_KEYS = ("optimizer", "scaler", "ema_updates", "train_model", "best_epoch")


class TrainError(YoloError):
    """A training request that cannot be carried out; the message is one line."""


def plain_args(opt: argparse.Namespace) -> dict:
    """vars(opt) with only plain types (str, numbers, lists, dicts), so checkpoints load with weights_only=True."""

    def plain(v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        return str(v)

    return {k: plain(v) for k, v in vars(opt).items()}


# ---------------------------------------------------------------------------------------------------------------------
# Model, weights and image size


def intersect_state_dicts(src: dict, dst: dict, exclude: tuple[str, ...] = ()) -> dict:
    """Entries of src whose name and shape match dst, skipping names containing any exclude string."""
    return {k: v for k, v in src.items() if k in dst and not any(x in k for x in exclude) and v.shape == dst[k].shape}


def build_model(
    opt: argparse.Namespace, nc: int, hyp: dict, device: torch.device, resume_ckpt: dict | None = None
) -> Model:
    """The model to train: from --cfg, from --weights with every matching tensor transferred, or resumed."""
    anchors = round(hyp.get("anchors") or 0) or None  # as YOLOv5: rounded, and 0 keeps the config's anchors
    if resume_ckpt is not None:  # the training weights (not the EMA) of the interrupted run
        saved_nc = resume_ckpt["yaml"].get("nc")
        if saved_nc != nc:
            raise TrainError(
                f"{opt.weights} cannot be resumed: it was trained for {saved_nc} classes but {opt.data} "
                f"now has {nc}; start a new run with --weights {opt.weights}"
            )
        model = _make_model(resume_ckpt["yaml"], nc, None)
        _load_resume_state(model, resume_ckpt["train_model"], f"{opt.weights}: its training weights")
        return model.to(device)
    if not opt.weights:
        if not opt.cfg:
            raise TrainError("give --cfg (e.g. yolov5s.yaml) to train from scratch, or --weights to fine-tune")
        return _make_model(opt.cfg, nc, anchors).to(device)
    try:
        path = attempt_download_weights(opt.weights)
    except DownloadError as e:
        raise TrainError(str(e)) from None
    ckpt = load_checkpoint(path)
    model = _make_model(opt.cfg or ckpt["yaml"], nc, anchors)
    # Anchors come from the checkpoint unless the user chose a config or anchor count of their own.
    exclude = ("anchor",) if opt.cfg or anchors else ()
    model_state = model.state_dict()
    matched = intersect_state_dicts(ckpt["model"], model_state, exclude)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in matched.items()}, strict=False)
    LOGGER.info(f"Transferred {len(matched)}/{len(model_state)} items from {path}")
    skipped = [k for k in model_state if k not in matched and not k.endswith("num_batches_tracked")]
    if skipped:
        LOGGER.info(
            f"Not transferred (another shape or name, e.g. a different class count): {len(skipped)} "
            f"tensors, e.g. {', '.join(skipped[:3])}"
        )
    return model.to(device)


def _load_resume_state(module: nn.Module, state: dict, what: str) -> None:
    """module.load_state_dict(state) as float32, or TrainError naming a weight that belongs to another model."""
    own = module.state_dict()
    problem = next((f"{k} is missing" for k in own if k not in state), None)
    problem = problem or next((f"{k} is not in the model" for k in state if k not in own), None)
    problem = problem or next(
        (
            f"{k} is {tuple(v.shape)} in the file but {tuple(own[k].shape)} in the model"
            for k, v in state.items()
            if v.shape != own[k].shape
        ),
        None,
    )
    if problem:
        raise TrainError(f"{what} do not fit its model config (a checkpoint of another model?): {problem}")
    module.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})


def _load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, last: str) -> None:
    """optimizer.load_state_dict(state), or TrainError when the state was saved for another model."""
    try:
        optimizer.load_state_dict(state)
        problem = next(
            (
                f"group {j} lacks {k}"
                for j, g in enumerate(optimizer.param_groups)
                for k in ("initial_lr", "lr")
                if k not in g
            ),
            None,
        )  # both written by a real run
        problem = problem or next(
            (
                f"a {tuple(v.shape)} buffer for a {tuple(p.shape)} weight"
                for p, st in optimizer.state.items()
                for v in st.values()
                if isinstance(v, torch.Tensor) and v.dim() and v.shape != p.shape
            ),
            None,
        )
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        problem = " ".join(str(e).split())
    if problem:
        raise TrainError(
            f"{last}: its optimizer state does not fit the model (a checkpoint of another model?): {problem}"
        )


def _make_model(cfg, nc: int, anchors: int | None) -> Model:
    try:
        return Model(cfg, ch=3, nc=nc, anchors=anchors)
    except FileNotFoundError as e:
        raise TrainError(str(e)) from None
    except (KeyError, ValueError, TypeError, IndexError) as e:
        where = "" if isinstance(cfg, dict) else f" {cfg}"
        raise TrainError(f"unusable model config{where}: {' '.join(str(e).split())}") from None


def freeze_layers(model: nn.Module, freeze: list[int]) -> None:
    """Freeze the first N layers (--freeze N) or the listed indices (--freeze 0 1 2); TrainError if none is left."""
    n_layers = len(model.model)
    indices = freeze if len(freeze) > 1 else range(freeze[0])
    beyond = [x for x in freeze if x < 0 or x > n_layers or (len(freeze) > 1 and x == n_layers)]
    if beyond:
        valid = f"0..{n_layers - 1}" if len(freeze) > 1 else f"0..{n_layers} (the first N layers)"
        raise TrainError(f"--freeze {beyond[0]}: the model has {n_layers} layers, valid values are {valid}")
    prefixes = [f"model.{x}." for x in indices]
    for name, p in model.named_parameters():
        p.requires_grad = not any(name.startswith(x) for x in prefixes)
        if not p.requires_grad:
            LOGGER.debug(f"freezing {name}")
    if not any(p.requires_grad for p in model.parameters()):
        raise TrainError(
            f"--freeze {' '.join(map(str, freeze))} freezes every layer of the {n_layers}-layer model: "
            f"nothing left to train"
        )


# ---------------------------------------------------------------------------------------------------------------------
# Optimiser, schedule, early stopping


def smart_optimizer(
    model: nn.Module, name: str = "SGD", lr: float = 0.001, momentum: float = 0.9, decay: float = 1e-5
) -> torch.optim.Optimizer:
    """Optimizer with three parameter groups: 0 biases, 1 weights (with decay), 2 BatchNorm weights (no decay)."""
    biases, weights, bn_weights = [], [], []
    norm_types = tuple(v for k, v in nn.__dict__.items() if "Norm" in k and isinstance(v, type))
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            if pname == "bias":
                biases.append(p)
            elif pname == "weight" and isinstance(module, norm_types):
                bn_weights.append(p)
            else:
                weights.append(p)
    if name == "Adam":
        optimizer = torch.optim.Adam(biases, lr=lr, betas=(momentum, 0.999))
    elif name == "AdamW":
        optimizer = torch.optim.AdamW(biases, lr=lr, betas=(momentum, 0.999), weight_decay=0.0)
    elif name == "SGD":
        optimizer = torch.optim.SGD(biases, lr=lr, momentum=momentum, nesterov=True)
    else:
        raise TrainError(f"optimizer {name} not supported: use SGD, Adam or AdamW")
    optimizer.add_param_group({"params": weights, "weight_decay": decay})
    optimizer.add_param_group({"params": bn_weights, "weight_decay": 0.0})
    LOGGER.info(
        f"optimizer: {name}(lr={lr}) with parameter groups {len(bn_weights)} weight(decay=0.0), "
        f"{len(weights)} weight(decay={decay}), {len(biases)} bias"
    )
    return optimizer


def lr_lambda(epochs: int, lrf: float, cos: bool = False):
    """LR multiplier per epoch: linear from 1 to lrf, or a cosine (one-cycle) from 1 to lrf."""
    if cos:
        return lambda x: ((1 - math.cos(x * math.pi / epochs)) / 2) * (lrf - 1) + 1
    return lambda x: (1 - x / epochs) * (1.0 - lrf) + lrf


class EarlyStopping:
    """Stop when fitness has not improved for `patience` epochs (0 disables)."""

    def __init__(self, patience: int = 30, best_fitness: float = 0.0, best_epoch: int = 0):
        self.best_fitness, self.best_epoch = best_fitness, best_epoch
        self.patience = patience or float("inf")
        self.possible_stop = False  # the next epoch may be the last: validate it even with --noval

    def __call__(self, epoch: int, fi: float) -> bool:
        if fi >= self.best_fitness:  # >= so that zero fitness early in training still counts
            self.best_epoch, self.best_fitness = epoch, fi
        delta = epoch - self.best_epoch
        self.possible_stop = delta >= (self.patience - 1)
        stop = delta >= self.patience
        if stop:
            LOGGER.info(
                f"Stopping training early as no improvement observed in last {self.patience} epochs. "
                f"Best results observed at epoch {self.best_epoch}, best model saved as best.pt. "
                f"Use --patience 0 to disable early stopping."
            )
        return stop


# ---------------------------------------------------------------------------------------------------------------------
# Precision


def resolve_amp(amp: bool | None, device: torch.device) -> torch.dtype | None:
    """The autocast dtype to train under, or None for float32."""
    if device.type == "cuda":
        return torch.float16 if amp is not False else None
    if amp:
        if device.type == "cpu" and cpu_supports_bf16():
            LOGGER.info("AMP: training under bfloat16 autocast on the CPU")
            return torch.bfloat16
        LOGGER.warning(f"WARNING: --amp needs CUDA or a CPU with bfloat16 support, training float32 on {device.type}")
    return None


@torch.no_grad()
def check_amp(model: nn.Module, image: torch.Tensor, dtype: torch.dtype) -> bool:
    """True when the model's outputs under autocast agree with float32 on a sample image."""
    probe = deepcopy(de_parallel(model)).eval()
    y32 = probe(image)[0].float()
    with torch.autocast(device_type=image.device.type, dtype=dtype):
        ylow = probe(image)[0].float()
    del probe
    size = max(image.shape[2:])
    tol_box, tol_conf = (0.02, 0.05) if dtype == torch.float16 else (0.05, 0.1)  # bfloat16 has 8 mantissa bits
    ok = (
        bool(torch.isfinite(ylow).all())
        and float(((ylow[..., :4] - y32[..., :4]).abs() / size).max()) < tol_box
        and float((ylow[..., 4:] - y32[..., 4:]).abs().max()) < tol_conf
    )
    if ok:
        LOGGER.info("AMP: checks passed")
    else:
        LOGGER.warning("WARNING: AMP checks failed: mixed-precision outputs differ from float32, training in float32")
    return ok


def all_finite(model: nn.Module) -> bool:
    """True when every floating-point weight and buffer is finite."""
    return all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints, resume and results


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


def write_results_row(file: Path, values: list) -> None:
    """Append one epoch's row to results.csv (header first when the file is new)."""
    new = not file.exists()
    with open(file, "a", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(RESULT_COLUMNS)
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


# ---------------------------------------------------------------------------------------------------------------------
# Charts (matplotlib, loaded lazily): a plotting failure must never stop training


def _plot(name: str, *args) -> None:
    """Call a plotting function of utils.charts; a failure is only a warning."""
    try:
        from utils import charts

        getattr(charts, name)(*args)
    except Exception as e:  # a plot must never stop training
        LOGGER.warning(f"WARNING: {name} failed: {e}")


# ---------------------------------------------------------------------------------------------------------------------
# Distributed helpers


@contextmanager
def distributed_zero_first(local_rank: int):
    """Let the local master run a block first (e.g. building a label cache) while the others wait."""
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()


def _all_finite_across_ranks(loss: torch.Tensor) -> bool:
    """Whether every process's loss is finite, so all skip a bad step together (no collective left hanging)."""
    finite = torch.isfinite(loss).all().float()
    if WORLD_SIZE > 1 and dist.is_initialized():
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    return bool(finite.item())


# ---------------------------------------------------------------------------------------------------------------------
# Training


def train(hyp: dict, opt: argparse.Namespace, device: torch.device, resume_ckpt: dict | None = None) -> tuple:
    """Train per opt; return the final (P, R, mAP50, mAP50-95, val box, obj, cls loss) of the last validation."""
    save_dir = Path(opt.save_dir)
    epochs, batch_size, single_cls = opt.epochs, opt.batch_size, opt.single_cls
    main_process = RANK in (-1, 0)
    plots = not opt.noplots
    weights_dir = save_dir / "weights"
    last, best = weights_dir / "last.pt", weights_dir / "best.pt"
    results_csv = save_dir / "results.csv"
    opt.hyp = dict(hyp)  # unscaled, saved with the run so that --resume restores them
    hyp = dict(hyp)
    if main_process:
        LOGGER.info("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in hyp.items()))

    seed = opt.seed % 2**32  # --seed takes any integer; NumPy's seeds must be in [0, 2**32)
    init_seeds((seed + 1 + RANK) % 2**32)
    with distributed_zero_first(LOCAL_RANK):
        data = load_data_config(opt.data)
    if not data.get("train") or not data.get("val"):
        raise TrainError(f"{opt.data} needs both 'train' and 'val' splits for training")
    nc = 1 if single_cls else int(data["nc"])
    names = (["item"] if len(data["names"]) != 1 else data["names"]) if single_cls else data["names"]

    # Model
    model = build_model(opt, nc, hyp, device, resume_ckpt if opt.resume else None)
    ckpt = resume_ckpt
    model.names = list(names)
    channels_last = device.type == "cpu"  # oneDNN trains convolutions about 20% faster in NHWC
    if channels_last:
        model.to(memory_format=torch.channels_last)
    freeze_layers(model, opt.freeze)
    gs = max(int(model.stride.max()), 32)
    imgsz = check_img_size(opt.imgsz, gs, floor=gs * 2)

    # Data: no label boxes at all (a forgotten labels folder) would train on backgrounds only, so it is refused
    with distributed_zero_first(LOCAL_RANK):
        train_loader, dataset = create_dataloader(
            data["train"],
            imgsz,
            batch_size // WORLD_SIZE,
            gs,
            single_cls,
            hyp=dict(hyp),
            augment=True,
            cache=None if opt.cache == "val" else opt.cache,
            rect=opt.rect,
            rank=LOCAL_RANK,
            workers=opt.workers,
            shuffle=True,
            seed=seed,
            prefix="train: ",
            nc=nc,
            require_labels=True,
        )
    nb = len(train_loader)
    batch_size = train_loader.batch_size * WORLD_SIZE  # the loader clips the batch to a small dataset

    # Optimiser: gradients accumulate to the nominal batch; weight decay scales with the effective batch
    accumulate = max(round(NBS / batch_size), 1)
    hyp["weight_decay"] *= batch_size * accumulate / NBS
    optimizer = smart_optimizer(model, opt.optimizer, hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    lf = lr_lambda(epochs, hyp["lrf"], opt.cos_lr)
    scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    labels = np.concatenate(dataset.labels, 0) if len(dataset.labels) else np.zeros((0, 5))
    val_loader = None
    if main_process:
        # The run folder is made only now that data and model are known good, so a failed start leaves none.
        weights_dir.mkdir(parents=True, exist_ok=True)
        (save_dir / "hyp.yaml").write_text(yaml.safe_dump(opt.hyp, sort_keys=False), encoding="utf-8")
        (save_dir / "opt.yaml").write_text(yaml.safe_dump(plain_args(opt), sort_keys=False), encoding="utf-8")
        val_loader = create_dataloader(
            data["val"],
            imgsz,
            train_loader.batch_size * 2,
            gs,
            single_cls,
            hyp=dict(hyp),
            cache=None if opt.noval else opt.cache,
            rect=True,
            rank=-1,
            workers=opt.workers * 2,
            pad=0.5,
            prefix="val: ",
            nc=nc,
        )[0]
        val_bs = val_loader.batch_size  # clipped to a small val set
        if not opt.resume:
            if not opt.noautoanchor:
                check_anchors(dataset, model=model, thr=hyp["anchor_t"], imgsz=imgsz, seed=seed)
            if plots:
                _plot("plot_labels", labels, names, save_dir)

    # Resume state
    start_epoch, best_fitness, best_epoch = 0, 0.0, 0
    ema = ModelEMA(model) if main_process else None
    scaler_state = None
    if opt.resume:
        _load_optimizer_state(optimizer, ckpt["optimizer"], opt.weights)
        start_epoch, best_fitness = ckpt["epoch"] + 1, float(ckpt["best_fitness"])
        best_epoch = int(ckpt.get("best_epoch", ckpt["epoch"]))
        scaler_state = ckpt.get("scaler")
        if ema is not None:
            _load_resume_state(ema.ema, ckpt["model"], f"{opt.weights}: its EMA weights")
            ema.updates = int(ckpt["ema_updates"])
        if main_process:
            truncate_results(results_csv, start_epoch)
    del ckpt, resume_ckpt

    # Distributed
    if RANK != -1:
        if opt.sync_bn:
            if device.type == "cuda":
                model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
                LOGGER.info("Using SyncBatchNorm()")
            else:
                LOGGER.warning("WARNING: --sync-bn needs CUDA, ignored on CPU")
        model = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[LOCAL_RANK] if device.type == "cuda" else None,
            output_device=LOCAL_RANK if device.type == "cuda" else None,
        )

    # Precision
    amp_dtype = resolve_amp(opt.amp, device)
    if amp_dtype is not None:
        sample = letterbox(dataset.load_image(0)[0], imgsz, auto=False)[0]
        sample = torch.from_numpy(np.ascontiguousarray(sample.transpose(2, 0, 1)[::-1])).to(device).float()[None] / 255
        if not check_amp(model, sample, amp_dtype):
            amp_dtype = None
    use_scaler = amp_dtype == torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
    if scaler_state and use_scaler:
        scaler.load_state_dict(scaler_state)

    # Loss gains scale with the number of detection levels, classes and image size
    nl = de_parallel(model).model[-1].nl
    hyp["box"] *= 3 / nl
    hyp["cls"] *= nc / 80 * 3 / nl
    hyp["obj"] *= (imgsz / 640) ** 2 * 3 / nl
    hyp["label_smoothing"] = opt.label_smoothing
    compute_loss = ComputeLoss(model, hyp)

    # Train
    t0 = time.time()
    nw = max(round(hyp["warmup_epochs"] * nb), 100)  # warmup iterations
    last_opt_step = -1
    maps = np.zeros(nc)
    results = (0, 0, 0, 0, 0, 0, 0)
    scheduler.last_epoch = start_epoch - 1
    stopper, stop = EarlyStopping(opt.patience, best_fitness, best_epoch), False
    if main_process:
        LOGGER.info(
            f"Image sizes {imgsz} train, {imgsz} val\nUsing {train_loader.num_workers} dataloader workers\n"
            f"Logging results to {save_dir}\nStarting training for {epochs} epochs..."
        )
    epoch = start_epoch
    for epoch in range(start_epoch, epochs):
        model.train()
        if RANK != -1:
            train_loader.sampler.set_epoch(epoch)
        mloss = torch.zeros(3, device=device)
        pbar = enumerate(train_loader)
        if main_process:
            LOGGER.info(
                ("\n" + "%11s" * 7) % ("Epoch", "GPU_mem", "box_loss", "obj_loss", "cls_loss", "Instances", "Size")
            )
            pbar = tqdm(pbar, total=nb, bar_format="{l_bar}{bar:10}{r_bar}")
        optimizer.zero_grad()
        n_skipped = 0
        for i, (imgs, targets, paths, _) in pbar:
            ni = i + nb * epoch  # iterations since the start of training
            imgs = imgs.to(device, non_blocking=True).float() / 255

            if ni <= nw:  # warmup: bias lr falls from warmup_bias_lr, other lrs rise from 0, momentum rises
                xi = [0, nw]
                accumulate = max(1, np.interp(ni, xi, [1, NBS / batch_size]).round())
                for j, group in enumerate(optimizer.param_groups):
                    start_lr = hyp["warmup_bias_lr"] if j == 0 else 0.0
                    # Plain floats: the optimizer state is saved in checkpoints that load with weights_only.
                    group["lr"] = float(np.interp(ni, xi, [start_lr, group["initial_lr"] * lf(epoch)]))
                    if "momentum" in group:
                        group["momentum"] = float(np.interp(ni, xi, [hyp["warmup_momentum"], hyp["momentum"]]))

            if opt.multi_scale:
                sz = random.randrange(int(imgsz * 0.5), int(imgsz * 1.5) + gs) // gs * gs
                sf = sz / max(imgs.shape[2:])
                if sf != 1:
                    ns = [math.ceil(x * sf / gs) * gs for x in imgs.shape[2:]]
                    imgs = F.interpolate(imgs, size=ns, mode="bilinear", align_corners=False)
            if channels_last:
                imgs = imgs.contiguous(memory_format=torch.channels_last)

            autocast = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
            with autocast:
                pred = model(imgs)
                loss, loss_items = compute_loss(pred, targets.to(device))
                if RANK != -1:
                    loss *= WORLD_SIZE  # DDP averages gradients across processes

            if not _all_finite_across_ranks(loss):
                n_skipped += 1
                if main_process:
                    LOGGER.warning(
                        f"WARNING: non-finite loss {loss_items.tolist()} at epoch {epoch} batch {i}, step skipped"
                    )
                optimizer.zero_grad()
                continue
            scaler.scale(loss).backward()

            if ni - last_opt_step >= accumulate:
                scaler.unscale_(optimizer)  # so clipping sees true gradient norms
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                if use_scaler or torch.isfinite(grad_norm):
                    scaler.step(optimizer)  # the scaler itself skips steps whose gradients hold inf/NaN
                    scaler.update()
                    if ema is not None:
                        ema.update(model)
                else:  # without a scaler, a non-finite gradient would poison the weights: drop it
                    n_skipped += 1
                optimizer.zero_grad()
                last_opt_step = ni

            if main_process:
                mloss = (mloss * i + loss_items) / (i + 1)
                mem = f"{torch.cuda.memory_reserved(device) / 1e9 if device.type == 'cuda' else 0:.3g}G"
                pbar.set_description(
                    ("%11s" * 2 + "%11.4g" * 5)
                    % (f"{epoch}/{epochs - 1}", mem, *mloss.tolist(), targets.shape[0], imgs.shape[-1])
                )
                if plots and ni < 3:
                    save_batch_plot(imgs, targets, paths, save_dir / f"train_batch{ni}.jpg", names)
        if n_skipped and main_process:
            LOGGER.warning(f"WARNING: {n_skipped} steps skipped for non-finite losses or gradients in epoch {epoch}")

        lr = [group["lr"] for group in optimizer.param_groups]
        scheduler.step()

        if main_process:
            final_epoch = epoch + 1 == epochs or stopper.possible_stop
            eval_model = _fp16_rounded(ema.ema)  # score exactly the weights the checkpoint will hold
            if not opt.noval or final_epoch:
                results, maps, _ = validate(
                    data,
                    batch_size=val_bs,
                    imgsz=imgsz,
                    half=amp_dtype == torch.float16,
                    model=eval_model,
                    single_cls=single_cls,
                    dataloader=val_loader,
                    save_dir=save_dir,
                    plots=False,
                    compute_loss=compute_loss,
                )
            fi = float(fitness(results))
            stop = stopper(epoch, fi)
            if fi > best_fitness:
                best_fitness = fi
            write_results_row(results_csv, [epoch, *mloss.tolist(), *results, *lr])

            if not opt.nosave or final_epoch or stop:
                if all_finite(ema.ema) and all_finite(de_parallel(model)):
                    ckpt = checkpoint_dict(
                        ema.ema,
                        epoch=epoch,
                        best_fitness=best_fitness,
                        optimizer=optimizer.state_dict(),
                        scaler=scaler.state_dict(),
                        ema_updates=ema.updates,
                        train_model=fp16_state_dict(de_parallel(model)),
                        train_args=plain_args(opt),
                        best_epoch=stopper.best_epoch,
                        date=datetime.now().isoformat(),
                    )
                    save_or_explain(ckpt, last)
                    if best_fitness == fi:
                        save_or_explain(ckpt, best)
                    if opt.save_period > 0 and epoch % opt.save_period == 0:
                        save_or_explain(ckpt, weights_dir / f"epoch{epoch}.pt")
                    del ckpt
                else:
                    LOGGER.warning(f"WARNING: non-finite weights after epoch {epoch}: checkpoint not saved")

        if RANK != -1:  # every process stops together
            flag = [stop if RANK == 0 else None]
            dist.broadcast_object_list(flag, 0)
            stop = flag[0]
        if stop:
            break

    if main_process:
        LOGGER.info(f"\n{epoch - start_epoch + 1} epochs completed in {(time.time() - t0) / 3600:.3f} hours.")
        for f in (last, best):
            if f.exists():
                strip_optimizer(f)
        if best.exists():
            LOGGER.info(f"\nValidating {best}...")
            results, _, _ = validate(
                data,
                batch_size=val_bs,
                imgsz=imgsz,
                half=amp_dtype == torch.float16,
                model=load_model(best, device=device),
                single_cls=single_cls,
                dataloader=val_loader,
                save_dir=save_dir,
                plots=plots,
                compute_loss=compute_loss,
                verbose=True,
            )
        if plots:
            _plot("plot_results", results_csv)
        LOGGER.info(f"Results saved to {save_dir}")
    return tuple(results)


def _fp16_rounded(model: nn.Module) -> nn.Module:
    """A copy of the model with weights rounded through FP16, the precision checkpoints store."""
    copy = deepcopy(model)
    with torch.no_grad():
        for v in copy.state_dict().values():
            if v.is_floating_point():
                v.copy_(v.half().float())
    return copy
