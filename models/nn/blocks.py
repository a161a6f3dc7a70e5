"""Building blocks of the anchor-free families (YOLOv8, YOLO11, YOLO26), with what each costs before it is built.

Module and attribute names (cv1, cv2, m, attn.qkv, ffn.0, ...) follow the layout of Ultralytics' checkpoints, so
their weights load by key. Each block has a cost function like those in models/nn/common.py: (parameters,
multiply-adds, output elements, output size) from its arguments alone, so a config is priced before it is built.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

from models.nn.common import C3, Conv, Cost, _chain, cat, conv_cost


def _check_counts(**values) -> None:
    """ValueError unless each value is a whole number >= 0 (a bool counts): negative or fractional repeats and
    channel counts would make a negative cost that hides the price of another layer."""
    for name, v in values.items():
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {v!r}")


def _check_ratio(name: str, e) -> None:
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e <= 4:
        raise ValueError(f"{name} must be a number in (0, 4], got {e!r}")


def _repeat(size: int, n: int, cost: Cost) -> Cost:
    """n blocks of the same cost in a row (channels and size kept)."""
    return n * cost[0], n * cost[1], n * cost[2], size


def dwconv_cost(size: int, c1: int, c2: int, k: int = 1, s: int = 1, act=True) -> Cost:
    return conv_cost(size, c1, c2, k, s, None, math.gcd(c1, c2), act)


class DWConv(Conv):
    """Depthwise convolution: a Conv whose groups are the greatest common divisor of its channel counts."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, act: bool = True):
        super().__init__(c1, c2, k, s, g=math.gcd(c1, c2), act=act)


def bottleneck3_cost(size: int, c1: int, c2: int, shortcut=True, g: int = 1, e: float = 0.5, k: int = 3) -> Cost:
    _check_ratio("the bottleneck's expansion", e)
    hidden = int(c2 * e)
    return _chain(size, conv_cost(size, c1, hidden, k), conv_cost(size, hidden, c2, k, g=g))


class Bottleneck3(nn.Module):
    """Two k x k convolutions (YOLOv5's Bottleneck starts with a 1x1 one), with a residual when shapes allow."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, e: float = 0.5, k: int = 3):
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = Conv(c1, hidden, k, 1)
        self.cv2 = Conv(hidden, c2, k, 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


def c2f_cost(size: int, c1: int, c2: int, n: int = 1, shortcut=False, g: int = 1, e: float = 0.5) -> Cost:
    _check_counts(repeats=n)
    _check_ratio("C2f's expansion", e)
    hidden = int(c2 * e)
    inner = bottleneck3_cost(size, hidden, hidden, shortcut, g, 1.0)
    convs = conv_cost(size, c1, 2 * hidden), conv_cost(size, (2 + n) * hidden, c2)
    return _chain(size, *convs, _repeat(size, n, inner))


class C2f(nn.Module):
    """CSP block of YOLOv8: one 1x1 convolution split in two halves, a chain of bottlenecks on the second, every
    intermediate output concatenated into the last 1x1 convolution."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, g: int = 1, e: float = 0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck3(self.c, self.c, shortcut, g, e=1.0) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.cv1(x).chunk(2, 1))
        for block in self.m:
            parts.append(block(parts[-1]))
        return self.cv2(cat(parts, 1))

    def forward_whole_halves(self, x: torch.Tensor) -> torch.Tensor:
        """forward concatenating cv1's output whole rather than as its two halves, the same values: an exported
        graph makes no copy of the first half (a slice read only by the concatenation)."""
        y = self.cv1(x)
        parts, last = [y], y.chunk(2, 1)[1]
        for block in self.m:
            last = block(last)
            parts.append(last)
        return self.cv2(torch.cat(parts, 1))


def c3k_cost(size: int, c1: int, c2: int, n: int = 1, shortcut=True, g: int = 1, e: float = 0.5, k: int = 3) -> Cost:
    _check_counts(repeats=n)
    _check_ratio("C3k's expansion", e)
    hidden = int(c2 * e)
    inner = bottleneck3_cost(size, hidden, hidden, shortcut, g, 1.0, k)
    convs = conv_cost(size, c1, hidden), conv_cost(size, c1, hidden), conv_cost(size, 2 * hidden, c2)
    return _chain(size, *convs, _repeat(size, n, inner))


class C3k(nn.Module):
    """YOLOv5's C3 with k x k bottlenecks: a bottleneck branch and a 1x1 branch, concatenated."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5, k: int = 3):
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = Conv(c1, hidden, 1, 1)
        self.cv2 = Conv(c1, hidden, 1, 1)
        self.cv3 = Conv(2 * hidden, c2, 1)
        self.m = nn.Sequential(*(Bottleneck3(hidden, hidden, shortcut, g, e=1.0, k=k) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(cat((self.m(self.cv1(x)), self.cv2(x)), 1))


def attention_heads(channels: int) -> int:
    """Heads of the attention inside C2PSA and C3k2: one per 64 channels, at least one."""
    return max(channels // 64, 1)


def attention_cost(size: int, dim: int, num_heads: int = 8, attn_ratio: float = 0.5) -> Cost:
    """The three convolutions, plus the (size^2 x size^2) attention map of each head: the price of attention at a
    high resolution grows with the fourth power of the size."""
    _check_counts(heads=num_heads)
    _check_ratio("the attention ratio", attn_ratio)
    if num_heads < 1 or dim < num_heads:
        raise ValueError(f"{dim} channels cannot be split into {num_heads} attention heads")
    head_dim = dim // num_heads
    key_dim = int(head_dim * attn_ratio)
    tokens = size * size
    matrix = num_heads * tokens * tokens
    convs = (
        conv_cost(size, dim, dim + 2 * key_dim * num_heads, act=False),
        conv_cost(size, dim, dim, act=False),
        conv_cost(size, dim, dim, 3, g=dim, act=False),
    )
    return _chain(size, *convs, (0, matrix * (key_dim + head_dim), matrix, size))


class Attention(nn.Module):
    """Multi-head self-attention over the pixels of a feature map, plus a depthwise 3x3 positional term on the
    values; queries and keys are attn_ratio times narrower than the values."""

    def __init__(self, dim: int, num_heads: int = 8, attn_ratio: float = 0.5):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim**-0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, 1, g=dim, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        per_head = (self.key_dim, self.key_dim, self.head_dim)
        # reshape, not view: under channels-last the convolution output is not contiguous in this order
        q, k, v = self.qkv(x).reshape(b, self.num_heads, sum(per_head), h * w).split(per_head, 2)
        # q scaled (key_dim x pixels) rather than the (pixels x pixels) product: pixels / key_dim times fewer
        # multiplications (12.5x on YOLO11's 20x20 map at 640), and Ultralytics' order of rounding
        weights = ((q * self.scale).transpose(-2, -1) @ k).softmax(-1)  # (b, heads, pixels, pixels)
        out = (v @ weights.transpose(-2, -1)).reshape(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(out)


def psa_block_cost(size: int, c: int, attn_ratio: float = 0.5, num_heads: int = 4, shortcut=True) -> Cost:
    ffn = conv_cost(size, c, 2 * c), conv_cost(size, 2 * c, c, act=False)
    return _chain(size, attention_cost(size, c, num_heads, attn_ratio), *ffn)


class PSABlock(nn.Module):
    """Attention then a two-layer 1x1 feed-forward network, each with a residual connection."""

    def __init__(self, c: int, attn_ratio: float = 0.5, num_heads: int = 4, shortcut: bool = True):
        super().__init__()
        self.attn = Attention(c, num_heads=num_heads, attn_ratio=attn_ratio)
        self.ffn = nn.Sequential(Conv(c, c * 2, 1), Conv(c * 2, c, 1, act=False))
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x) if self.add else self.attn(x)
        return x + self.ffn(x) if self.add else self.ffn(x)


def c2psa_cost(size: int, c1: int, c2: int, n: int = 1, e: float = 0.5) -> Cost:
    _check_counts(repeats=n)
    _check_ratio("C2PSA's expansion", e)
    hidden = int(c1 * e)
    inner = psa_block_cost(size, hidden, 0.5, attention_heads(hidden))
    return _chain(size, conv_cost(size, c1, 2 * hidden), conv_cost(size, 2 * hidden, c1), _repeat(size, n, inner))


class C2PSA(nn.Module):
    """Half of the channels through n attention blocks, the other half as is, concatenated (YOLO11's last
    backbone stage). Its output has its input's channels."""

    def __init__(self, c1: int, c2: int, n: int = 1, e: float = 0.5):
        super().__init__()
        if c1 != c2:
            raise ValueError(f"C2PSA keeps its channels: input {c1} and output {c2} must be equal")
        self.c = int(c1 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv(2 * self.c, c1, 1)
        self.m = nn.Sequential(*(PSABlock(self.c, 0.5, attention_heads(self.c)) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.c, self.c), 1)
        return self.cv2(cat((a, self.m(b)), 1))


def c3k2_cost(
    size: int, c1: int, c2: int, n: int = 1, c3k=False, e: float = 0.5, attn=False, g: int = 1, shortcut=True
) -> Cost:
    _check_counts(repeats=n)
    _check_ratio("C3k2's expansion", e)
    hidden = int(c2 * e)
    if attn:
        inner = _chain(
            size,
            bottleneck3_cost(size, hidden, hidden, shortcut, g),
            psa_block_cost(size, hidden, 0.5, attention_heads(hidden)),
        )
    elif c3k:
        inner = c3k_cost(size, hidden, hidden, 2, shortcut, g)
    else:
        inner = bottleneck3_cost(size, hidden, hidden, shortcut, g)
    convs = conv_cost(size, c1, 2 * hidden), conv_cost(size, (2 + n) * hidden, c2)
    return _chain(size, *convs, _repeat(size, n, inner))


class C3k2(C2f):
    """YOLO11's C2f: each inner block is a bottleneck (e 0.5), a C3k of two bottlenecks (c3k), or a bottleneck then
    an attention block (attn, YOLO26's last stage)."""

    def __init__(
        self,
        c1: int,
        c2: int,
        n: int = 1,
        c3k: bool = False,
        e: float = 0.5,
        attn: bool = False,
        g: int = 1,
        shortcut: bool = True,
    ):
        super().__init__(c1, c2, n, shortcut, g, e)
        c = self.c
        if attn:
            blocks = (
                nn.Sequential(Bottleneck3(c, c, shortcut, g), PSABlock(c, 0.5, attention_heads(c))) for _ in range(n)
            )
        elif c3k:
            blocks = (C3k(c, c, 2, shortcut, g) for _ in range(n))
        else:
            blocks = (Bottleneck3(c, c, shortcut, g) for _ in range(n))
        self.m = nn.ModuleList(blocks)


class DFL(nn.Module):
    """Distribution focal loss decoding: a box side as the expected value of a softmax over `bins` distances
    (0 .. bins-1, in strides). The 1x1 convolution holds those fixed distances; it is never trained."""

    def __init__(self, bins: int = 16):
        super().__init__()
        self.bins = bins
        self.conv = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(bins, dtype=torch.float32).view(1, bins, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 4 * bins, N) logits -> (B, 4, N) distances."""
        b, _, n = x.shape
        probabilities = x.reshape(b, 4, self.bins, n).transpose(1, 2).softmax(1)  # (B, bins, 4, N)
        # In the input's dtype: a bfloat16 model decodes its boxes in float32 (AnchorFreeDetect.decode), and the bins
        # 0..15 are exact in every float type.
        weight = self.conv.weight.to(probabilities.dtype)
        return nn.functional.conv2d(probabilities, weight).reshape(b, 4, n)

    def last_dim(self, logits: torch.Tensor) -> torch.Tensor:
        """forward's distances (..., 4) from logits (..., 4, bins) holding each side's bins in their last dim, the
        layout edge runtimes take a softmax in (XNNPACK's over the last dim only; LiteRT's NHWC rows lie so): the
        softmax's expected bin, weighed by a linear layer (XNNPACK's ExecuTorch partitioner takes one whose weight is
        a constant: the exporter folds this view of the fixed bins)."""
        bins = self.conv.weight.to(logits.dtype).reshape(1, self.bins)
        return nn.functional.linear(logits.softmax(-1), bins).flatten(-2)

    def forward_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        """forward's (B, 4 * bins, N) -> (B, 4, N) with the softmax over the last dim (last_dim)."""
        b, _, n = x.shape
        return self.last_dim(x.reshape(b, 4, self.bins, n).transpose(2, 3))


@dataclass(frozen=True)
class EdgeRewrite:
    """What the XNNPACK exports (models/export/xnnpack_graph.py) may change in a block while tracing it, the values
    the same. input_convs: the fused 1x1 convolutions the block applies first to its input, which commute with an
    upsampling in front of it; fewer_copies: a method computing forward with fewer copies (LiteRT and ExecuTorch);
    xnnpack_ops: a method computing forward from ops XNNPACK's ExecuTorch partitioner takes (ExecuTorch FP32);
    float_in_litert_int8: the LiteRT INT8 export keeps the whole block in float (models/export/litert_int8.py)."""

    input_convs: tuple[str, ...] = ()
    fewer_copies: str = ""
    xnnpack_ops: str = ""
    float_in_litert_int8: bool = False


EDGE_REWRITES = {
    C3: EdgeRewrite(input_convs=("cv1", "cv2")),
    C2f: EdgeRewrite(input_convs=("cv1",), fewer_copies="forward_whole_halves"),
    DFL: EdgeRewrite(xnnpack_ops="forward_last_dim"),
    Attention: EdgeRewrite(float_in_litert_int8=True),
}


def edge_rewrite(block: nn.Module) -> EdgeRewrite:
    """block's EdgeRewrite: its class's or its nearest base class's (C3k2: C2f's); for any other block, none."""
    return next((EDGE_REWRITES[kind] for kind in type(block).__mro__ if kind in EDGE_REWRITES), EdgeRewrite())
