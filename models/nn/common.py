"""Building blocks of the YOLOv5 v6+ architecture."""

import torch
import torch.nn.functional as F
from torch import nn


def autopad(kernel: int, padding: int | None = None) -> int:
    """Padding that keeps the spatial size for odd kernels at stride 1."""
    return kernel // 2 if padding is None else padding


# What a block costs, found from its arguments without building it: a model config is checked against size limits
# before any of its tensors is allocated (models.nn.config.check_model_cost). Each returns (parameters, multiply-adds,
# output elements, output size) for a size x size input, counting the block's inner convolutions too.
Cost = tuple[int, int, int, int]


def conv_cost(size: int, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1, act=True) -> Cost:
    """Conv(c1, c2, k, s, p, g): k x k weights over c1 / g inputs per output channel, a BatchNorm (2 per channel)."""
    out = max((size + 2 * autopad(k, p) - k) // s + 1, 0)
    weights = c2 * (c1 // g) * k * k
    return weights + 2 * c2, weights * out * out, c2 * out * out, out


def _chain(size: int, *costs: Cost) -> Cost:
    """Blocks run on the same input size, summed (YOLOv5's blocks keep the size: stride 1, padded)."""
    return sum(c[0] for c in costs), sum(c[1] for c in costs), sum(c[2] for c in costs), size


def bottleneck_cost(size: int, c1: int, c2: int, shortcut=True, g: int = 1, e: float = 0.5) -> Cost:
    hidden = int(c2 * e)
    return _chain(size, conv_cost(size, c1, hidden), conv_cost(size, hidden, c2, 3, g=g))


def c3_cost(size: int, c1: int, c2: int, n: int = 1, shortcut=True, g: int = 1, e: float = 0.5) -> Cost:
    hidden = int(c2 * e)
    inner = bottleneck_cost(size, hidden, hidden, shortcut, g, 1.0)
    convs = (conv_cost(size, c1, hidden), conv_cost(size, c1, hidden), conv_cost(size, 2 * hidden, c2))
    return _chain(size, *convs, (n * inner[0], n * inner[1], n * inner[2], size))


def sppf_cost(size: int, c1: int, c2: int, k: int = 5, n: int = 3, shortcut=False) -> Cost:
    """Two convolutions and n chained k x k max-pools (counted as k * k operations per pooled element)."""
    if not isinstance(n, int) or n < 0:  # a negative count would make a negative price
        raise ValueError(f"the pooling count must be a whole number >= 0, got {n!r}")
    hidden = c1 // 2
    pools = n * k * k * hidden * size * size
    return _chain(
        size,
        conv_cost(size, c1, hidden),
        conv_cost(size, hidden * (n + 1), c2),
        (0, pools, n * hidden * size * size, size),
    )


class Conv(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + SiLU; the BN folds into the conv for inference."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1, act: bool = True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU(inplace=True) if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        if y.requires_grad and isinstance(self.act, nn.SiLU):
            # In training, an in-place SiLU makes autograd save a copy of its input: out of place is one copy less.
            return F.silu(y)
        return self.act(y)

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))

    def fuse(self) -> None:
        """Fold the BatchNorm statistics into the convolution weights and bias."""
        conv, bn = self.conv, self.bn
        fused = nn.Conv2d(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            groups=conv.groups,
            bias=True,
        ).to(conv.weight.device)
        scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
        fused.weight.data.copy_(conv.weight.detach() * scale.view(-1, 1, 1, 1))
        fused.bias.data.copy_(bn.bias.detach() - bn.running_mean * scale)
        fused.requires_grad_(False)
        self.conv = fused
        del self.bn
        self.forward = self.forward_fused


class _CatWithDenseGradients(torch.autograd.Function):
    """torch.cat whose backward gives each NHWC input its gradient as a dense NHWC tensor.

    Plain cat hands back strided slices of the output gradient; on the CPU, element-wise backward kernels (SiLU,
    upsampling, additions) fall to scalar loops on such slices: a channel slice of an NHWC gradient has only a
    few contiguous floats per pixel. One copy per input here costs less than those loops. (A channel slice of
    an NCHW gradient keeps whole contiguous planes and is passed on as it is.)"""

    @staticmethod
    def forward(ctx, dim: int, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.dim = dim
        ctx.sizes = [t.shape[dim] for t in tensors]
        ctx.nhwc = [_is_nhwc(t) for t in tensors]
        return torch.cat(tensors, dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grads = []
        for s, nhwc, needed in zip(grad.split(ctx.sizes, ctx.dim), ctx.nhwc, ctx.needs_input_grad[1:]):
            grads.append(None if not needed else s.contiguous(memory_format=torch.channels_last) if nhwc else s)
        return (None, *grads)


def _is_nhwc(t: torch.Tensor) -> bool:
    """Whether t is a 4-d tensor laid out channels-last (and not also row-major, as 1x1 maps or one channel are)."""
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def cat(tensors: list[torch.Tensor] | tuple[torch.Tensor, ...], dim: int = 1) -> torch.Tensor:
    """torch.cat; when autograd records it on the CPU, NHWC inputs get dense gradients (_CatWithDenseGradients)."""
    # CUDA kernels take strided slices in their stride; traces (exports, TensorBoard graphs) keep the plain op.
    recorded = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if recorded and tensors[0].device.type == "cpu" and not torch.jit.is_tracing():
        return _CatWithDenseGradients.apply(dim, *tensors)
    return torch.cat(tensors, dim)


class Bottleneck(nn.Module):
    """1x1 then 3x3 convolution, with a residual connection when shapes allow."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, e: float = 0.5):
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = Conv(c1, hidden, 1, 1)
        self.cv2 = Conv(hidden, c2, 3, 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP block with three convolutions: a bottleneck branch and a shortcut branch, concatenated."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5):
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = Conv(c1, hidden, 1, 1)
        self.cv2 = Conv(c1, hidden, 1, 1)
        self.cv3 = Conv(2 * hidden, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(hidden, hidden, shortcut, g, e=1.0) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: n chained max-pools (YOLOv5's three equal pools of size k, 2k-1 and 3k-2).

    YOLO26's form (shortcut) adds its input back and has no activation after its first convolution."""

    def __init__(self, c1: int, c2: int, k: int = 5, n: int = 3, shortcut: bool = False):
        super().__init__()
        hidden = c1 // 2
        self.cv1 = Conv(c1, hidden, 1, 1, act=not shortcut)
        self.cv2 = Conv(hidden * (n + 1), c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)
        self.n = n
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = [self.cv1(x)]
        for _ in range(self.n):
            pooled.append(self.m(pooled[-1]))
        y = self.cv2(cat(pooled, 1))
        return x + y if self.add else y


class Concat(nn.Module):
    """Concatenate a list of tensors along one dimension."""

    def __init__(self, dimension: int = 1):
        super().__init__()
        self.d = dimension

    def forward(self, x: list[torch.Tensor]) -> torch.Tensor:
        return cat(x, self.d)
