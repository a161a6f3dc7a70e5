"""The training engine behind train.py: a Trainer whose train() is setup -> train_one_epoch + validate + save per
epoch -> finish, with callbacks (utils.train.callbacks) at each stage.

It reads a TrainConfig (utils.train.config) and never changes it. Set-up pieces live in utils.train.setup (model,
loaders, optimizer, schedule, early stopping), the one training step and its warmup and loss gains in
utils.train.step, checkpoint files in utils.train.checkpoints, ranks and collectives in utils.train.distributed,
--resume's option checking in utils.train.resume.
"""

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
import yaml
from torch import nn
from torch.optim import lr_scheduler

from models.nn.family import Family
from models.weights.checkpoint import checkpoint_dict, fp16_state_dict, load_model
from utils.data.augment import check_img_size, letterbox
from utils.data.cache import undone_on_failure
from utils.data.dataset import LoadImagesAndLabels
from utils.eval.validate import ValidationOptions, ValidationResult, evaluate
from utils.log import LOGGER
from utils.torch_utils import ModelEMA, de_parallel, init_seeds, prefers_channels_last, retain_freed_memory
from utils.train.autoanchor import check_anchors
from utils.train.autobatch import autobatch
from utils.train.callbacks import BatchEnd, Callback, Callbacks, EpochResult, default_callbacks, epoch_result
from utils.train.checkpoints import fp16_rounded, interrupt_message, save_or_explain, strip_optimizer
from utils.train.config import TrainConfig
from utils.train.distributed import (
    LOCAL_RANK,
    MAIN_PROCESS,
    RANK,
    WORLD_SIZE,
    distributed_zero_first,
    from_main_process,
    wrap_distributed,
)
from utils.train.image_weights import draw_epoch_images
from utils.train.loss_anchor_free import EndToEndLoss
from utils.train.run_folder import new_run_folder
from utils.train.setup import (
    EarlyStopping,
    all_finite,
    build_loss,
    build_model,
    build_train_loader,
    build_val_loader,
    check_hyp_fits,
    check_polygon_labels,
    choose_optimizer,
    close_mosaic,
    freeze_layers,
    lr_lambda,
    restore_ema,
    restore_optimizer,
    smart_optimizer,
    training_data,
)
from utils.train.step import (
    NBS,
    TrainingParts,
    apply_warmup,
    check_amp,
    loss_gains,
    prepare_images,
    quad_scaled,
    resolve_amp,
    train_step,
    warmup_values,
)


class Trainer:
    """Trains per a TrainConfig: setup(), then per epoch train_one_epoch(), validate() and save(), then finish().

    Callbacks (utils.train.callbacks) run on the main process only; the defaults write the console output, results.csv
    and the plots, and callbacks=[...] adds more.
    """

    def __init__(
        self,
        config: TrainConfig,
        device: torch.device,
        resume_ckpt: dict | None = None,
        callbacks: list[Callback] | None = None,
    ):
        self.config, self.device = config, device
        self.hyp = dict(config.hyp)  # as given (--optimizer auto may set lr0, momentum); the loss's gains: loss_hyp
        self.epochs, self.plots, self.resuming = config.epochs, not config.noplots, config.resume
        self.main_process = MAIN_PROCESS
        self.resume_ckpt = resume_ckpt
        self.callbacks = Callbacks(default_callbacks(self.plots) + list(callbacks or []) if self.main_process else [])
        # The run folder: given (resumed, evolve's), or None until setup() reserves it once data and model are good.
        self.save_dir: Path | None = Path(config.save_dir).absolute() if config.save_dir else None
        # Set up by setup(), in this order: data, model geometry, loaders, optimization, precision and loss.
        self.seed = config.seed % 2**32  # --seed takes any integer; NumPy's seeds must be in [0, 2**32)
        self.data: dict = {}
        self.nc, self.names = 0, []
        self.channels_last = prefers_channels_last(device)  # NHWC: oneDNN ~20% faster, cuDNN's AMP 2.2x
        self.grid, self.imgsz = 32, config.imgsz
        self.chosen_batch_size = config.batch_size  # as asked, or AutoBatch's choice for -1: what opt.yaml records
        self.batch_size = config.batch_size  # total over all processes, as the loader settles it for a small dataset
        self.train_loader: torch.utils.data.DataLoader | None = None
        self.dataset: LoadImagesAndLabels | None = None
        self.labels = np.zeros((0, 5))
        self.val_loader: torch.utils.data.DataLoader | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_factor: Callable[[float], float] | None = None
        self.scheduler: lr_scheduler.LambdaLR | None = None
        self.accumulate = 1  # batches per optimizer step, to the nominal batch size (changes during warmup)
        self.n_warmup, self.last_opt_step = 0, -1
        self.stopper: EarlyStopping | None = None
        self.loss_hyp: dict = {}  # hyp with the box/obj/cls gains scaled to classes, layers and image size
        self.loss = None  # the family's and task's (setup.LOSSES); also the val losses
        self.family: Family | None = None  # the model's (models/nn/family.py): its hyp keys, loss, optimizer rule
        self.parts: TrainingParts | None = None
        # Progress, updated as training goes.
        self.start_epoch, self.best_fitness = 0, 0.0
        self.lrs: list[float] = []
        self.validation: ValidationResult | None = None  # the latest
        self.full_validation_epoch: int | None = None  # the last epoch, validated with plots and per-class table
        self.best_epoch_saved: int | None = None  # the epoch whose weights best.pt holds, when this run wrote it
        self.saved_epoch: int | None = None  # the epoch whose end state last.pt holds (-1: the starting state)
        self.start_saved = False  # last.pt was written at the start of this run, before any epoch

    @property
    def last(self) -> Path:
        """weights/last.pt of the run folder: the checkpoint --resume continues from."""
        return self.save_dir / "weights" / "last.pt"

    @property
    def best(self) -> Path:
        """weights/best.pt of the run folder: the fittest epoch's weights."""
        return self.save_dir / "weights" / "best.pt"

    def saved_options(self) -> dict:
        """The options opt.yaml and the checkpoints record: the config, with the batch size and run folder this run
        settled on (what --resume continues with)."""
        return self.config.saved_options(batch_size=self.chosen_batch_size, save_dir=str(self.save_dir))

    # Stages ----------------------------------------------------------------------------------------------------------

    def train(self) -> EpochResult | None:
        """Set up, train every epoch (validating and saving each), finish; the final validation's result."""
        with undone_on_failure():  # a failed start removes the label and image caches it created
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
                if from_main_process(stop):  # all processes stop together
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
        if self.main_process:
            LOGGER.info("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in self.hyp.items()))
        init_seeds((self.seed + 1 + RANK) % 2**32)
        self._setup_data_config()
        model = self._setup_model()
        self._setup_train_loader(model)
        self._setup_optimizer(model)
        best_epoch, scaler_state = 0, None
        if self.resuming:  # checked before the run folder is touched
            resumed = restore_optimizer(self.optimizer, self.resume_ckpt, self.config.weights)
            self.start_epoch, self.best_fitness, best_epoch, scaler_state = resumed
        if self.main_process:
            self._setup_val_loader(model)
        self._setup_run_folder()  # only now that data and model are known good, so a failed start leaves none
        ema = ModelEMA(model) if self.main_process else None
        if self.resuming and ema is not None:
            restore_ema(ema, self.resume_ckpt, self.config.weights)
        self.stopper = EarlyStopping(self.config.patience, self.best_fitness, best_epoch)
        self.resume_ckpt = None  # its tensors are no longer needed
        model = wrap_distributed(model, self.device, self.config.sync_bn)
        self.parts = self._setup_precision(model, ema, scaler_state)
        self.n_warmup = max(round(self.hyp["warmup_epochs"] * len(self.train_loader)), 100)  # iterations
        self.scheduler.last_epoch = self.start_epoch - 1
        if self.main_process:
            self._save_start()
        self.callbacks.on_train_start(self)

    def train_one_epoch(self, epoch: int) -> list[float]:
        """One pass over the training data; the epoch's mean losses (those the loss names in LOSS_NAMES)."""
        model, loader, nb = self.parts.model, self.train_loader, len(self.train_loader)
        model.train()
        if epoch >= self.epochs - int(self.hyp.get("close_mosaic", 0)) and self.dataset.mosaic:
            loader = self._close_mosaic(epoch)
        if isinstance(self.loss, EndToEndLoss):
            self.loss.set_epoch(epoch)  # YOLO26: the one-to-many branch's weight falls over the epochs
        if RANK != -1:
            loader.sampler.set_epoch(epoch)
        if self.config.image_weights:
            maps = self.validation.metrics.maps if self.validation is not None else np.zeros(self.nc)
            self.dataset.indices = draw_epoch_images(self.dataset.labels, self.nc, maps, self.seed, epoch)
        self.callbacks.on_epoch_start(self, epoch)
        mean_losses, n_skipped = torch.zeros(len(self.loss.LOSS_NAMES), device=self.device), 0
        self.parts.optimizer.zero_grad()
        for i, (images, targets, paths, _, *rest) in enumerate(loader):  # rest: a segment model's masks
            iteration = i + nb * epoch  # since the start of training
            if iteration <= self.n_warmup:
                self._warm_up(iteration, epoch)
            images = prepare_images(
                images, self.device, self.imgsz, self.grid, self.config.multi_scale, self.channels_last
            )
            update = iteration - self.last_opt_step >= self.accumulate
            masks = rest[0].to(self.device) if rest else None
            step = train_step(self.parts, images, targets.to(self.device), update, masks)
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
        if not self.config.noval or final:
            # The weights the checkpoint will hold; the last epoch in full (finish() need not score them again).
            last = epoch + 1 == self.epochs
            self.validation = self.evaluate(fp16_rounded(self.parts.ema.ema), plots=last and self.plots, verbose=last)
            self.full_validation_epoch = epoch if last else None
        # With --noval, the previous validation (zeros before the first) is listed again; a segment model's has masks.
        masks = self.parts.ema.ema.task.masks
        return epoch_result(epoch, train_losses, self.lrs, self.validation, self.loss.LOSS_NAMES, masks)

    def save(self, result: EpochResult, final: bool) -> None:
        """last.pt (and best.pt, epochN.pt when due) unless --nosave, always at the end; on_checkpoint_saved each."""
        if self.config.nosave and not final:
            return
        if not self._weights_finite():
            LOGGER.warning(f"WARNING: non-finite weights after epoch {result.epoch}: checkpoint not saved")
            return
        ckpt = self._checkpoint(result.epoch)
        files = [self.last]
        if self.best_fitness == result.fitness:
            files.append(self.best)
            self.best_epoch_saved = result.epoch
        period = self.config.save_period
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
            train_args=self.saved_options(),
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
        if self.config.nosave or not self._weights_finite():
            return
        save_or_explain(self._checkpoint(self.start_epoch - 1), self.last)
        self.saved_epoch, self.start_saved = self.start_epoch - 1, True

    def _explain_interrupt(self) -> None:
        """On Ctrl-C: how to continue, or why there is nothing to continue from."""
        if self.main_process:
            LOGGER.info(interrupt_message(self.save_dir, self.saved_epoch, self.config.nosave))

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
            result = epoch_result(result.epoch, result.train_losses, result.lrs, final, result.loss_names)
        self.callbacks.on_train_end(self, result)
        return result

    def evaluate(self, model: nn.Module, plots: bool, verbose: bool = False) -> ValidationResult:
        """Score model on the val loader, with the training loss function for the val losses."""
        options = ValidationOptions(
            single_cls=self.config.single_cls,
            ann_json=self.data.get("ann_json"),
            ann_json_fallback=True,  # a JSON that does not fit the images: one warning, then the YOLO labels
            save_dir=self.save_dir,
            plots=plots,
            verbose=verbose,
            half=self.parts.amp_dtype == torch.float16,  # FP16 autocast as trained; bfloat16 runs are scored in FP32
            channels_last=self.channels_last,
        )
        return evaluate(model, self.val_loader, list(self.data["names"]), self.loss, options)

    # Set-up steps ----------------------------------------------------------------------------------------------------

    def _setup_data_config(self) -> None:
        """The data YAML, the class count and names (--single-cls makes one class)."""
        with distributed_zero_first(LOCAL_RANK):
            self.data, self.nc, self.names = training_data(self.config)

    def _setup_model(self) -> nn.Module:
        """The model (from --cfg, --weights or the resumed run), its frozen layers, the image size its strides allow,
        and the batch size (AutoBatch's, for --batch-size -1 on one device: train.py refuses it under DDP)."""
        config = self.config
        resume = self.resume_ckpt if self.resuming else None
        model, self.trained_head = build_model(config, self.nc, self.hyp, self.device, resume)
        model.names = list(self.names)
        self.family = model.family
        check_hyp_fits(self.family, self.hyp, config.hyp_file)
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
            retain_freed_memory()  # freed activations are reused, not page-faulted in anew every step
        freeze_layers(model, list(config.freeze))
        self.grid = max(int(model.stride.max()), 32)
        self.imgsz = check_img_size(config.imgsz, self.grid, floor=self.grid * 2)
        if config.batch_size == -1:
            batch = autobatch(model, self.imgsz, self.device, amp=config.amp is not False)
            self.chosen_batch_size = max(batch // 4 * 4, 4) if config.quad else batch  # quad: groups of 4
        self.batch_size = self.chosen_batch_size
        return model

    def _setup_train_loader(self, model: nn.Module) -> None:
        """The augmented training loader (it refuses a set without labels, or for masks without polygons)."""
        loader_args = self.config, self.data["train"], self.imgsz, self.batch_size, self.grid, self.hyp, self.nc
        with distributed_zero_first(LOCAL_RANK):
            self.train_loader, self.dataset = build_train_loader(*loader_args, self.seed, model.task.label_rows)
        check_polygon_labels(self.dataset)
        self.batch_size = self.train_loader.batch_size * WORLD_SIZE  # the loader clips the batch to a small dataset
        labels = self.dataset.labels
        self.labels = np.concatenate(labels, 0) if len(labels) else np.zeros((0, 5))

    def _setup_optimizer(self, model: nn.Module) -> None:
        """--optimizer auto resolved (into self.hyp); gradients accumulate to the nominal batch; decay scales too."""
        config, auto = self.config, (self.family, len(self.dataset), self.batch_size, self.epochs, self.nc)
        name, self.hyp = choose_optimizer(config.optimizer, self.hyp, *auto)
        hyp, self.accumulate = self.hyp, max(round(NBS / self.batch_size), 1)
        weight_decay = hyp["weight_decay"] * self.batch_size * self.accumulate / NBS
        self.optimizer = smart_optimizer(model, name, hyp["lr0"], hyp["momentum"], weight_decay)
        self.lr_factor = lr_lambda(self.epochs, hyp["lrf"], config.cos_lr)
        self.scheduler = lr_scheduler.LambdaLR(self.optimizer, lr_lambda=self.lr_factor)

    def _setup_run_folder(self) -> None:
        """The run folder: the one given, or a new one reserved now (atomically: two runs started together with the
        same --name get exp and exp2); then weights/, hyp.yaml and opt.yaml in it."""
        config = self.config
        if self.save_dir is None:
            self.save_dir = Path(new_run_folder(config.project, config.name, config.exist_ok))
            if self.resuming and self.main_process:
                LOGGER.info(f"Resuming in the new run folder {self.save_dir}")
        if not self.main_process:
            return
        options = self.saved_options()
        (self.save_dir / "weights").mkdir(parents=True, exist_ok=True)
        (self.save_dir / "hyp.yaml").write_text(yaml.safe_dump(options["hyp"], sort_keys=False), encoding="utf-8")
        (self.save_dir / "opt.yaml").write_text(yaml.safe_dump(options, sort_keys=False), encoding="utf-8")

    def _setup_val_loader(self, model: nn.Module) -> None:
        """The val loader, and AutoAnchor for a new run (before the run folder exists: a bad val set leaves none)."""
        val = self.data["val"], self.imgsz, self.train_loader.batch_size * 2, self.grid, self.hyp, self.nc
        self.val_loader = build_val_loader(self.config, *val, model.task.label_rows)  # a segment model's: with masks
        if not self.resuming and not self.config.noautoanchor and self.family.anchors:  # no anchors: nothing to fit
            check_anchors(self.dataset, model, self.hyp["anchor_t"], self.imgsz, self.seed, refit=not self.trained_head)

    def _setup_precision(self, model: nn.Module, ema: ModelEMA | None, scaler_state: dict | None) -> TrainingParts:
        """Autocast dtype (checked on a sample image), GradScaler for float16, the scaled loss: the step's parts."""
        amp_dtype = resolve_amp(self.config.amp, self.device)
        if amp_dtype is not None:
            sample = letterbox(self.dataset.load_image(0)[0], self.imgsz, auto=False)[0]
            sample = torch.from_numpy(np.ascontiguousarray(sample.transpose(2, 0, 1)[::-1]))
            if not check_amp(model, sample.to(self.device).float()[None] / 255, amp_dtype):
                amp_dtype = None
        scaler = torch.amp.GradScaler(self.device.type, enabled=amp_dtype == torch.float16)
        if scaler_state and scaler.is_enabled():
            scaler.load_state_dict(scaler_state)
        gains = loss_gains(self.hyp, de_parallel(model).model[-1].nl, self.nc, self.imgsz, self.family.anchors)
        self.loss_hyp = {**gains, "label_smoothing": self.config.label_smoothing}
        self.loss = build_loss(model, self.loss_hyp, self.epochs)
        train_loss = quad_scaled(self.loss) if self.config.quad else self.loss
        return TrainingParts(model, self.optimizer, train_loss, scaler, ema, amp_dtype, WORLD_SIZE)

    def _close_mosaic(self, epoch: int) -> torch.utils.data.DataLoader:
        """Mosaic off for the remaining epochs, with new loader workers (the running ones hold the old dataset)."""
        self.train_loader = close_mosaic(self.train_loader, self.dataset, epoch, self.epochs, self.main_process)
        return self.train_loader

    # Per-batch helpers -----------------------------------------------------------------------------------------------

    def _warm_up(self, iteration: int, epoch: int) -> None:
        """Warmup lrs, momentum and gradient accumulation at this iteration."""
        targets = [group["initial_lr"] * self.lr_factor(epoch) for group in self.optimizer.param_groups]
        values = warmup_values(iteration, self.n_warmup, targets, self.hyp, self.batch_size)
        apply_warmup(self.optimizer, values)
        self.accumulate = values.accumulate


def train(
    config: TrainConfig,
    device: torch.device,
    resume_ckpt: dict | None = None,
    callbacks: list[Callback] | None = None,
) -> EpochResult | None:
    """Train per config (see Trainer); the final validation's EpochResult on the main process, None elsewhere."""
    return Trainer(config, device, resume_ckpt, callbacks).train()
