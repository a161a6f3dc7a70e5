"""The data loaders' speed: images per second of the training loader (mosaic on) and the validation loader, and
where a training sample's time goes, stage by stage.

The stage profile runs the dataset in this process with each stage's function wrapped by a timer, so its
milliseconds are per image and exclude the loader's workers; "worker transfer" is measured separately as the cost
of handing one collated batch from a worker process to the main one.
"""

import contextlib
import importlib
import random
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from bench_common import _stats
from torch.utils.data import DataLoader, Dataset

# stage -> the (module, attribute) functions whose time counts for it; time spent in a stage called from another
# ("label transforms" inside a warp) counts for the inner one only. Attributes the code measured lacks are skipped.
STAGES = {
    "decode": [("utils.data.dataset", "read_image")],
    "resize": [("utils.data.dataset", "LoadImagesAndLabels.load_image")],
    "mosaic": [("utils.data.dataset", "mosaic4")],  # the 2x canvas, then "perspective warp" warps it
    "perspective warp": [("utils.data.dataset", "random_perspective")],
    "mosaic + warp in one pass": [("utils.data.dataset", "mosaic_warp")],  # the tiles warped from a canvas window
    "HSV": [("utils.data.dataset", "augment_hsv")],
    "flips": [("utils.data.dataset", "random_flip")],
    "label transforms": [
        ("utils.data.dataset", "xywhn2xyxy"),
        ("utils.data.dataset", "xyxy2xywhn"),
        ("utils.data.augment", "warp_targets"),
        ("utils.data.augment", "box_candidates"),
    ],
    "tensor conversion": [("utils.data.dataset", "_to_chw_rgb")],
}


class _StageTimer:
    """Wraps the STAGES functions with timers while active; totals in seconds by stage."""

    def __init__(self):
        self.totals: dict[str, float] = defaultdict(float)
        self._saved: list[tuple] = []
        self._inner: list[float] = []

    def _wrap(self, stage: str, fn):
        totals, inner = self.totals, self._inner

        def timed(*args, **kwargs):
            inner.append(0.0)  # time of the stages this call makes, taken off its own
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - t0
                totals[stage] += spent - inner.pop()
                if inner:
                    inner[-1] += spent

        return timed

    def __enter__(self):
        for stage, places in STAGES.items():
            for module_name, attr in places:
                owner = importlib.import_module(module_name)
                *outer, attr = attr.split(".")  # a method: its class holds it
                for name in outer:
                    owner = getattr(owner, name)
                if hasattr(owner, attr):
                    self.totals[stage] += 0.0  # a stage of the code measured: shown even when never called
                    fn = getattr(owner, attr)
                    self._saved.append((owner, attr, fn))
                    setattr(owner, attr, self._wrap(stage, fn))
        return self

    def __exit__(self, *exc):
        for owner, attr, fn in reversed(self._saved):
            setattr(owner, attr, fn)


def stage_profile(dataset, n_images: int, batch: int, seed: int = 0) -> dict[str, float]:
    """Milliseconds per image of each stage over n_images training samples built in this process."""
    random.seed(seed)
    np.random.seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a loader worker
    indices = [random.randrange(len(dataset)) for _ in range(n_images)]
    for i in range(len(dataset)):  # warm-up: OpenCV's first calls, and a decoded-image buffer filled as in training
        dataset[i]
    with _StageTimer() as timer:
        t0 = time.perf_counter()
        samples, collate_s = [], 0.0
        for i in indices:
            samples.append(dataset[i])
            if len(samples) == batch:
                t = time.perf_counter()
                dataset.collate_fn(samples)
                collate_s += time.perf_counter() - t
                samples = []
        total = time.perf_counter() - t0
    torch.set_num_threads(threads)
    ms = {k: 1000 * v / n_images for k, v in timer.totals.items()}
    ms["collate"] = 1000 * collate_s / n_images
    ms["other"] = 1000 * total / n_images - sum(ms.values())
    ms["total"] = 1000 * total / n_images
    return {k: round(v, 2) for k, v in ms.items()}


class _StoredSamples(Dataset):
    """Batches collated, in the worker, from the same stored samples: what remains of a loader is the collate and
    handing the batch over to the main process."""

    def __init__(self, samples: list, collate, length: int):
        self.samples, self.collate, self.length = samples, collate, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return self.collate(self.samples)


def transfer_ms(samples: list, collate, collate_ms: float, n: int = 20) -> float:
    """Milliseconds per image to pass a collated batch from a worker process to this one: the time per batch from
    one worker that only collates stored samples, less the collate's own time (collate_ms per image)."""
    loader = DataLoader(_StoredSamples(samples, collate, n + 2), batch_size=None, num_workers=1)
    it = iter(loader)
    next(it), next(it)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
    return round(1000 * (time.perf_counter() - t0) / (n * len(samples)) - collate_ms, 2)


def loader_images_per_s(loader, epochs: int) -> list[float]:
    """Images per second of each of `epochs` passes over the loader, after one untimed warm-up pass."""
    rates = []
    for epoch in range(epochs + 1):
        t0, n = time.perf_counter(), 0
        for imgs, *_ in loader:
            n += imgs.shape[0]
        if epoch:
            rates.append(n / (time.perf_counter() - t0))
    return rates


def bench_loader(data: Path, imgsz: int = 640, batch: int = 16, workers: int = 2, epochs: int = 3) -> dict:
    """Training loader (mosaic, the default hyperparameters) and validation loader (rect, pad 0.5, 2x the workers,
    as train.py builds them) on the data YAML's train and val splits."""
    from utils.data.config import load_data_config
    from utils.data.hyp import load_hyp
    from utils.data.loader import create_dataloader
    from utils.files import DATA_DIR

    cfg = load_data_config(data)
    hyp = load_hyp(DATA_DIR / "hyp.scratch.yaml")
    train_loader, dataset = create_dataloader(
        cfg["train"], imgsz, batch, 32, hyp=hyp, augment=True, workers=workers, shuffle=True, prefix="train: "
    )
    train = loader_images_per_s(train_loader, epochs)
    del train_loader
    val_loader, _ = create_dataloader(
        cfg["val"], imgsz, batch, 32, hyp=hyp, rect=True, pad=0.5, workers=workers * 2, prefix="val: "
    )
    val = loader_images_per_s(val_loader, epochs)
    del val_loader
    profile = stage_profile(dataset, n_images=8 * batch, batch=batch)
    with contextlib.suppress(RuntimeError):  # shared memory unavailable: no worker can hand anything over
        samples = [dataset[i] for i in range(batch)]
        profile["worker transfer"] = transfer_ms(samples, dataset.collate_fn, profile["collate"])
    return {
        "settings": f"--img {imgsz}, batch {batch}, {workers} workers, mosaic {hyp['mosaic']}, hyp.scratch.yaml",
        "train_images_per_s": _stats(train),
        "val_images_per_s": _stats(val),
        "train_stage_ms_per_image": profile,
    }


def loader_rows(result: dict) -> list[str]:
    """The markdown rows of bench_loader's result."""
    tr, va = result["train_images_per_s"], result["val_images_per_s"]
    stages = ", ".join(f"{k} {v}" for k, v in result["train_stage_ms_per_image"].items())
    return [
        f"| training loader, COCO128, {result['settings']} | {tr['min']}/{tr['median']} images/s (min/median of "
        f"{tr['runs']} epochs) |",
        f"| validation loader, COCO128, rect, pad 0.5, 2x the workers | {va['min']}/{va['median']} images/s |",
        f"| training sample stages, ms per image (one process) | {stages} |",
    ]
