"""The training engine behind train.py: a Trainer whose train() is setup -> train_one_epoch + validate + save per
epoch -> finish, with callbacks (utils.train.callbacks) at each stage.

Set-up pieces live in utils.train.setup (model, optimizer, schedule, early stopping), the one training step and
its warmup and loss gains in utils.train.step, --resume's option checking in utils.train.resume.
"""

import argparse
import errno
import math
import os
import random
import time
from collections.abc import Callable
from contextlib import contextmanager
from copy import deepcopy
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import yaml
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.optim import lr_scheduler

from models.checkpoint import checkpoint_dict, fp16_state_dict, load_checkpoint, load_model, save_checkpoint
from utils.data.augment import check_img_size, letterbox
from utils.data.config import load_data_config
from utils.data.loader import create_dataloader
from utils.errors import RunFolderError, TrainError
from utils.eval.validate import ValidationOptions, ValidationResult, evaluate
from utils.files import reserve_run_dir
from utils.log import LOGGER
from utils.torch_utils import ModelEMA, de_parallel, init_seeds, retain_freed_memory
from utils.train.autoanchor import check_anchors
from utils.train.autobatch import autobatch
from utils.train.callbacks import BatchEnd, Callback, Callbacks, EpochResult, default_callbacks
from utils.train.image_weights import sample_indices
from utils.train.loss import ComputeLoss
from utils.train.setup import (
    EarlyStopping,
    all_finite,
    build_model,
    freeze_layers,
    load_optimizer_state,
    load_resume_state,
    lr_lambda,
    smart_optimizer,
)
from utils.train.step import (
    NBS,
    TrainingParts,
    apply_warmup,
    check_amp,
    loss_gains,
    resolve_amp,
    train_step,
    warmup_values,
)

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))  # set by torch.distributed.run
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))
# Checkpoint entries only needed to resume; removed when training ends.
RESUME_KEYS = ("optimizer", "scaler", "ema_updates", "train_model", "best_epoch")


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
# Checkpoints


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


# ---------------------------------------------------------------------------------------------------------------------
# Distributed


@contextmanager
def distributed_zero_first(local_rank: int):
    """Let the local master run a block first (e.g. building a label cache) while the others wait."""
    if local_rank not in (-1, 0):
        dist.barrier()
    yield
    if local_rank == 0:
        dist.barrier()


def start_distributed(device: torch.device, batch_size: int) -> torch.device:
    """Under torchrun, join the process group (NCCL on CUDA, gloo on the CPU); this process's device."""
    if LOCAL_RANK == -1:
        return device
    if batch_size % WORLD_SIZE:
        raise TrainError(f"--batch-size {batch_size} must be a multiple of the {WORLD_SIZE} processes")
    if device.type == "cuda":
        if torch.cuda.device_count() <= LOCAL_RANK:
            raise TrainError(f"not enough CUDA devices for {WORLD_SIZE} processes")
        torch.cuda.set_device(LOCAL_RANK)
        device = torch.device("cuda", LOCAL_RANK)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", timeout=timedelta(hours=3))
    return device


def check_project(project: str | Path) -> None:
    """TrainError for a --project that names a file (checked before any work, and again when the folder is made)."""
    if Path(project).exists() and not Path(project).is_dir():
        raise TrainError(f"--project {project} is a file, not a folder")


def new_run_folder(project: str | Path, name: str, exist_ok: bool) -> str:
    """project/name reserved for this run (created with its run marker, utils.files.reserve_run_dir): numbered
    exp2, exp3... if taken, unless exist_ok. Rank 0 reserves it and every process gets the same absolute path."""
    check_project(project)
    box = [None, None]  # the folder, or why it could not be made (every rank must raise, none may wait forever)
    if RANK in (-1, 0):
        try:
            box[0] = str(reserve_run_dir(Path(project) / name, exist_ok))
        except RunFolderError as e:
            box[1] = str(e)
    if RANK != -1:
        dist.broadcast_object_list(box, 0)
    if box[1] is not None:
        raise RunFolderError(box[1])
    return box[0]


def _broadcast_stop(stop: bool) -> bool:
    """Rank 0's early-stopping decision on every process, so all stop together."""
    if RANK == -1:
        return stop
    flag = [stop if RANK == 0 else None]
    dist.broadcast_object_list(flag, 0)
    return flag[0]


def epoch_result(
    epoch: int, train_losses: list[float], lrs: list[float], validation: ValidationResult | None
) -> EpochResult:
    """An epoch's EpochResult from its training losses, lrs and validation (zeros where there is none yet)."""
    if validation is None:
        return EpochResult(epoch, train_losses, 0.0, 0.0, 0.0, 0.0, [0.0, 0.0, 0.0], lrs, 0.0)
    m = validation.metrics
    losses = [float(x) for x in validation.losses]
    return EpochResult(epoch, train_losses, m.mp, m.mr, m.map50, m.map, losses, lrs, validation.fitness)


# ---------------------------------------------------------------------------------------------------------------------
# The Trainer


class Trainer:
    """Trains per train.py's options: setup(), then per epoch train_one_epoch(), validate() and save(), then finish().

    Callbacks (utils.train.callbacks) run on the main process only; the defaults write the console output, results.csv
    and the plots, and callbacks=[...] adds more.
    """

    def __init__(
        self,
        hyp: dict,
        opt: argparse.Namespace,
        device: torch.device,
        resume_ckpt: dict | None = None,
        callbacks: list[Callback] | None = None,
    ):
        self.opt, self.device = opt, device
        self.hyp = dict(hyp)
        opt.hyp = dict(hyp)  # unscaled, saved with the run so that --resume restores them
        # Given (a resumed run's own folder, an evolve generation), or None: reserved in setup() once data and
        # model are known good, so a failed start leaves no folder and two runs started together get two folders.
        given = getattr(opt, "save_dir", None)
        self.save_dir: Path | None = Path(given).absolute() if given else None
        self.epochs, self.plots, self.resuming = opt.epochs, not opt.noplots, bool(opt.resume)
        self.main_process = RANK in (-1, 0)
        self.resume_ckpt = resume_ckpt
        self.saved_epoch: int | None = None  # the epoch whose end state last.pt holds (-1: the starting state)
        self.start_saved = False  # last.pt was written at the start of this run, before any epoch
        self.callbacks = Callbacks(default_callbacks(self.plots) + list(callbacks or []) if self.main_process else [])
        self.start_epoch, self.best_fitness = 0, 0.0
        self.validation: ValidationResult | None = None  # the latest
        self.full_validation_epoch: int | None = None  # the last epoch, validated with plots and per-class table
        self.best_epoch_saved: int | None = None  # the epoch whose weights best.pt holds, when this run wrote it

    @property
    def last(self) -> Path:
        """weights/last.pt of the run folder: the checkpoint --resume continues from."""
        return self.save_dir / "weights" / "last.pt"

    @property
    def best(self) -> Path:
        """weights/best.pt of the run folder: the fittest epoch's weights."""
        return self.save_dir / "weights" / "best.pt"

    # Stages ----------------------------------------------------------------------------------------------------------

    def train(self) -> EpochResult | None:
        """Set up, train every epoch (validating and saving each), finish; the final validation's result."""
        self.setup()
        t0, epoch, result = time.time(), self.start_epoch, None
        try:
            for epoch in range(self.start_epoch, self.epochs):
                train_losses = self.train_one_epoch(epoch)
                stop = False
                if self.main_process:
                    final = epoch + 1 == self.epochs or self.stopper.possible_stop  # the stopper's view before
                    result = self.validate(epoch, train_losses, final)
                    stop = self.stopper(epoch, result.fitness)
                    self.best_fitness = max(self.best_fitness, result.fitness)
                    self.callbacks.on_epoch_end(self, result)
                    self.save(result, final=final or stop)
                if _broadcast_stop(stop):
                    break
        except KeyboardInterrupt:
            self._explain_interrupt()
            raise
        if self.main_process:
            hours = (time.time() - t0) / 3600
            LOGGER.info(f"\n{epoch - self.start_epoch + 1} epochs completed in {hours:.3f} hours.")
            result = self.finish(result)
        return result

    def setup(self) -> None:
        """Data, model, loaders, optimizer, run folder, resume state, DDP, precision and loss; then on_train_start."""
        opt = self.opt
        if self.main_process:
            LOGGER.info("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in self.hyp.items()))
        self.seed = opt.seed % 2**32  # --seed takes any integer; NumPy's seeds must be in [0, 2**32)
        init_seeds((self.seed + 1 + RANK) % 2**32)
        self._setup_data_config()
        model = build_model(opt, self.nc, self.hyp, self.device, self.resume_ckpt if self.resuming else None)
        model.names = list(self.names)
        self.channels_last = self.device.type == "cpu"  # oneDNN trains convolutions about 20% faster in NHWC
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
            retain_freed_memory()  # freed activations are reused, not page-faulted in anew every step
        freeze_layers(model, opt.freeze)
        self.grid = max(int(model.stride.max()), 32)
        self.imgsz = check_img_size(opt.imgsz, self.grid, floor=self.grid * 2)
        if opt.batch_size == -1:  # AutoBatch, on one device (train.py refuses it under DDP)
            opt.batch_size = autobatch(model, self.imgsz, self.device, amp=opt.amp is not False)
            opt.batch_size = max(opt.batch_size // 4 * 4, 4) if opt.quad else opt.batch_size  # quad: groups of 4
        self._setup_train_loader()
        self._setup_optimizer(model)
        best_epoch, scaler_state = self._restore_optimizer() if self.resuming else (0, None)
        if self.main_process:
            self._setup_val_loader(model)
        self._setup_run_folder()  # only now that data and model are known good, so a failed start leaves none
        ema = ModelEMA(model) if self.main_process else None
        if self.resuming and ema is not None:
            self._restore_ema(ema)
        self.stopper = EarlyStopping(opt.patience, self.best_fitness, best_epoch)
        self.resume_ckpt = None  # its tensors are no longer needed
        model = self._wrap_distributed(model)
        self.parts = self._setup_precision(model, ema, scaler_state)
        self.n_warmup = max(round(self.hyp["warmup_epochs"] * len(self.train_loader)), 100)  # iterations
        self.last_opt_step = -1
        self.scheduler.last_epoch = self.start_epoch - 1
        if self.main_process:
            self._save_start()
        self.callbacks.on_train_start(self)

    def train_one_epoch(self, epoch: int) -> list[float]:
        """One pass over the training data; the epoch's mean (box, obj, cls) losses."""
        model, loader, nb = self.parts.model, self.train_loader, len(self.train_loader)
        model.train()
        if RANK != -1:
            loader.sampler.set_epoch(epoch)
        if self.opt.image_weights:
            self._draw_images(epoch)
        self.callbacks.on_epoch_start(self, epoch)
        mean_losses, n_skipped = torch.zeros(3, device=self.device), 0
        self.parts.optimizer.zero_grad()
        for i, (images, targets, paths, _) in enumerate(loader):
            iteration = i + nb * epoch  # since the start of training
            if iteration <= self.n_warmup:
                self._warm_up(iteration, epoch)
            images = self._prepare_images(images)
            update = iteration - self.last_opt_step >= self.accumulate
            step = train_step(self.parts, images, targets.to(self.device), update)
            n_skipped += step.skipped is not None
            if step.skipped == "loss":
                if self.main_process:
                    LOGGER.warning(
                        f"WARNING: non-finite loss {step.loss_items.tolist()} at epoch {epoch} batch {i}, step skipped"
                    )
                continue
            if update:
                self.last_opt_step = iteration
            mean_losses = (mean_losses * i + step.loss_items) / (i + 1)
            batch = BatchEnd(epoch, i, iteration, mean_losses.tolist(), images, targets, paths)
            self.callbacks.on_batch_end(self, batch)
        if n_skipped and self.main_process:
            LOGGER.warning(f"WARNING: {n_skipped} steps skipped for non-finite losses or gradients in epoch {epoch}")
        self.lrs = [group["lr"] for group in self.parts.optimizer.param_groups]
        self.scheduler.step()
        return mean_losses.tolist()

    def validate(self, epoch: int, train_losses: list[float], final: bool) -> EpochResult:
        """Validate the EMA weights (with --noval only the final epoch); the epoch's result."""
        if not self.opt.noval or final:
            # Score exactly the weights the checkpoint will hold. The last epoch is scored in full (plots, per-class
            # table), so that finish() need not score best.pt again when it holds these same weights.
            last = epoch + 1 == self.epochs
            self.validation = self.evaluate(fp16_rounded(self.parts.ema.ema), plots=last and self.plots, verbose=last)
            self.full_validation_epoch = epoch if last else None
        # With --noval, the previous validation (zeros before the first) is listed again.
        return epoch_result(epoch, train_losses, self.lrs, self.validation)

    def save(self, result: EpochResult, final: bool) -> None:
        """last.pt (and best.pt, epochN.pt when due) unless --nosave, always at the end; on_checkpoint_saved each."""
        if self.opt.nosave and not final:
            return
        if not self._weights_finite():
            LOGGER.warning(f"WARNING: non-finite weights after epoch {result.epoch}: checkpoint not saved")
            return
        ckpt = self._checkpoint(result.epoch)
        files = [self.last]
        if self.best_fitness == result.fitness:
            files.append(self.best)
            self.best_epoch_saved = result.epoch
        period = self.opt.save_period
        files += [self.last.parent / f"epoch{result.epoch}.pt"] if period > 0 and result.epoch % period == 0 else []
        for file in files:
            save_or_explain(ckpt, file)
            if file == self.last:
                self.saved_epoch, self.start_saved = result.epoch, False
            self.callbacks.on_checkpoint_saved(self, file, result)

    def _weights_finite(self) -> bool:
        """Whether the EMA and the training weights are all finite (a diverged run's are never saved)."""
        return all_finite(self.parts.ema.ema) and all_finite(de_parallel(self.parts.model))

    def _checkpoint(self, epoch: int) -> dict:
        """The checkpoint of the state after `epoch`: EMA weights, plus everything --resume needs."""
        ema, model = self.parts.ema, de_parallel(self.parts.model)
        return checkpoint_dict(
            ema.ema,
            epoch=epoch,
            best_fitness=self.best_fitness,
            optimizer=self.parts.optimizer.state_dict(),
            scaler=self.parts.scaler.state_dict(),
            ema_updates=ema.updates,
            train_model=fp16_state_dict(model),
            train_args=plain_args(self.opt),
            best_epoch=self.stopper.best_epoch,
            date=datetime.now().isoformat(),
        )

    def _save_start(self) -> None:
        """last.pt of the state training starts from (epoch start - 1, so -1 for a new run), when the run folder has
        none yet: a Ctrl-C before the first epoch ends still leaves a checkpoint that --resume continues from, with
        the same options. Not with --nosave (only the final checkpoint is wanted)."""
        if self.last.exists():  # a run resumed in its own folder: its last.pt is where it starts
            self.saved_epoch = self.start_epoch - 1
            return
        if self.opt.nosave or not self._weights_finite():
            return
        save_or_explain(self._checkpoint(self.start_epoch - 1), self.last)
        self.saved_epoch, self.start_saved = self.start_epoch - 1, True

    def _explain_interrupt(self) -> None:
        """On Ctrl-C: how to continue, or why there is nothing to continue from."""
        if not self.main_process:
            return
        if self.saved_epoch is None:
            why = " (--nosave)" if self.opt.nosave else ""
            LOGGER.info(f"Training interrupted: no checkpoint was saved in {self.save_dir}{why}, nothing to resume")
            return
        state = "its starting state" if self.saved_epoch < 0 else f"the state after epoch {self.saved_epoch}"
        LOGGER.info(
            f"Training interrupted: {self.last} holds {state}; continue from epoch {self.saved_epoch + 1} with: "
            f"python train.py --resume {self.last}"
        )

    def finish(self, result: EpochResult | None) -> EpochResult | None:
        """Strip the optimizer from the checkpoints, validate best.pt with plots (unless the last epoch's full
        validation already scored these weights); on_train_end."""
        if self.start_saved:  # no epoch was saved (non-finite weights): the starting state is no result
            self.last.unlink(missing_ok=True)
            self.start_saved = False
        for f in (self.last, self.best):
            if f.exists():
                strip_optimizer(f)
        if self.best.exists() and self.best_epoch_saved == self.full_validation_epoch:
            LOGGER.info(f"\n{self.best} holds the final epoch's weights: the validation above is its final result")
        elif self.best.exists():
            LOGGER.info(f"\nValidating {self.best}...")
            best = load_model(self.best, device=self.device)
            if self.channels_last:
                best.to(memory_format=torch.channels_last)
            final = self.evaluate(best, plots=self.plots, verbose=True)
            result = epoch_result(result.epoch, result.train_losses, result.lrs, final)
        self.callbacks.on_train_end(self, result)
        return result

    def evaluate(self, model: nn.Module, plots: bool, verbose: bool = False) -> ValidationResult:
        """Score model on the val loader, with the training loss function for the val losses."""
        options = ValidationOptions(
            single_cls=self.opt.single_cls,
            ann_json=self.data.get("ann_json"),
            ann_json_fallback=True,  # a JSON that does not fit the images: one warning, then the YOLO labels
            save_dir=self.save_dir,
            plots=plots,
            verbose=verbose,
            half=self.parts.amp_dtype == torch.float16,  # FP16 autocast as trained; bfloat16 runs are scored in FP32
            channels_last=self.channels_last,
        )
        return evaluate(model, self.val_loader, list(self.data["names"]), self.compute_loss, options)

    # Set-up steps ----------------------------------------------------------------------------------------------------

    def _setup_data_config(self) -> None:
        """The data YAML, the class count and names (--single-cls makes one class)."""
        with distributed_zero_first(LOCAL_RANK):
            self.data = load_data_config(self.opt.data)
        if not self.data.get("train") or not self.data.get("val"):
            raise TrainError(f"{self.opt.data} needs both 'train' and 'val' splits for training")
        names = self.data["names"]
        self.nc = 1 if self.opt.single_cls else int(self.data["nc"])
        self.names = (["item"] if len(names) != 1 else names) if self.opt.single_cls else names

    def _setup_train_loader(self) -> None:
        """The augmented training loader; a dataset without any label box is refused (a forgotten labels folder)."""
        opt = self.opt
        with distributed_zero_first(LOCAL_RANK):
            self.train_loader, self.dataset = create_dataloader(
                self.data["train"],
                self.imgsz,
                opt.batch_size // WORLD_SIZE,
                self.grid,
                opt.single_cls,
                hyp=dict(self.hyp),
                augment=True,
                cache=None if opt.cache == "val" else opt.cache,
                rect=opt.rect,
                rank=LOCAL_RANK,
                workers=opt.workers,
                shuffle=True,
                seed=self.seed,
                prefix="train: ",
                nc=self.nc,
                require_labels=True,
                image_weights=opt.image_weights,
                quad=opt.quad,
            )
        self.batch_size = self.train_loader.batch_size * WORLD_SIZE  # the loader clips the batch to a small dataset
        labels = self.dataset.labels
        self.labels = np.concatenate(labels, 0) if len(labels) else np.zeros((0, 5))

    def _setup_optimizer(self, model: nn.Module) -> None:
        """Gradients accumulate to the nominal batch; weight decay scales with the effective batch."""
        hyp = self.hyp
        self.accumulate = max(round(NBS / self.batch_size), 1)
        hyp["weight_decay"] *= self.batch_size * self.accumulate / NBS
        self.optimizer = smart_optimizer(model, self.opt.optimizer, hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
        self.lr_factor = lr_lambda(self.epochs, hyp["lrf"], self.opt.cos_lr)
        self.scheduler = lr_scheduler.LambdaLR(self.optimizer, lr_lambda=self.lr_factor)

    def _setup_run_folder(self) -> None:
        """The run folder: the one given, or a new one reserved now (atomically: two runs started together with the
        same --name get exp and exp2); then weights/, hyp.yaml and opt.yaml in it."""
        opt = self.opt
        if self.save_dir is None:
            self.save_dir = Path(new_run_folder(opt.project, opt.name, opt.exist_ok))
            if self.resuming and self.main_process:
                LOGGER.info(f"Resuming in the new run folder {self.save_dir}")
        opt.save_dir = str(self.save_dir)  # absolute, as opt.yaml and the checkpoints record it
        if not self.main_process:
            return
        (self.save_dir / "weights").mkdir(parents=True, exist_ok=True)
        (self.save_dir / "hyp.yaml").write_text(yaml.safe_dump(opt.hyp, sort_keys=False), encoding="utf-8")
        (self.save_dir / "opt.yaml").write_text(yaml.safe_dump(plain_args(opt), sort_keys=False), encoding="utf-8")

    def _setup_val_loader(self, model: nn.Module) -> None:
        """The val loader, and AutoAnchor for a new run (before the run folder exists: a bad val set leaves none)."""
        opt = self.opt
        self.val_loader = create_dataloader(
            self.data["val"],
            self.imgsz,
            self.train_loader.batch_size * 2,
            self.grid,
            opt.single_cls,
            hyp=dict(self.hyp),
            cache=None if opt.noval else opt.cache,
            rect=True,
            rank=-1,
            workers=opt.workers * 2,
            pad=0.5,
            prefix="val: ",
            nc=self.nc,
        )[0]
        if not self.resuming and not opt.noautoanchor:
            check_anchors(self.dataset, model=model, thr=self.hyp["anchor_t"], imgsz=self.imgsz, seed=self.seed)

    def _restore_optimizer(self) -> tuple[int, dict | None]:
        """Optimizer, epoch and best fitness from the interrupted run's checkpoint (checked before the run folder is
        touched); (best epoch, scaler state)."""
        ckpt, last = self.resume_ckpt, self.opt.weights
        load_optimizer_state(self.optimizer, ckpt["optimizer"], last)
        self.start_epoch, self.best_fitness = ckpt["epoch"] + 1, float(ckpt["best_fitness"])
        return int(ckpt.get("best_epoch", max(ckpt["epoch"], 0))), ckpt.get("scaler")

    def _restore_ema(self, ema: ModelEMA) -> None:
        """The EMA weights and update count from the interrupted run's checkpoint."""
        load_resume_state(ema.ema, self.resume_ckpt["model"], f"{self.opt.weights}: its EMA weights")
        ema.updates = int(self.resume_ckpt["ema_updates"])

    def _wrap_distributed(self, model: nn.Module) -> nn.Module:
        """Under torchrun: SyncBatchNorm if asked (CUDA only) and DistributedDataParallel."""
        if RANK == -1:
            return model
        cuda = self.device.type == "cuda"
        if self.opt.sync_bn:
            if cuda:
                model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(self.device)
                LOGGER.info("Using SyncBatchNorm()")
            else:
                LOGGER.warning("WARNING: --sync-bn needs CUDA, ignored on CPU")
        return nn.parallel.DistributedDataParallel(
            model, device_ids=[LOCAL_RANK] if cuda else None, output_device=LOCAL_RANK if cuda else None
        )

    def _setup_precision(self, model: nn.Module, ema: ModelEMA | None, scaler_state: dict | None) -> TrainingParts:
        """Autocast dtype (checked on a sample image), GradScaler for float16, the scaled loss: the step's parts."""
        amp_dtype = resolve_amp(self.opt.amp, self.device)
        if amp_dtype is not None:
            sample = letterbox(self.dataset.load_image(0)[0], self.imgsz, auto=False)[0]
            sample = torch.from_numpy(np.ascontiguousarray(sample.transpose(2, 0, 1)[::-1]))
            if not check_amp(model, sample.to(self.device).float()[None] / 255, amp_dtype):
                amp_dtype = None
        scaler = torch.amp.GradScaler(self.device.type, enabled=amp_dtype == torch.float16)
        if scaler_state and scaler.is_enabled():
            scaler.load_state_dict(scaler_state)
        self.hyp = loss_gains(self.hyp, de_parallel(model).model[-1].nl, self.nc, self.imgsz)
        self.hyp["label_smoothing"] = self.opt.label_smoothing
        self.compute_loss = ComputeLoss(model, self.hyp)
        train_loss = quad_scaled(self.compute_loss) if self.opt.quad else self.compute_loss
        return TrainingParts(model, self.optimizer, train_loss, scaler, ema, amp_dtype, WORLD_SIZE)

    # Per-batch helpers -----------------------------------------------------------------------------------------------

    def _warm_up(self, iteration: int, epoch: int) -> None:
        """Warmup lrs, momentum and gradient accumulation at this iteration."""
        targets = [group["initial_lr"] * self.lr_factor(epoch) for group in self.optimizer.param_groups]
        values = warmup_values(iteration, self.n_warmup, targets, self.hyp, self.batch_size)
        apply_warmup(self.optimizer, values)
        self.accumulate = values.accumulate

    def _draw_images(self, epoch: int) -> None:
        """--image-weights: the epoch's images, drawn on rank 0 from the latest per-class mAPs, the same on every rank
        (the DistributedSampler then splits the drawn positions between the processes)."""
        maps = self.validation.metrics.maps if self.validation is not None else np.zeros(self.nc)
        drawn = [None]
        if self.main_process:
            rng = np.random.default_rng((self.seed, epoch))
            drawn = [sample_indices(self.dataset.labels, self.nc, maps, rng)]
        if RANK != -1:
            dist.broadcast_object_list(drawn, 0)
        self.dataset.indices = list(drawn[0])

    def _prepare_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 batch -> 0-1 floats on the device, resized under --multi-scale, NHWC on the CPU."""
        images = images.to(self.device, non_blocking=True).float() / 255
        if self.opt.multi_scale:
            size = random.randrange(int(self.imgsz * 0.5), int(self.imgsz * 1.5) + self.grid) // self.grid * self.grid
            factor = size / max(images.shape[2:])
            if factor != 1:
                shape = [math.ceil(x * factor / self.grid) * self.grid for x in images.shape[2:]]
                images = F.interpolate(images, size=shape, mode="bilinear", align_corners=False)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images


def quad_scaled(compute_loss: ComputeLoss) -> Callable:
    """--quad trains on 4x fewer (2x larger) images per batch: the loss is scaled back up by 4, as YOLOv5 does."""

    def scaled(predictions, targets):
        loss, loss_items = compute_loss(predictions, targets)
        return loss * 4.0, loss_items

    return scaled


def train(
    hyp: dict,
    opt: argparse.Namespace,
    device: torch.device,
    resume_ckpt: dict | None = None,
    callbacks: list[Callback] | None = None,
) -> EpochResult | None:
    """Train per opt (see Trainer); the final validation's EpochResult on the main process, None elsewhere."""
    return Trainer(hyp, opt, device, resume_ckpt, callbacks).train()
