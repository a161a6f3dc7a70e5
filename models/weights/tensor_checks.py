"""What the tensors of a model file may be, checked before anything computes with them.

A YOLO model's weights are dense real floating-point tensors; its BatchNorm layers also count their batches in an
integer. A file may hold tensors torch can load but this code cannot use: complex (their real part is kept with a
warning), integer or boolean weights (copied silently into float), float8 (no isfinite), quantized qint8/quint8
(load_state_dict fails over many lines), sparse COO/CSR or nested tensors (most operations fail on them), or
tensors on the meta device (no values). Each is refused by kind first (``check_tensor_kinds``), before any check that
reads values. Finite values can still make a broken model: a negative BatchNorm variance gives NaN once its square
root is taken (``check_batchnorm_variances``). Last, a built model is run once on a small probe image and refused
when its outputs are not finite (``check_probe_outputs``), whatever made them so (weights large enough to
overflow, a variance that cancels eps).

Each refusal is one CheckpointError line naming the weight.
"""

import torch
from torch import nn

from models.nn.config import short_repr
from utils.errors import CheckpointError

WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
COUNTER_SUFFIX = "num_batches_tracked"  # BatchNorm's batch counter: the one integer tensor of a model's state
COUNTER_DTYPES = (torch.int64, torch.int32)


def _describe(value: torch.Tensor) -> str:
    return str(value.dtype).removeprefix("torch.")


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def kind_problem(key: str, value: torch.Tensor) -> str | None:
    """None when the tensor can be one of a model's weights under key, else why not (one phrase)."""
    if value.is_nested or value.layout != torch.strided:
        layout = "nested" if value.is_nested else str(value.layout).removeprefix("torch.")
        return f"is {_a(layout)} tensor, not a dense one"
    if value.is_quantized:
        return f"is a quantized {_describe(value)} tensor, not a floating-point one"
    if value.device.type != "cpu":
        return f"is a tensor on the {value.device.type} device, which holds no values here"
    if key == COUNTER_SUFFIX or key.endswith(f".{COUNTER_SUFFIX}"):
        if value.dtype not in COUNTER_DTYPES or value.numel() != 1:
            return f"is {_a(_describe(value))} tensor of {value.numel()} values, not BatchNorm's integer batch count"
        return None
    if value.dtype not in WEIGHT_DTYPES:
        return f"is {_a(_describe(value))} tensor, not a real floating-point one (float32, float16, bfloat16, float64)"
    return None


def check_tensor_kinds(state: dict[str, torch.Tensor], where: str) -> None:
    """CheckpointError for the first tensor that is not dense, real floating-point, on the CPU (BatchNorm's batch
    counters: one integer); run before any check that reads the values (isfinite fails on float8, sparse)."""
    for key, value in state.items():
        problem = kind_problem(key, value)
        if problem:
            name = short_repr(key)
            raise CheckpointError(f"{where}: weight {name} {problem}; refusing it (a damaged or converted file)")


OTHER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)  # counters, flags


def check_file_tensors(tensors: list[torch.Tensor], where: str) -> None:
    """CheckpointError for the first tensor anywhere in the file (an optimizer's state, a last.pt's training weights,
    extras) that is not dense, not on the CPU, or neither real floating-point nor an integer: the weights are checked
    by name (check_tensor_kinds); what --resume loads besides them must not be complex, float8 or quantized either."""
    for value in tensors:
        problem = kind_problem("", value)
        if problem and not (value.layout == torch.strided and not value.is_quantized and value.dtype in OTHER_DTYPES):
            where_else = "a tensor beside its weights (e.g. an optimizer's state)"
            raise CheckpointError(f"{where}: {where_else} {problem}; refusing it")


def check_finite(state: dict[str, torch.Tensor], where: str) -> None:
    """CheckpointError for the first floating-point tensor holding NaN or inf (after check_tensor_kinds)."""
    for key, value in state.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(
                f"{where}: weight {short_repr(key)} holds NaN or infinite values (a diverged or damaged training "
                "run); refusing it"
            )


def check_batchnorm_variances(state: dict[str, torch.Tensor], where: str) -> None:
    """CheckpointError for a BatchNorm running variance below 0: its square root is NaN, so every output the layer
    feeds would be NaN (a variance is a mean of squares, never negative)."""
    for key, value in state.items():
        if key.endswith(".running_var") and value.is_floating_point() and bool((value < 0).any()):
            count, lowest = int((value < 0).sum()), float(value.min())
            raise CheckpointError(
                f"{where}: BatchNorm variance {short_repr(key)} has {count} negative values (lowest {lowest:.3g}); a "
                "variance is never negative, so the file is damaged or crafted; refusing it"
            )


def check_weights(state: dict[str, torch.Tensor], where: str) -> None:
    """Every check on a state dict's tensors that needs no model: kinds, then finite values, then variances."""
    check_tensor_kinds(state, where)
    check_finite(state, where)
    check_batchnorm_variances(state, where)


def _tensors(output) -> list[torch.Tensor]:
    """Every tensor in a model's output (a tensor, or tuples and lists of them)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in _tensors(item)]
    if isinstance(output, dict):
        return [t for item in output.values() for t in _tensors(item)]
    return []


def probe_image(stride: int, channels: int = 3) -> torch.Tensor:
    """A (1, channels, 2 * stride, 2 * stride) image of a smooth gradient in [0, 1]: the smallest input every
    output level of the model sees, the same on every run."""
    side = 2 * stride
    return torch.linspace(0, 1, channels * side * side).reshape(1, channels, side, side)


def check_probe_outputs(model: nn.Module, stride: int, where: str) -> None:
    """Run model once in eval mode on probe_image; CheckpointError when any output is NaN or infinite. The model's
    mode is restored; no gradient is kept."""
    training = model.training
    param = next(model.parameters(), None)
    image = probe_image(stride)
    if param is not None:
        image = image.to(param.device, param.dtype)
    try:
        with torch.no_grad():
            outputs = _tensors(model.eval()(image))
    finally:
        model.train(training)
    broken = [t for t in outputs if t.is_floating_point() and not torch.isfinite(t).all()]
    if broken:
        share = sum(int((~torch.isfinite(t)).sum()) for t in broken) / sum(t.numel() for t in outputs)
        raise CheckpointError(
            f"{where}: the model's outputs on a {image.shape[-1]}x{image.shape[-1]} probe image are {share:.1%} NaN or "
            "infinite although every weight is finite (weights that overflow, or damaged statistics); refusing it"
        )
