"""Distributed training under torchrun: this process's rank, read once, and the few collective steps the Trainer
needs (join the process group, let rank 0 go first, share rank 0's decisions)."""

import os
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from utils.errors import TrainError
from utils.log import LOGGER

# Set by torch.distributed.run (torchrun); -1 and 1 in a plain single-process run.
LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))
MAIN_PROCESS = RANK in (-1, 0)  # the process that logs, validates and saves


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


def from_main_process(value):
    """Rank 0's value on every process (the value itself in a single-process run); other ranks pass anything."""
    if RANK == -1:
        return value
    box = [value if RANK == 0 else None]
    dist.broadcast_object_list(box, 0)
    return box[0]


def wrap_distributed(model: nn.Module, device: torch.device, sync_bn: bool) -> nn.Module:
    """Under torchrun: SyncBatchNorm if asked (CUDA only) and DistributedDataParallel; the model as is otherwise."""
    if RANK == -1:
        return model
    cuda = device.type == "cuda"
    if sync_bn:
        if cuda:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
            LOGGER.info("Using SyncBatchNorm()")
        else:
            LOGGER.warning("WARNING: --sync-bn needs CUDA, ignored on CPU")
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[LOCAL_RANK] if cuda else None, output_device=LOCAL_RANK if cuda else None
    )
