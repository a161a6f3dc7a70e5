"""One training step, the warmup schedule and the loss-gain scaling, shared by the Trainer, gpu_check and benchmarks.

train_step() is the only place where a batch becomes an optimizer update: autocast forward, loss, scaled
backward, and (when an update is due) unscale, gradient clipping, optimizer step, scaler update and EMA update.
warmup_values() and loss_gains() are pure functions of their arguments.
"""

import math
import random
from collections.abc import Callable
from contextlib import nullcontext
from copy import deepcopy
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F  # noqa: N812

from utils.log import LOGGER
from utils.torch_utils import ModelEMA, cpu_supports_bf16, de_parallel, unit_images

NBS = 64  # nominal batch size: gradients are accumulated up to it and weight decay is scaled to it
MAX_GRAD_NORM = 10.0


# ---------------------------------------------------------------------------------------------------------------------
# Pure schedules


@dataclass(frozen=True)
class WarmupValues:
    """Learning rate per parameter group, SGD momentum and gradient accumulation at one warmup iteration."""

    lrs: list[float]
    momentum: float
    accumulate: int


def warmup_values(
    iteration: int, n_warmup: int, target_lrs: list[float], hyp: dict, batch_size: int, nbs: int = NBS
) -> WarmupValues:
    """Values at `iteration` of `n_warmup`: bias lr (group 0) falls from warmup_bias_lr, the others rise from 0
    to target_lrs, momentum rises from warmup_momentum, accumulation grows from 1 to nbs / batch_size."""
    xi = [0, n_warmup]
    accumulate = int(max(1, np.interp(iteration, xi, [1, nbs / batch_size]).round()))
    # Plain floats: the optimizer state is saved in checkpoints that load with weights_only.
    lrs = [
        float(np.interp(iteration, xi, [hyp["warmup_bias_lr"] if j == 0 else 0.0, target]))
        for j, target in enumerate(target_lrs)
    ]
    momentum = float(np.interp(iteration, xi, [hyp["warmup_momentum"], hyp["momentum"]]))
    return WarmupValues(lrs, momentum, accumulate)


def apply_warmup(optimizer: torch.optim.Optimizer, values: WarmupValues) -> None:
    """Set each group's lr (and momentum, for optimizers that have one) to the warmup values."""
    for group, lr in zip(optimizer.param_groups, values.lrs):
        group["lr"] = lr
        if "momentum" in group:
            group["momentum"] = values.momentum


def loss_gains(hyp: dict, n_layers: int, nc: int, imgsz: int, scaled: bool = True) -> dict:
    """A copy of hyp with the box, cls and obj gains scaled from YOLOv5's 3 levels, 80 classes and 640 pixels: the
    anchor-based family's rule (scaled = model.family.anchors).

    The anchor-free models' gains are used as given (scaled False), as Ultralytics does: their losses are
    normalised by the assigned targets' weight, not summed over levels, so nothing scales with layers or classes."""
    if not scaled:
        return dict(hyp)
    scaled = dict(hyp)
    scaled["box"] = hyp["box"] * 3 / n_layers
    scaled["cls"] = hyp["cls"] * nc / 80 * 3 / n_layers
    scaled["obj"] = hyp["obj"] * (imgsz / 640) ** 2 * 3 / n_layers
    return scaled


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


# ---------------------------------------------------------------------------------------------------------------------
# The step


@dataclass
class TrainingParts:
    """What a training step works on. world_size > 1 means DDP: the loss is scaled and finiteness agreed."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    train_loss: Callable  # (predictions, targets[, masks]) -> (loss to minimise, loss items)
    scaler: torch.amp.GradScaler
    ema: ModelEMA | None = None
    amp_dtype: torch.dtype | None = None
    world_size: int = 1


@dataclass
class StepResult:
    """loss_items: the batch's, named by the loss's LOSS_NAMES (YOLOv5: box, obj, cls; anchor-free: box, cls, dfl;
    segment losses add seg); skipped: 'loss' or 'gradient' when non-finite, else None."""

    loss_items: torch.Tensor
    stepped: bool = False  # the optimizer took (or, under a GradScaler, was asked to take) a step
    skipped: str | None = None


def _all_finite_across_ranks(loss: torch.Tensor, world_size: int) -> bool:
    """Whether every process's loss is finite, so all skip a bad step together (no collective left hanging)."""
    finite = torch.isfinite(loss).all().float()
    if world_size > 1 and dist.is_initialized():
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    return bool(finite.item())


def train_step(
    parts: TrainingParts, images: torch.Tensor, targets: torch.Tensor, update: bool, masks: torch.Tensor | None = None
) -> StepResult:
    """Forward and backward one batch (with a segment model's ground-truth masks, one per target row); with update,
    also clip, step the optimizer and update the EMA."""
    amp, extra = parts.amp_dtype, () if masks is None else (masks,)
    with torch.autocast(images.device.type, dtype=amp) if amp is not None else nullcontext():
        loss, loss_items = parts.train_loss(parts.model(images), targets, *extra)
        if parts.world_size > 1:
            loss = loss * parts.world_size  # DDP averages gradients across processes
    if not _all_finite_across_ranks(loss, parts.world_size):
        parts.optimizer.zero_grad()
        return StepResult(loss_items.detach(), skipped="loss")
    parts.scaler.scale(loss).backward()
    if not update:
        return StepResult(loss_items.detach())
    parts.scaler.unscale_(parts.optimizer)  # so clipping sees true gradient norms
    grad_norm = nn.utils.clip_grad_norm_(parts.model.parameters(), max_norm=MAX_GRAD_NORM)
    result = StepResult(loss_items.detach(), stepped=True)
    if parts.scaler.is_enabled() or torch.isfinite(grad_norm):
        parts.scaler.step(parts.optimizer)  # the scaler itself skips steps whose gradients hold inf/NaN
        parts.scaler.update()
        if parts.ema is not None:
            parts.ema.update(parts.model)
    else:  # without a scaler, a non-finite gradient would poison the weights: drop it
        result.stepped, result.skipped = False, "gradient"
    parts.optimizer.zero_grad()
    return result


def prepare_images(
    images: torch.Tensor, device: torch.device, imgsz: int, grid: int, multi_scale: bool, channels_last: bool
) -> torch.Tensor:
    """A loader's uint8 batch as 0-1 floats on the device, resized to a random multiple of grid in [0.5, 1.5] x imgsz
    under --multi-scale, NHWC given channels_last (utils.torch_utils.prefers_channels_last)."""
    # NHWC at once unless a resize follows (bilinear interpolation takes floats; the layout is set after it)
    images = unit_images(images.to(device, non_blocking=True), torch.float32, channels_last and not multi_scale)
    if multi_scale:
        size = random.randrange(int(imgsz * 0.5), int(imgsz * 1.5) + grid) // grid * grid
        factor = size / max(images.shape[2:])
        if factor != 1:
            shape = [math.ceil(x * factor / grid) * grid for x in images.shape[2:]]
            images = F.interpolate(images, size=shape, mode="bilinear", align_corners=False)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images


def quad_scaled(compute_loss: Callable) -> Callable:
    """--quad trains on 4x fewer (2x larger) images per batch: the loss is scaled back up by 4, as YOLOv5 does."""

    def scaled(predictions, targets, *masks):
        loss, loss_items = compute_loss(predictions, targets, *masks)
        return loss * 4.0, loss_items

    return scaled
