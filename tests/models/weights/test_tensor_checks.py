"""What a model file's tensors may be: dense real floating-point weights, integer BatchNorm counters, variances that
are not negative, and a model whose outputs on a probe image are finite; anything else is one CheckpointError line."""

import warnings

import pytest
import torch
from torch import nn

from models.weights.tensor_checks import (
    check_probe_outputs,
    check_tensor_kinds,
    check_weights,
    probe_image,
)
from utils.errors import CheckpointError


@pytest.fixture(scope="module")
def state(small_model) -> dict[str, torch.Tensor]:
    """A real model's state dict as a checkpoint stores it: FP16 weights, int64 BatchNorm counters."""
    return {k: (v.half() if v.is_floating_point() else v).clone() for k, v in small_model.state_dict().items()}


def _first(state: dict, suffix: str) -> str:
    return next(k for k in state if k.endswith(suffix))


def _quantized(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates creating quantized tensors
        return torch.quantize_per_tensor(w.float(), 0.01, 128 if dtype == torch.quint8 else 0, dtype)


# Each makes one weight of a kind a model cannot use, and a word the refusal must hold.
ODD_KINDS = {
    "complex64": (lambda w: w.to(torch.complex64), "complex64"),
    "complex holding NaN": (lambda w: torch.complex(w.float(), w.float()).fill_(complex("nan+1j")), "complex64"),
    "int32": (lambda w: w.to(torch.int32), "int32"),
    "bool": (lambda w: w > 0, "bool"),
    "uint8": (lambda w: w.to(torch.uint8), "uint8"),
    "float8_e4m3fn": (lambda w: w.to(torch.float8_e4m3fn), "float8_e4m3fn"),
    "float8_e5m2": (lambda w: w.to(torch.float8_e5m2), "float8_e5m2"),
    "qint8": (lambda w: _quantized(w, torch.qint8), "quantized qint8"),
    "quint8": (lambda w: _quantized(w, torch.quint8), "quantized quint8"),
    "sparse COO": (lambda w: w.to_sparse(), "sparse_coo"),
    "sparse CSR": (lambda w: w.float().reshape(w.shape[0], -1).to_sparse_csr(), "sparse_csr"),
    "meta device": (lambda w: torch.empty_like(w, device="meta"), "meta device"),
}


@pytest.mark.parametrize("kind", ODD_KINDS)
@pytest.mark.parametrize("layer", ["conv.weight", "m.0.weight"])  # the first convolution, a Detect output conv
def test_odd_tensor_kinds_are_refused_by_name(state, kind, layer):
    make, word = ODD_KINDS[kind]
    key = _first(state, layer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR is 'beta', complex casts warn
        odd = {**state, key: make(state[key])}
    with pytest.raises(CheckpointError) as err:
        check_weights(odd, "x.pt")
    message = str(err.value)
    assert "\n" not in message and key in message and word in message, message


def test_every_real_floating_dtype_passes(state):
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        check_weights({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}, "x.pt")


@pytest.mark.parametrize("counter", [torch.tensor(1.5), torch.tensor([1, 2]), torch.tensor(True)])
def test_batchnorm_counter_must_be_one_integer(state, counter):
    key = _first(state, "num_batches_tracked")
    with pytest.raises(CheckpointError, match="num_batches_tracked"):
        check_tensor_kinds({**state, key: counter}, "x.pt")


@pytest.mark.parametrize("layer", [0, 20, -1])  # the first, a middle and the last BatchNorm
def test_negative_batchnorm_variance_is_refused(state, layer):
    key = [k for k in state if k.endswith("running_var")][layer]
    var = state[key].clone()
    var[len(var) // 2] = -0.25  # finite: the NaN check alone passes it
    with pytest.raises(CheckpointError) as err:
        check_weights({**state, key: var}, "x.pt")
    assert key in str(err.value) and "1 negative" in str(err.value) and "-0.25" in str(err.value)


def test_zero_variance_is_a_valid_statistic(state):
    key = _first(state, "running_var")
    check_weights({**state, key: torch.zeros_like(state[key])}, "x.pt")  # a channel that never varied


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused(state, value):
    key = _first(state, "bn.bias")
    bias = state[key].clone()
    bias[-1] = value
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        check_weights({**state, key: bias}, "x.pt")


class _Affine(nn.Module):
    """A stand-in model: a 1x1 convolution, whose weight scales the probe image."""

    def __init__(self, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        nn.init.constant_(self.conv.weight, scale)

    def forward(self, x):
        y = self.conv(x)
        return y * y, [y]  # a square overflows float32 where the weight is large


def test_probe_refuses_outputs_that_overflow_from_finite_weights():
    model = _Affine(1e30).train()
    with pytest.raises(CheckpointError, match=r"probe image are \d+\.\d% NaN or infinite"):
        check_probe_outputs(model, 32, "x.pt")
    assert model.training  # its mode is restored


def test_probe_passes_a_working_model_and_keeps_its_mode():
    model = _Affine(0.5).train()
    check_probe_outputs(model, 32, "x.pt")
    assert model.training
    model.eval()
    check_probe_outputs(model, 32, "x.pt")
    assert not model.training


def test_probe_image_is_small_fixed_and_in_range():
    image = probe_image(32)
    assert image.shape == (1, 3, 64, 64) and image.min() == 0 and image.max() == 1
    assert torch.equal(image, probe_image(32))


def test_probe_of_a_real_model_with_a_negative_variance(small_model):
    """The model-level check alone catches what the variance check catches, through fusing or not."""
    model = type(small_model)(small_model.yaml).eval()
    model.load_state_dict(small_model.state_dict())
    check_probe_outputs(model, 32, "x.pt")
    bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    bn.running_var[0] = -1.0
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        check_probe_outputs(model, 32, "x.pt")
