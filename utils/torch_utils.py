"""Device selection, precision policy, CPU memory reuse, timing, seeding and the weight EMA."""

import contextlib
import ctypes
import math
import os
import platform
import random
import time
from copy import deepcopy
from pathlib import Path

import numpy as np
import torch
from torch import nn

from utils.errors import DeviceError
from utils.log import LOGGER


def select_device(device: str = "") -> torch.device:
    """Parse YOLOv5-style --device ('' best available, 'cpu', 'mps', 'cuda', '0', '0,1', 'cuda:1') into a torch.device.

    A device that is asked for but absent is a DeviceError (one line), never a silent fall-back to the CPU."""
    text = str(device).strip().lower().replace(" ", "")
    if text == "cpu":
        return torch.device("cpu")
    if text == "":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if text == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise DeviceError(
                "--device mps asks for Apple's Metal GPU, but MPS is not available here "
                "(use --device cpu, or '' for the best available device)"
            )
        return torch.device("mps")
    ids = ["0"] if text == "cuda" else [d for d in text.removeprefix("cuda:").split(",") if d]
    if not ids or not all(d.isdigit() for d in ids):
        raise DeviceError(
            f"invalid --device {str(device)!r}: use '' (best available), 'cpu', 'mps', 'cuda', or CUDA "
            f"indices such as '0' or '0,1'"
        )
    if not torch.cuda.is_available():
        raise DeviceError(
            f"--device {device} asks for CUDA, but no CUDA GPU is available here (use --device cpu, or "
            f"'' for the best available device)"
        )
    count = torch.cuda.device_count()
    if max(int(d) for d in ids) >= count:
        raise DeviceError(f"--device {device}: only {count} CUDA device(s) are visible (indices 0-{count - 1})")
    return torch.device(f"cuda:{ids[0]}")


def idle_cpu_cores(window_s: float = 0.1) -> float | None:
    """How many CPU cores other processes leave idle, from /proc/stat over window_s seconds (this process's own
    threads, e.g. a thread pool still spinning, count as idle); None where it cannot be read."""

    def ticks() -> tuple[int, int]:
        machine = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[11:13]  # utime, stime
        return machine[3] + machine[4] + sum(int(v) for v in own), sum(machine)  # idle + iowait + ours, all

    try:
        idle0, total0 = ticks()
        time.sleep(window_s)
        idle1, total1 = ticks()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (idle1 - idle0) / (total1 - total0) if total1 > total0 else None


def threads_for_idle_cores(threads: int, idle: float | None) -> int:
    """Of threads, as many as the idle cores hold (a core a quarter busy still counts as idle), at least one; all of
    them where idle is unknown (None)."""
    return threads if idle is None else max(1, min(threads, math.floor(idle + 0.25)))


def fit_threads_to_idle_cores() -> None:
    """At a command's start: torch's CPU threads cut to the cores other processes leave idle. Two threads on two cores
    of which another process holds one ran detect.py at 2.7x its idle time on a 2-core CPU (each parallel region
    waits for the thread that shares a core); one thread ran it at 1.45x. Not done when OMP_NUM_THREADS is set."""
    if "OMP_NUM_THREADS" in os.environ:
        return
    idle, threads = idle_cpu_cores(), torch.get_num_threads()
    fitting = threads_for_idle_cores(threads, idle)
    if fitting < threads:
        LOGGER.info(f"CPU: {idle:.1f} of {os.cpu_count()} cores idle, running {fitting} of {threads} threads")
        torch.set_num_threads(fitting)


def fp16_is_fast(device: torch.device) -> bool:
    """True on CUDA GPUs with full-rate FP16; compute capability 6.1 (GTX 10 series) runs it at 1/64 rate."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) != (6, 1)


def resolve_half(device: torch.device, half: bool | None) -> bool:
    """Precision policy: FP16 on fast CUDA GPUs by default, float32 on CPU always; half=True/False overrides on CUDA."""
    if device.type != "cuda":
        if half:
            LOGGER.warning("WARNING: --half is not supported on %s, running float32", device.type)
        return False
    if half is None:
        if not fp16_is_fast(device):
            LOGGER.info(
                "%s runs FP16 at a fraction of its FP32 rate: using float32 (--half forces FP16)",
                torch.cuda.get_device_name(device),
            )
            return False
        return True
    return bool(half)


def prefers_channels_last(device: torch.device) -> bool:
    """Whether models on device train and run in NHWC (channels_last): the layout oneDNN and cuDNN both prefer.

    CPU: yolov5n on bus.jpg at 640x480, 2 cores, median of 10 images, two alternating rounds: 46.2/47.2 ms NCHW vs
    34.5/33.7 ms NHWC. CUDA (one H200, torch 2.11, yolov5s at 640, median of 10 steps): training batch 64 float32
    504 -> 700 images/s and AMP 370 -> 824 (in NCHW one FP16 weight-gradient convolution fell on a cuDNN kernel of
    58 ms per step, so AMP was slower than float32); inference batch 32 FP16 3286 -> 3801 images/s."""
    return device.type in ("cpu", "cuda")


def unit_images(images: torch.Tensor, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """A uint8 image batch as dtype values in [0, 1], NHWC given channels_last: reordered while still uint8 (a
    quarter of the bytes), then one new tensor divided in place (conversion then division made two: 0.21 against
    0.11 CPU s for 32 images at 640). Always a new tensor, so a caller's float batch is never divided in place."""
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images.to(dtype, copy=True).div_(255)


def takes_uint8(model) -> bool:
    """Whether model declares that it takes uint8 images (models.export.runtime.Backend.uint8_input: an OpenVINO
    export scales them inside its graph, on its own threads); a .pt model takes [0, 1] floats."""
    return getattr(model, "uint8_input", False)


def model_inputs(images: torch.Tensor, model, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """A uint8 image batch as model takes it: as it is for a model that takes uint8 (no float32 batch made here),
    else unit_images."""
    return images if takes_uint8(model) else unit_images(images, dtype, channels_last)


def prepare_for_inference(model: nn.Module, device: torch.device, half: bool | None, bf16: bool = False):
    """Apply the precision policy and the device's preferred layout to an eval model.

    Returns (model, half, autocast context, channels_last): half says inputs must be FP16; the context runs
    bfloat16 autocast when bf16 was asked for on a CPU that supports it.
    """
    half = resolve_half(device, half)
    if half:
        model.half()
    use_bf16 = False
    if bf16 and device.type == "cpu":
        use_bf16 = cpu_supports_bf16()
        if not use_bf16:
            LOGGER.warning("WARNING: --bf16 needs a CPU with AVX512-BF16 or AMX; this one has neither, running float32")
    elif bf16:
        LOGGER.warning("WARNING: --bf16 is for CPU inference; on %s use --half, running without it", device.type)
    channels_last = prefers_channels_last(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()
    return model, half, autocast, channels_last


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bfloat16 matrix instructions (AVX512-BF16 or AMX) that oneDNN uses."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


# glibc's malloc serves blocks above its mmap threshold (at most 32 MiB) with fresh mmap()s and unmaps them on
# free, so every large activation of a CPU training step comes back as new pages the kernel must fault in and
# zero. yolov5n, batch 16, 640: about 2.1 GiB of page faults and 1.0 s of system time per step. These mallopt()
# parameters (M_MMAP_MAX, M_TRIM_THRESHOLD) keep freed blocks in the heap for the next step instead.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt() takes an int: never give memory back below 2 GiB of free heap top


def retain_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse instead of returning it to the OS; False where not glibc.

    Results are unchanged: only where tensors are allocated. The process's resident memory then stays at its
    peak (a training step reaches the same peak either way)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES))


def time_sync(device: torch.device | None = None) -> float:
    """Wall-clock seconds after waiting for queued CUDA work, so timings are honest."""
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        torch.cuda.synchronize(device)
    return time.perf_counter()


def init_seeds(seed: int = 0, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"


def de_parallel(model: nn.Module) -> nn.Module:
    """The bare model inside DataParallel or DistributedDataParallel."""
    return model.module if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)) else model


class ModelEMA:
    """Exponential moving average of model weights; its decay ramps up over the first updates."""

    def __init__(self, model: nn.Module, decay: float = 0.9999, tau: float = 2000, updates: int = 0):
        self.ema = deepcopy(de_parallel(model)).eval()
        self.updates = updates
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Blend the current weights into the average."""
        self.updates += 1
        d = self.decay(self.updates)
        model_state = de_parallel(model).state_dict()
        averages, currents = [], []
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                averages.append(v)
                currents.append(model_state[k].detach())
        # One call per operation for all tensors: the same multiply and add per tensor, less Python overhead.
        torch._foreach_mul_(averages, d)
        torch._foreach_add_(averages, currents, alpha=1 - d)
