"""The DataLoader over a dataset: the distributed sampler, seeded workers, the batch fitted to the dataset, and
--quad's 4-image collate.
"""

import os
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, distributed

from utils.data.dataset import LoadImagesAndLabels
from utils.errors import DatasetError
from utils.log import LOGGER


def _seed_worker(worker_id: int) -> None:
    """Seed NumPy and random in each worker from torch's per-worker seed, so augmentation is reproducible."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def _loader_flags(
    batch_size: int, rect: bool, shuffle: bool, image_weights: bool, quad: bool, prefix: str, label_rows: str = "box"
) -> tuple[bool, bool]:
    """Check the batch size; (rect, shuffle) once options that exclude each other are resolved, with a warning."""
    if quad and label_rows != "box":  # --quad's 2x images would need their masks tiled too
        raise DatasetError(f"{prefix}--quad trains on boxes only: it cannot be used with {label_rows} labels")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise DatasetError(f"{prefix}batch size must be a positive integer, got {batch_size!r}")
    if quad and batch_size % 4:
        raise DatasetError(f"{prefix}--quad needs a batch size that is a multiple of 4 (per device), got {batch_size}")
    if image_weights and rect:  # as YOLOv5: resampled images would not fit the aspect-sorted batch shapes
        LOGGER.warning(f"{prefix}WARNING: --rect is incompatible with --image-weights, rect=False")
        rect = False
    if rect and shuffle:
        LOGGER.warning(f"{prefix}WARNING: --rect is incompatible with shuffling, shuffle=False")
        shuffle = False
    return rect, shuffle


def _check_labels(dataset: LoadImagesAndLabels, require_labels: bool, prefix: str) -> None:
    """require_labels (training): at least one label row, and for a segment model at least one polygon."""
    if not require_labels:
        return
    if not any(len(lb) for lb in dataset.labels):
        raise DatasetError(f"{prefix}{dataset._no_labels_message(dataset.im_files)}")
    if dataset.segments is not None and not any(len(p) for image in dataset.segments for p in image):
        raise DatasetError(
            f"{prefix}{dataset.path} has box labels only (cls cx cy w h): a segment model learns its masks from "
            "polygon rows (cls x1 y1 x2 y2 ...; COCO JSON segmentation, convert_dataset.py --segments)"
        )


def _fit_batch(batch_size: int, n_images: int, path, quad: bool, prefix: str) -> int:
    """The batch clipped to the dataset size (as YOLOv5: a small set, or one shrunk by corrupt files, is one batch),
    then under --quad down to a multiple of 4."""
    if batch_size > n_images:
        LOGGER.info(f"{prefix}batch size {batch_size} reduced to {n_images}, the number of images in {path}")
        batch_size = n_images
    if quad and batch_size % 4:  # only a dataset smaller than the batch gets here
        if batch_size < 4:
            raise DatasetError(f"{prefix}--quad needs at least 4 images, {path} has {batch_size}")
        batch_size -= batch_size % 4
        LOGGER.info(f"{prefix}--quad: batch size {batch_size}, a multiple of 4")
    return batch_size


def _log_buffer(dataset: LoadImagesAndLabels, workers: int, prefix: str) -> None:
    """The decoded-image buffer's memory, said up front as --cache ram says its own (one buffer per process)."""
    if dataset.buffer_size:
        LOGGER.info(
            f"{prefix}Decoded-image buffer: up to {dataset.buffer_size} images ({dataset.buffer_bytes() / 1e9:.2f} GB)"
            f" in each of {max(workers, 1)} loader process{'es' if workers > 1 else ''}"
        )


def create_dataloader(
    path,
    imgsz: int,
    batch_size: int,
    stride: int,
    single_cls: bool = False,
    hyp: dict | None = None,
    augment: bool = False,
    cache: str | bool | None = None,
    pad: float = 0.0,
    rect: bool = False,
    rank: int = -1,
    workers: int = 8,
    shuffle: bool = False,
    seed: int = 0,
    prefix: str = "",
    nc: int | None = None,
    require_labels: bool = False,
    image_weights: bool = False,
    quad: bool = False,
    label_rows: str = "box",
) -> tuple[DataLoader, LoadImagesAndLabels]:
    """A DataLoader over LoadImagesAndLabels (distributed sampler when rank != -1, seeded workers); the batch is
    clipped to the dataset size. require_labels (training) refuses a dataset without any label box. image_weights:
    the caller sets dataset.indices each epoch (utils.train.image_weights), so workers restart each epoch to see
    them and rect is off. quad: batches go through collate_quad (batch_size // 4 images of twice the side).
    label_rows: the model task's ('box', or 'polygon': batches carry masks, see LoadImagesAndLabels.collate_fn)."""
    rect, shuffle = _loader_flags(batch_size, rect, shuffle, image_weights, quad, prefix, label_rows)
    options = {"augment": augment, "hyp": hyp, "rect": rect, "cache": cache, "single_cls": single_cls, "pad": pad}
    dataset = LoadImagesAndLabels(
        path, imgsz, batch_size, stride=int(stride), prefix=prefix, nc=nc, label_rows=label_rows, **options
    )
    _check_labels(dataset, require_labels, prefix)
    batch_size = _fit_batch(batch_size, len(dataset), path, quad, prefix)
    nw = max(0, min(os.cpu_count() or 1, batch_size, workers))
    _log_buffer(dataset, nw, prefix)
    sampler = None if rank == -1 else distributed.DistributedSampler(dataset, shuffle=shuffle)
    generator = torch.Generator().manual_seed(6_364_136_223_846_793 + seed + max(rank, 0))
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle and sampler is None,
        num_workers=nw,
        sampler=sampler,
        pin_memory=torch.cuda.is_available(),
        collate_fn=LoadImagesAndLabels.collate_quad if quad else LoadImagesAndLabels.collate_fn,
        worker_init_fn=_seed_worker,
        generator=generator,
        persistent_workers=nw > 0 and not image_weights,  # persistent workers would keep last epoch's indices
    )
    return loader, dataset
