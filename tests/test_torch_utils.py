"""Device parsing, the precision policy (FP16 on fast CUDA GPUs, float32 on CPU) and bfloat16 inference."""

import contextlib

import pytest
import torch

from models.yolo import Model
from utils.torch_utils import DeviceError, cpu_supports_bf16, prepare_for_inference, resolve_half, select_device


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
