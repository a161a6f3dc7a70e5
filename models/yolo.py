"""The YOLOv5 detection model, built from a YAML description."""

import math
from copy import deepcopy
from pathlib import Path

import torch
import yaml
from torch import nn

from models.common import C3, SPPF, Bottleneck, Concat, Conv

CFG_DIR = Path(__file__).resolve().parent

# Layer names a model YAML may use; looked up here instead of eval() so a YAML cannot run code.
LAYERS = {
    "Conv": Conv,
    "Bottleneck": Bottleneck,
    "C3": C3,
    "SPPF": SPPF,
    "Concat": Concat,
    "nn.Upsample": nn.Upsample,
    "nn.BatchNorm2d": nn.BatchNorm2d,
}


class Detect(nn.Module):
    """Per-level 1x1 convolutions that predict boxes, objectness and classes for each anchor."""

    def __init__(self, nc: int = 80, anchors: list | tuple = (), ch: list[int] | tuple = ()):
        super().__init__()
        self.nc = nc
        self.no = nc + 5  # outputs per anchor: x, y, w, h, objectness, classes
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        # Anchors in pixels here; Model divides them by the level stride once strides are known.
        self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32).view(self.nl, -1, 2))
        self.register_buffer("stride", torch.zeros(self.nl), persistent=False)
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        self._grids: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, x: list[torch.Tensor]):
        """Training: per-level raw maps (B, na, ny, nx, no), views in the convolution's memory layout.
        Eval: (decoded (B, N, no), raw maps), contiguous."""
        outputs = []
        for i in range(self.nl):
            p = self.m[i](x[i])
            bs, _, ny, nx = p.shape
            p = p.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2)
            # Training maps stay views of the convolution output: the loss reads a few cells and one channel, and
            # a copy here would cost two full copies per level and step (forward and backward). Same values.
            outputs.append(p if self.training else p.contiguous())
        if self.training:
            return outputs
        return torch.cat([self.decode(i, p) for i, p in enumerate(outputs)], 1), outputs

    def decode(self, i: int, p: torch.Tensor) -> torch.Tensor:
        """Turn one level's raw map into (B, na*ny*nx, no) boxes in input pixels, all after sigmoid."""
        bs, _, ny, nx, _ = p.shape
        dtype = torch.float32 if p.dtype == torch.bfloat16 else p.dtype
        grid, anchor_grid = self._grid(i, nx, ny, dtype, p.device)
        # Decoded in float32 at least: under bfloat16 autocast (8-bit mantissa) box coordinates would be off by pixels.
        y = (p.float() if p.dtype == torch.bfloat16 else p).sigmoid()
        xy, wh, rest = y.split((2, 2, self.nc + 1), 4)
        xy = (xy * 2 + grid) * self.stride[i]
        wh = (wh * 2) ** 2 * anchor_grid
        return torch.cat((xy, wh, rest), 4).view(bs, -1, self.no)

    def _grid(self, i: int, nx: int, ny: int, dtype: torch.dtype, device: torch.device):
        key = (i, nx, ny, dtype, device)
        if key not in self._grids:
            ys = torch.arange(ny, device=device, dtype=dtype)
            xs = torch.arange(nx, device=device, dtype=dtype)
            yv, xv = torch.meshgrid(ys, xs, indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2) - 0.5  # cell offset, centre at +0.5
            anchor_grid = (self.anchors[i] * self.stride[i]).view(1, self.na, 1, 1, 2).to(dtype)
            self._grids[key] = (grid, anchor_grid.expand(1, self.na, ny, nx, 2))
        return self._grids[key]

    def _apply(self, fn, *args, **kwargs):
        self._grids = {}  # device or dtype changes invalidate cached grids
        return super()._apply(fn, *args, **kwargs)


def make_divisible(x: float, divisor: int = 8) -> int:
    """Smallest multiple of divisor that is >= x."""
    return int(math.ceil(x / divisor) * divisor)


def load_cfg(cfg: str | Path | dict) -> dict:
    """Read a model YAML (a path, or a bare name such as 'yolov5s.yaml' found in models/); ValueError if unusable."""
    if isinstance(cfg, dict):
        return deepcopy(cfg)
    path = Path(cfg)
    if not path.exists() and (CFG_DIR / path.name).exists():
        path = CFG_DIR / path.name
    if not path.exists():
        raise FileNotFoundError(f"model config not found: {cfg}")
    if path.is_dir():
        raise ValueError("it is a folder, not a model YAML file")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"not readable as YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ValueError("it must hold a YAML mapping with nc, anchors, backbone and head")
    return data


def _check_cfg(cfg: dict) -> list:
    """The layer list of a model config; ValueError naming the first entry that cannot describe a model."""
    nc, anchors = cfg.get("nc"), cfg.get("anchors")
    if not _whole(nc, 1):
        raise ValueError(f"'nc' must be a whole number >= 1, got {nc!r}")
    for key in ("depth_multiple", "width_multiple"):
        v = cfg.get(key, 1.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"'{key}' must be a positive number, got {v!r}")
    per_level = (
        isinstance(anchors, list)
        and anchors
        and all(
            isinstance(a, list)
            and a
            and len(a) % 2 == 0
            and len(a) == len(anchors[0])
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in a)
            for a in anchors
        )
    )
    if not per_level and not _whole(anchors, 1):
        raise ValueError(
            "'anchors' must be a list of levels, each with the same even number of positive sizes "
            f"(w1, h1, w2, h2, ...), or a count per level; got {anchors!r}"
        )
    backbone, head = cfg.get("backbone"), cfg.get("head")
    if not isinstance(backbone, list) or not isinstance(head, list) or not backbone + head:
        raise ValueError("'backbone' and 'head' must be lists of layers [from, repeats, module, args]")
    layers = backbone + head
    for i, layer in enumerate(layers):
        _check_layer(i, layer, last=i == len(layers) - 1)
    return layers


def _whole(v, low: int) -> bool:
    """Whether v is an int (not a bool) >= low."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _check_layer(i: int, layer, last: bool) -> None:
    """ValueError when layer i is not [from, repeats, module, args] with inputs from earlier layers."""
    if not isinstance(layer, list) or len(layer) != 4:
        raise ValueError(f"layer {i} must be a list [from, repeats, module, args], got {layer!r}")
    f, n, name, args = layer
    froms = [f] if isinstance(f, int) else f if isinstance(f, list) and f else None
    if froms is None or any(isinstance(x, bool) or not isinstance(x, int) for x in froms):
        raise ValueError(f"layer {i}: 'from' must be a layer index or a list of them, got {f!r}")
    # Inputs come from earlier layers only: 0..i-1, or counted back from this one (-1 is the previous layer).
    bad = [x for x in froms if not (x == -1 or -i <= x < i)]
    if bad:
        valid = f"-1, 0..{i - 1} or -{i}..-1" if i else "-1 (the input image)"
        raise ValueError(f"layer {i}: input {bad[0]} is not an earlier layer (valid: {valid})")
    if not _whole(n, 1):
        raise ValueError(f"layer {i}: repeats must be a whole number >= 1, got {n!r}")
    if not isinstance(name, str) or (name not in LAYERS and name != "Detect"):
        raise ValueError(f"unknown layer type '{name}' in model config (layer {i})")
    if not isinstance(args, list):
        raise ValueError(f"layer {i} ({name}): args must be a list, got {args!r}")
    if (name == "Detect") != last:
        raise ValueError(f"the last layer, and only it, must be Detect (layer {i} is {name})")


def parse_model(cfg: dict, ch: int = 3) -> tuple[nn.Sequential, list[int]]:
    """Build the layer list from a YOLOv5 YAML dict; return it and the indices whose outputs are reused."""
    cfg_layers = _check_cfg(cfg)
    anchors, nc = cfg["anchors"], cfg["nc"]
    gd, gw = cfg.get("depth_multiple", 1.0), cfg.get("width_multiple", 1.0)
    na = len(anchors[0]) // 2 if isinstance(anchors, list) else anchors
    no = na * (nc + 5)
    channels = [ch]
    layers, save = [], []
    for i, (f, n, name, args) in enumerate(cfg_layers):
        if (name in ("Concat", "Detect")) != isinstance(f, list):
            need = "a list of layer indices" if name in ("Concat", "Detect") else "one layer index"
            raise ValueError(f"layer {i} ({name}): 'from' must be {need}, got {f!r}")
        # Official YAMLs write 'None', 'nc' and 'anchors' as bare words that YOLOv5 evaluates.
        args = [{"nc": nc, "anchors": anchors, "None": None}.get(a, a) if isinstance(a, str) else a for a in args]
        n = max(round(n * gd), 1) if n > 1 else n
        if name in ("Conv", "Bottleneck", "C3", "SPPF"):
            if not args or not _whole(args[0], 1):
                raise ValueError(
                    f"layer {i} ({name}): output channels (first arg) must be a whole number >= 1, "
                    f"got {args[0] if args else 'none'!r}"
                )
            c1, c2 = channels[f], args[0]
            if c2 != no:
                c2 = make_divisible(c2 * gw, 8)
            args = [c1, c2, *args[1:]]
            if name == "C3":
                args.insert(2, n)
                n = 1
        elif name == "nn.BatchNorm2d":
            c2 = channels[f]
            args = [c2]
        elif name == "Concat":
            c2 = sum(channels[x] for x in f)
        elif name == "Detect":
            _check_detect_args(i, args, len(f))
            args.append([channels[x] for x in f])
            if isinstance(args[1], int):  # anchors given as a count per level
                args[1] = [list(range(args[1] * 2))] * len(f)
        else:
            c2 = channels[f]
        module = _make_layer(i, name, args, n)
        module.i, module.f = i, f  # layer index and where its input comes from
        save.extend(x % i for x in ([f] if isinstance(f, int) else f) if x != -1)
        layers.append(module)
        if i == 0:
            channels = []
        channels.append(c2)
    return nn.Sequential(*layers), sorted(set(save))


def _check_detect_args(i: int, args: list, n_inputs: int) -> None:
    """ValueError unless Detect's args are [nc, anchors] with one anchor level per input."""
    if len(args) != 2 or not _whole(args[0], 1):
        raise ValueError(f"layer {i} (Detect): args must be [nc, anchors], got {args!r}")
    if isinstance(args[1], list) and len(args[1]) != n_inputs:
        raise ValueError(f"layer {i} (Detect): {len(args[1])} anchor levels for {n_inputs} inputs")
    if not isinstance(args[1], list) and not _whole(args[1], 1):
        raise ValueError(f"layer {i} (Detect): anchors must be a list of levels or a count, got {args[1]!r}")


def _make_layer(i: int, name: str, args: list, n: int) -> nn.Module:
    """Layer i: n modules of type name built from args, or ValueError saying why it cannot be built."""
    module_cls = Detect if name == "Detect" else LAYERS[name]
    try:
        return nn.Sequential(*(module_cls(*args) for _ in range(n))) if n > 1 else module_cls(*args)
    except (TypeError, ValueError, RuntimeError, IndexError) as e:
        raise ValueError(f"layer {i} ({name}) cannot be built from args {args}: {' '.join(str(e).split())}") from None


class Model(nn.Module):
    """YOLOv5 detector. Forward takes (B, 3, H, W) in [0, 1]; see Detect.forward for the outputs."""

    def __init__(self, cfg: str | Path | dict = "yolov5s.yaml", ch: int = 3, nc: int | None = None, anchors=None):
        super().__init__()
        self.yaml = load_cfg(cfg)
        if nc is not None and nc != self.yaml.get("nc"):
            self.yaml["nc"] = nc
        if anchors is not None:
            self.yaml["anchors"] = anchors
        self.model, self.save = parse_model(self.yaml, ch=ch)
        self.names = [str(i) for i in range(self.yaml["nc"])]
        detect = self.model[-1]
        # Strides from a dry run: input size over each output map's size.
        probe = 256
        maps = self._dry_run(torch.zeros(1, ch, probe, probe))
        detect.stride = torch.tensor([probe / m.shape[-2] for m in maps])
        detect.anchors /= detect.stride.view(-1, 1, 1)
        self._check_anchor_order()
        self._initialize_biases()

    @property
    def stride(self) -> torch.Tensor:
        return self.model[-1].stride

    def forward(self, x: torch.Tensor):
        outputs = []
        for m in self.model:
            if m.f != -1:
                x = outputs[m.f] if isinstance(m.f, int) else [x if j == -1 else outputs[j] for j in m.f]
            x = m(x)
            outputs.append(x if m.i in self.save else None)
        return x

    @torch.no_grad()
    def _dry_run(self, x: torch.Tensor):
        """forward() on a probe image; ValueError naming the first layer whose inputs do not fit it."""
        outputs = []
        for m in self.model:
            if m.f != -1:
                x = outputs[m.f] if isinstance(m.f, int) else [x if j == -1 else outputs[j] for j in m.f]
            try:
                x = m(x)
            except (RuntimeError, ValueError, IndexError) as e:
                raise ValueError(
                    f"layer {m.i} ({type(m).__name__}) cannot take its inputs: {' '.join(str(e).split())}"
                ) from None
            outputs.append(x if m.i in self.save else None)
        return x

    def _check_anchor_order(self) -> None:
        """Make anchor sizes grow with stride, as the YAML order may be reversed."""
        detect = self.model[-1]
        area = detect.anchors.prod(-1).mean(-1).view(-1)
        if area[-1] - area[0] and (area[-1] - area[0]).sign() != (detect.stride[-1] - detect.stride[0]).sign():
            detect.anchors[:] = detect.anchors.flip(0)

    def _initialize_biases(self) -> None:
        """Objectness prior of about 8 objects per 640x640 image; class prior of 0.6/nc."""
        detect = self.model[-1]
        for conv, s in zip(detect.m, detect.stride):
            b = conv.bias.view(detect.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5 : 5 + detect.nc] += math.log(0.6 / (detect.nc - 0.99999))
            conv.bias = nn.Parameter(b.view(-1), requires_grad=True)

    def fuse(self) -> "Model":
        """Fold every Conv's BatchNorm into its convolution (inference only)."""
        for m in self.model.modules():
            if isinstance(m, Conv) and hasattr(m, "bn"):
                m.fuse()
        return self

    def set_anchors_pixels(self, anchors_px: torch.Tensor) -> None:
        """Store new anchors given in pixels, shape (nl, na, 2)."""
        detect = self.model[-1]
        detect.anchors[:] = anchors_px.to(detect.anchors) / detect.stride.to(detect.anchors).view(-1, 1, 1)
        detect._grids = {}


def count_parameters(model: nn.Module) -> int:
    """Number of parameters in a module."""
    return sum(p.numel() for p in model.parameters())
