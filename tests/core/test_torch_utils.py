"""Device parsing, the precision policy (FP16 on fast CUDA GPUs, float32 on CPU) and bfloat16 inference."""

import contextlib
import ctypes
import os
import platform
import subprocess
import sys
import time

import pytest
import torch

from models.nn.yolo import Model
from utils import torch_utils
from utils.errors import DeviceError
from utils.torch_utils import (
    cpu_supports_bf16,
    fit_threads_to_idle_cores,
    idle_cpu_cores,
    prefers_channels_last,
    prepare_for_inference,
    resolve_half,
    retain_freed_memory,
    select_device,
)


def test_select_device():
    assert select_device("cpu") == torch.device("cpu")
    assert select_device("").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(DeviceError, match="invalid --device"):
        select_device("gpu-please")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA GPU"):
            select_device("0,1")


def test_precision_policy(monkeypatch, log):
    cpu = torch.device("cpu")
    assert resolve_half(cpu, None) is False and not log.messages
    assert resolve_half(cpu, True) is False and "running float32" in log.text  # never FP16 on CPU
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a test GPU")
    for capability, expected in (((8, 0), True), ((7, 5), True), ((6, 1), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, c=capability: c)
        assert resolve_half(cuda, None) is expected, capability
        assert resolve_half(cuda, True) is True and resolve_half(cuda, False) is False  # flags override


def test_channels_last_where_cudnn_and_onednn_prefer_it():
    # NHWC on CPU and CUDA (an NCHW FP16 weight-gradient conv made AMP training slower than float32 on an H200);
    # other backends (MPS) keep PyTorch's default layout
    assert prefers_channels_last(torch.device("cpu")) and prefers_channels_last(torch.device("cuda", 0))
    assert not prefers_channels_last(torch.device("mps"))


def test_bf16_inference_decodes_boxes_in_float32():
    torch.manual_seed(0)
    model = Model("yolov5n.yaml").fuse().eval()
    x = torch.rand(1, 3, 256, 320)
    with torch.no_grad():
        reference = model(x)[0]
        model, half, autocast, channels_last = prepare_for_inference(model, torch.device("cpu"), None, bf16=True)
        assert half is False and channels_last
        if not cpu_supports_bf16():
            assert isinstance(autocast, contextlib.nullcontext)
            return
        with autocast:
            out = model(x.contiguous(memory_format=torch.channels_last))[0]
    assert out.dtype == torch.float32
    # Box centres stay within a few pixels of float32 (bfloat16 coordinates would be off by up to 2 px at 320).
    assert (out[..., :2] - reference[..., :2]).abs().max() < 4.0
    assert (out[..., 4] - reference[..., 4]).abs().max() < 0.05


def _machine(monkeypatch, cuda: int, mps: bool) -> None:
    """Pretend this machine has `cuda` CUDA devices and MPS or not."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("request_", ["cuda", "cuda:0", "0", "0,1", " CUDA "])
def test_absent_cuda_is_an_error_not_the_cpu(monkeypatch, request_):
    _machine(monkeypatch, cuda=0, mps=False)
    with pytest.raises(DeviceError, match="no CUDA GPU") as err:
        select_device(request_)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("request_", ["gpu", "foo", "-1", "0,-1", "cuda:x", ",", "cuda:cpu", "1.5"])
def test_garbage_devices_are_errors(monkeypatch, request_):
    _machine(monkeypatch, cuda=2, mps=True)
    with pytest.raises(DeviceError, match="invalid --device"):
        select_device(request_)


def test_devices_that_exist(monkeypatch):
    _machine(monkeypatch, cuda=0, mps=False)
    assert select_device("") == torch.device("cpu") and select_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match="MPS is not available"):
        select_device("mps")
    _machine(monkeypatch, cuda=0, mps=True)
    assert select_device("mps") == torch.device("mps") and select_device("") == torch.device("cpu")
    _machine(monkeypatch, cuda=2, mps=False)
    assert select_device("") == torch.device("cuda:0") and select_device("cuda") == torch.device("cuda:0")
    assert select_device("1") == torch.device("cuda:1") and select_device("cuda:1") == torch.device("cuda:1")
    assert select_device("0,1") == torch.device("cuda:0") and select_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match="only 2 CUDA device"):
        select_device("2")
    with pytest.raises(DeviceError, match="only 2 CUDA device"):
        select_device("0,3")


def test_test_py_refuses_an_absent_device(monkeypatch, tmp_path, shared, log):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("yolo_test", Path(__file__).resolve().parents[2] / "test.py")
    yolo_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(yolo_test)
    _machine(monkeypatch, cuda=0, mps=False)
    data = tmp_path / "data.yaml"
    data.write_text(
        f"path: {shared / 'datasets/coco128'}\ntrain: images/train2017\nval: images/train2017\n"
        "nc: 80\nnames: [" + ", ".join(f"c{i}" for i in range(80)) + "]\n"
    )
    for device, words in (("cuda", "no CUDA GPU"), ("mps", "MPS is not available"), ("foo", "invalid --device")):
        log.clear()
        code = yolo_test.main(
            [
                "--data",
                str(data),
                "--weights",
                str(shared / "weights/yolov5n.pt"),
                "--device",
                device,
                "--project",
                str(tmp_path / "runs"),
                "--no-plots",
            ]
        )
        errors = [m for m in log.messages if m.startswith("ERROR")]
        assert code == 1 and len(errors) == 1 and words in errors[0] and "\n" not in errors[0], log.messages
    assert not (tmp_path / "runs").exists()  # nothing ran, no empty run folder


def test_retain_freed_memory_tunes_glibc_and_declines_elsewhere(monkeypatch):
    assert retain_freed_memory() is (platform.libc_ver()[0] == "glibc")
    x = torch.rand(4096, 4096)  # 64 MiB: above glibc's largest mmap threshold, now served from the heap
    assert torch.equal(x * 1.0, x)
    del x

    def no_glibc(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_glibc)  # macOS, Windows, musl: nothing to tune
    assert retain_freed_memory() is False


@pytest.mark.skipif(not os.path.exists("/proc/stat") or (os.cpu_count() or 1) < 2, reason="needs Linux and 2+ cores")
def test_idle_cores_see_a_busy_process():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # the busy loop is running
        seen = min(idle_cpu_cores(0.2) for _ in range(3))
    finally:
        busy.kill()
        busy.wait()
    assert seen is not None and seen <= os.cpu_count() - 0.5  # one core held by the busy loop


def test_threads_fit_the_idle_cores_unless_omp_num_threads_is_set(monkeypatch, log):
    threads = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(torch_utils, "idle_cpu_cores", lambda: 0.9)
        fit_threads_to_idle_cores()
        assert torch.get_num_threads() == 1 and "running 1 of 2 threads" in log.text
        torch.set_num_threads(2)
        monkeypatch.setattr(torch_utils, "idle_cpu_cores", lambda: 1.8)  # idle enough: both threads stay
        fit_threads_to_idle_cores()
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice stands
        monkeypatch.setattr(torch_utils, "idle_cpu_cores", lambda: 0.5)
        fit_threads_to_idle_cores()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
