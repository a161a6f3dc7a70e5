"""Detection heads: the last layer of a model, from feature maps to boxes, objectness and classes."""

import torch
from torch import nn


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
