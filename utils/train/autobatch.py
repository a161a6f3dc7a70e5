"""AutoBatch (train.py --batch-size -1): the largest training batch that fills a chosen fraction of CUDA memory.

A short probe trains (forward + backward) a few small batches, fits peak memory as a straight line in the batch
size, and solves it for the target fraction. On the CPU there is no fixed memory budget to fill: a one-line note,
then the default batch.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from utils.log import LOGGER

DEFAULT_BATCH = 16
PROBE_BATCHES = (1, 2, 4, 8, 16)
MAX_BATCH = 1024  # beyond this an extrapolated batch is more guess than fit
PREFIX = "AutoBatch: "


@dataclass(frozen=True)
class BatchFit:
    """Peak memory (GiB) modelled as intercept + slope * batch, and the batch it gives for a memory budget."""

    slope: float
    intercept: float
    batch_size: int


def fit_batch_size(batch_sizes: list[int], memory_gib: list[float], budget_gib: float, default: int) -> BatchFit:
    """Fit memory = intercept + slope * batch over the probed batches and solve for the budget (>= 1)."""
    if len(batch_sizes) < 2:
        return BatchFit(0.0, 0.0, default)
    slope, intercept = np.polyfit(np.asarray(batch_sizes, float), np.asarray(memory_gib, float), deg=1)
    if slope < 1e-6:  # memory did not grow with the batch (under 1 KiB per image): the probe says nothing useful
        return BatchFit(float(slope), float(intercept), default)
    batch = int((budget_gib - intercept) / slope + 1e-6)  # + 1e-6: a fit exact up to rounding still fits
    return BatchFit(float(slope), float(intercept), min(max(batch, 1), MAX_BATCH))


def _probe_memory(model: nn.Module, imgsz: int, device: torch.device, batch: int, amp: bool) -> float:
    """Peak CUDA memory (GiB) of one forward and backward pass at this batch size."""
    torch.cuda.reset_peak_memory_stats(device)
    images = torch.rand(batch, 3, imgsz, imgsz, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        outputs = model(images)
        loss = sum(o.float().mean() for o in outputs)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated(device) / 2**30


def _probe(model: nn.Module, imgsz: int, device: torch.device, amp: bool) -> tuple[list[int], list[float]]:
    """Probe batch sizes in turn until one runs out of memory; (batch sizes that ran, their peak memory)."""
    sizes, memory = [], []
    for batch in PROBE_BATCHES:
        try:
            memory.append(_probe_memory(model, imgsz, device, batch, amp))
            sizes.append(batch)
        except torch.OutOfMemoryError:
            break
        finally:
            torch.cuda.empty_cache()
    return sizes, memory


def autobatch(model: nn.Module, imgsz: int, device: torch.device, fraction: float = 0.8, amp: bool = True) -> int:
    """The batch size expected to use `fraction` of the device's memory; the default batch off CUDA."""
    if device.type != "cuda":
        LOGGER.info(f"{PREFIX}--batch-size -1 needs a CUDA device; using the default batch size {DEFAULT_BATCH}")
        return DEFAULT_BATCH
    total = torch.cuda.get_device_properties(device).total_memory / 2**30
    was_training = model.training
    model.train()
    sizes, memory = _probe(model, imgsz, device, amp)
    model.train(was_training)
    fit = fit_batch_size(sizes, memory, fraction * total, DEFAULT_BATCH)
    used = fit.intercept + fit.slope * fit.batch_size
    LOGGER.info(
        f"{PREFIX}batch size {fit.batch_size} for {torch.cuda.get_device_name(device)} at {imgsz} px: "
        f"about {used:.1f} of {total:.1f} GiB ({used / total:.0%}; target {fraction:.0%})"
    )
    return fit.batch_size
