"""Training benchmarks: one train.py epoch, the real training step against the compute floor, and the CUDA
AMP-vs-float32 figures.
"""

import functools
import statistics
import time
from pathlib import Path

import torch
from bench_common import REPO, _timed_command

from utils.torch_utils import cpu_supports_bf16, prefers_channels_last, select_device


def bench_train_epoch(data: Path, weights: Path, device: str, tmp: Path) -> dict:
    """Wall time of one fine-tuning epoch on COCO128 at 320, validation included (the README command)."""
    wall = _timed_command(
        [
            "train.py",
            "--data",
            str(data),
            "--weights",
            str(weights),
            "--img",
            "320",
            "--batch-size",
            "16",
            "--epochs",
            "1",
            "--workers",
            "2",
            "--device",
            device,
            "--project",
            str(tmp),
            "--name",
            "train",
            "--exist-ok",
            "--hyp",  # the official's default hyperparameters, so that its wall time compares like for like
            str(REPO / "data" / "hyp.scratch.yaml"),
        ]
    )
    return {"wall_s": round(wall, 1)}


def _training_parts(cfg: str, nc: int, imgsz: int, dev: torch.device, amp_dtype: torch.dtype | None = None):
    """train.py's model layout, optimizer groups, loss gains, EMA and GradScaler for the real training step."""
    from models.nn.yolo import Model
    from utils.data.hyp import load_hyp
    from utils.torch_utils import ModelEMA
    from utils.train.loss import ComputeLoss
    from utils.train.setup import smart_optimizer
    from utils.train.step import TrainingParts, loss_gains

    model = Model(cfg, nc=nc).to(dev).train()
    if prefers_channels_last(dev):  # as the Trainer: oneDNN and cuDNN train convolutions faster in NHWC
        model.to(memory_format=torch.channels_last)
    hyp = loss_gains(load_hyp(REPO / "data" / "hyp.scratch.yaml"), model.model[-1].nl, nc, imgsz)
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    scaler = torch.amp.GradScaler(dev.type, enabled=amp_dtype == torch.float16)
    return TrainingParts(model, optimizer, ComputeLoss(model, hyp), scaler, ModelEMA(model), amp_dtype), hyp


def _as_trainer_prepares(images: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """The Trainer's prepare_images (no --multi-scale): uint8 -> 0-1 floats on the device, NHWC where it prefers it."""
    from utils.train.step import prepare_images

    return prepare_images(images, dev, max(images.shape[2:]), 32, False, prefers_channels_last(dev))


def matmul_gflops(size: int = 2048, repeats: int = 5) -> float:
    """This machine's float32 GFLOP/s on a large matrix product (min time of repeats), with torch's threads."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up: first calls pay MKL's one-off setup
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        seconds.append(time.perf_counter() - t)
    return 2 * size**3 / min(seconds) / 1e9


def _step_gflop(parts, images: torch.Tensor, targets: torch.Tensor) -> float:
    """FLOPs of one training step (forward and backward; the optimizer and EMA add too few to count), in GFLOP."""
    from torch.utils.flop_counter import FlopCounterMode

    from utils.train.step import train_step

    with FlopCounterMode(display=False) as counter:
        train_step(parts, images, targets, update=True)
    return counter.get_total_flops() / 1e9


def bench_train_steps(
    data: Path, device: str, imgsz: int, batch: int, steps: int, cfg: str = "yolov5n.yaml", bf16: bool = False
) -> dict:
    """train.py's training step (utils.train.step: forward, loss, backward, clipping, SGD, EMA) per second on real
    augmented batches, the loader alone, and the compute floor: the step's FLOPs at the GFLOP/s of a large float32
    matrix product measured in the same run."""
    from utils.data.config import load_data_config
    from utils.data.loader import create_dataloader
    from utils.train.step import train_step

    dev = select_device(device)
    cfg_data = load_data_config(data)
    parts, hyp = _training_parts(cfg, cfg_data["nc"], imgsz, dev, torch.bfloat16 if bf16 else None)
    loader, _ = create_dataloader(cfg_data["train"], imgsz, batch, 32, hyp=hyp, augment=True, workers=2, shuffle=True)
    t0, n = time.perf_counter(), 0
    batches = []
    for i, b in enumerate(loader):
        batches.append(b)
        n += b[0].shape[0]
        if i + 1 == steps:
            break
    loader_ips = n / (time.perf_counter() - t0)

    times = []
    for i, (imgs, targets, _, _) in enumerate(batches * 2):
        t = time.perf_counter()
        train_step(parts, _as_trainer_prepares(imgs, dev), targets.to(dev), update=True)
        if i >= 1:  # the first step pays one-off allocation costs
            times.append(time.perf_counter() - t)
    images_per_s = batch / statistics.median(times)
    gflop = _step_gflop(parts, _as_trainer_prepares(batches[0][0], dev), batches[0][1].to(dev))
    result = {"imgsz": imgsz, "batch": batch, "precision": "bf16 autocast" if bf16 else "float32"}
    result |= {"train_images_per_s": round(images_per_s, 1), "loader_images_per_s": round(loader_ips, 1)}
    if dev.type == "cpu":
        gflops = matmul_gflops()
        floor = batch / (gflop / gflops)
        result |= {"step_gflop": round(gflop, 1), "matmul_gflops": round(gflops, 1)}
        result |= {"floor_images_per_s": round(floor, 1), "fraction_of_floor": round(images_per_s / floor, 2)}
    return result


def _train_steps(data: Path, device: str) -> list[dict]:
    """Training steps at 320 and 640 in float32, and under bfloat16 autocast (--amp) where the CPU has it."""
    rows = [bench_train_steps(data, device, s, 16, 6) for s in (320, 640)]
    if select_device(device).type == "cpu" and cpu_supports_bf16():
        rows += [bench_train_steps(data, device, s, 16, 6, bf16=True) for s in (320, 640)]
    return rows


def _cuda_median_seconds(step, device: torch.device, steps: int, warmup: int = 3) -> float:
    """Median seconds of step() over steps runs after warmup runs, synchronised around each."""
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize(device)
        t = time.perf_counter()
        step()
        torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_cuda(device: str, steps: int) -> dict:
    """yolov5s at 640: AMP vs float32 training (batch 64) and FP16 vs float32 inference (batch 32)."""
    from models.nn.yolo import Model
    from utils.train.step import train_step

    dev = select_device(device)
    out = {"gpu": torch.cuda.get_device_name(dev)}
    images = torch.rand(64, 3, 640, 640, device=dev)
    g = torch.Generator().manual_seed(0)
    targets = torch.cat(
        (
            torch.arange(64).repeat_interleave(8)[:, None].float(),
            torch.randint(0, 80, (512, 1)).float(),
            torch.rand(512, 2, generator=g) * 0.8 + 0.1,
            torch.rand(512, 2, generator=g) * 0.3 + 0.02,
        ),
        1,
    ).to(dev)
    for amp in (False, True):
        torch.manual_seed(0)
        parts, _ = _training_parts("yolov5s.yaml", 80, 640, dev, torch.float16 if amp else None)
        torch.cuda.reset_peak_memory_stats(dev)
        step = functools.partial(train_step, parts, images, targets, True)
        seconds = _cuda_median_seconds(step, dev, steps)
        key = "amp" if amp else "float32"
        out[f"train_{key}"] = {
            "images_per_s": round(64 / seconds, 1),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2),
        }
        del parts
        torch.cuda.empty_cache()
    # The layout detect.py and test.py run in (prepare_for_inference): NHWC where the device prefers it.
    layout = torch.channels_last if prefers_channels_last(dev) else torch.contiguous_format
    model = Model("yolov5s.yaml").fuse().to(dev, memory_format=layout).eval()
    batch = images[:32].contiguous(memory_format=layout)
    for half in (False, True):
        m, x = (model.half(), batch.half()) if half else (model.float(), batch.float())
        with torch.inference_mode():
            seconds = _cuda_median_seconds(lambda m=m, x=x: m(x), dev, steps)
        out[f"inference_{'fp16' if half else 'float32'}"] = {"images_per_s": round(32 / seconds, 1)}
    out["amp_speedup"] = round(out["train_amp"]["images_per_s"] / out["train_float32"]["images_per_s"], 2)
    out["amp_memory_ratio"] = round(out["train_amp"]["peak_memory_gib"] / out["train_float32"]["peak_memory_gib"], 2)
    out["fp16_inference_speedup"] = round(
        out["inference_fp16"]["images_per_s"] / out["inference_float32"]["images_per_s"], 2
    )
    return out


def _train_row(r: dict) -> str:
    """A markdown row for one training-step figure, with the compute floor where it was measured."""
    floor = ""
    if "floor_images_per_s" in r:
        floor = (
            f"; compute floor {r['floor_images_per_s']} images/s ({r['step_gflop']} GFLOP per step at "
            f"{r['matmul_gflops']} GFLOP/s float32 matmul): {r['fraction_of_floor']:.0%} of it"
        )
    return (
        f"| training yolov5n {r['precision']} at {r['imgsz']}, batch {r['batch']} (real step: NHWC, clipping, SGD, "
        f"EMA) | {r['train_images_per_s']} images/s{floor} (loader alone, 2 workers: "
        f"{r['loader_images_per_s']} images/s) |"
    )
