"""Detection heads: the last layer of a model, from feature maps to boxes, objectness and classes.

Detect is YOLOv5's anchor-based head; AnchorFreeDetect is the head of YOLOv8, YOLO11 and YOLO26. In eval both give
(B, N, 5 + nc) predictions for the same NMS, except YOLO26's end-to-end output, which needs none.
"""

import copy
import math

import torch
from torch import nn

from models.nn.blocks import DFL, DWConv, dwconv_cost
from models.nn.common import Conv, conv_cost


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
        # Only the box, objectness and class channels: a segment head's mask coefficients follow them, raw.
        y = (p[..., : self.nc + 5].float() if p.dtype == torch.bfloat16 else p[..., : self.nc + 5]).sigmoid()
        xy, wh, rest = y.split((2, 2, self.nc + 1), 4)
        xy = (xy * 2 + grid) * self.stride[i]
        wh = (wh * 2) ** 2 * anchor_grid
        return torch.cat((xy, wh, rest), 4).view(bs, -1, self.nc + 5)

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


def _box_branch(c_in: int, hidden: int, out: int) -> nn.Sequential:
    """Two 3x3 convolutions then a 1x1 one with a bias: the per-level box branch (and YOLOv8's class branch)."""
    return nn.Sequential(Conv(c_in, hidden, 3), Conv(hidden, hidden, 3), nn.Conv2d(hidden, out, 1))


def _light_class_branch(c_in: int, hidden: int, nc: int) -> nn.Sequential:
    """YOLO11's and YOLO26's class branch: two depthwise-separable 3x3 stages, then a 1x1 convolution."""
    return nn.Sequential(
        nn.Sequential(DWConv(c_in, c_in, 3), Conv(c_in, hidden, 1)),
        nn.Sequential(DWConv(hidden, hidden, 3), Conv(hidden, hidden, 1)),
        nn.Conv2d(hidden, nc, 1),
    )


def branch_widths(nc: int, reg_max: int, ch) -> tuple[int, int]:
    """Hidden channels of the box and class branches, from the first level's channels (Ultralytics' rule)."""
    return max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))


class AnchorFreeDetect(nn.Module):
    """The decoupled anchor-free head of YOLOv8, YOLO11 and YOLO26: per level, a box branch (4 sides x reg_max
    distance bins, decoded by DFL) and a class branch; one prediction per grid cell, its box given as distances
    from the cell centre (the anchor point) to the four sides, in strides.

    Outputs. Training: per-level maps (B, 4 * reg_max + nc, H, W) (YOLO26: {"one2many": maps, "one2one": maps}).
    Eval: (predictions, maps), predictions in the YOLOv5 contract (B, N, 5 + nc): x, y, w, h in input pixels, an
    objectness of 1 and the class probabilities, so YOLOv5's NMS (confidence = objectness x class) scores boxes as
    Ultralytics' NMS does. With end2end (YOLO26's one-to-one branch) eval predictions are final instead:
    (B, max_det, 6) x1, y1, x2, y2, score, class of the top max_det, to be thresholded, not NMS-ed
    (utils.boxes.end2end_detections)."""

    anchor_free = True
    na = 1  # one prediction per cell: what TTA's per-level row counts use
    # Eval predictions as rows (B, N, C); an edge export sets it False while tracing to output (B, C, N), the layout
    # the head computes in, and leaves the transpose to its backend (a view there, a copy in the graph)
    rows_output = True

    def __init__(self, nc: int = 80, reg_max: int = 16, end2end: bool = False, legacy: bool = True, ch=()):
        super().__init__()
        self.nc, self.nl, self.reg_max = nc, len(ch), reg_max
        self.no = nc + 4 * reg_max
        self.max_det = 300
        self.register_buffer("stride", torch.zeros(self.nl), persistent=False)
        box_hidden, class_hidden = branch_widths(nc, reg_max, ch)
        self.cv2 = nn.ModuleList(_box_branch(c, box_hidden, 4 * reg_max) for c in ch)
        branch = _box_branch if legacy else _light_class_branch
        self.cv3 = nn.ModuleList(branch(c, class_hidden, nc) for c in ch)
        self.dfl = DFL(reg_max) if reg_max > 1 else nn.Identity()
        self.has_one2one = end2end
        if end2end:  # YOLO26: a second, one-to-one pair of branches, trained on detached features
            self.one2one_cv2 = copy.deepcopy(self.cv2)
            self.one2one_cv3 = copy.deepcopy(self.cv3)
        self.end2end = end2end  # eval output: the one-to-one top max_det (True) or the one-to-many predictions
        self._points: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def _maps(x: list[torch.Tensor], boxes: nn.ModuleList, classes: nn.ModuleList) -> list[torch.Tensor]:
        return [torch.cat((b(xi), c(xi)), 1) for xi, b, c in zip(x, boxes, classes)]

    def forward(self, x: list[torch.Tensor]):
        if self.training:
            maps = self._maps(x, self.cv2, self.cv3)
            if not self.has_one2one:
                return maps
            detached = [xi.detach() for xi in x]
            return {"one2many": maps, "one2one": self._maps(detached, self.one2one_cv2, self.one2one_cv3)}
        predictions, maps, _ = self.predict(x)
        return predictions, maps

    def predict(self, x: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None]:
        """Eval outputs: (predictions, maps, cells), cells (B, k) the prediction each end-to-end row comes from (a
        placeholder row's is >= N), None for one-to-many predictions (one per cell, in order)."""
        if self.end2end and self.has_one2one:
            maps = self._maps(x, self.one2one_cv2, self.one2one_cv3)
            boxes, scores = self.decode(maps, corners=True)
            detections, cells = top_cells(boxes, scores, self.max_det)
            return detections, maps, cells
        if not self.rows_output:
            return self._channel_predictions(x), [], None
        maps = self._maps(x, self.cv2, self.cv3)
        boxes, scores = self.decode(maps)
        objectness = torch.ones_like(scores[:, :1])
        return torch.cat((boxes, objectness, scores), 1).transpose(1, 2), maps, None

    def _channel_predictions(self, x: list[torch.Tensor]) -> torch.Tensor:
        """The export path (rows_output False): predict's values as (B, 5 + nc, N), the box and class branches
        flattened apart rather than joined per level and split again (two copies of every map fewer in an exported
        graph; its maps are not an output)."""
        bs = x[0].shape[0]
        box_maps = [box(xi) for xi, box in zip(x, self.cv2)]
        distances = torch.cat([m.reshape(bs, 4 * self.reg_max, -1) for m in box_maps], 2)
        logits = torch.cat([cls(xi).reshape(bs, self.nc, -1) for xi, cls in zip(x, self.cv3)], 2)
        boxes = self._boxes(distances, *self._anchor_points(box_maps, distances.dtype))
        scores = logits.sigmoid()
        return torch.cat((boxes, torch.ones_like(scores[:, :1]), scores), 1)

    def _row_predictions(self, x: list[torch.Tensor]) -> torch.Tensor:
        """An export path for runtimes whose maps are NHWC (LiteRT's): predict's values as rows (B, N, 5 + nc),
        each map's pixels rows as they lie, DFL's softmax over the last dim (DFL.last_dim), no transpose in the graph
        but the maps' own (the (B, C, N) layout cost seven, 1.75M elements at 640). The same up to rounding."""
        bs = x[0].shape[0]
        box_maps = [box(xi) for xi, box in zip(x, self.cv2)]
        distances = torch.cat([m.permute(0, 2, 3, 1).reshape(bs, -1, m.shape[1]) for m in box_maps], 1)
        logits = torch.cat([cls(xi).permute(0, 2, 3, 1).reshape(bs, -1, self.nc) for xi, cls in zip(x, self.cv3)], 1)
        points, strides = (t.transpose(0, 1) for t in self._anchor_points(box_maps, distances.dtype))  # (N, 2), (N, 1)
        if self.reg_max > 1:
            distances = self.dfl.last_dim(distances.reshape(bs, -1, 4, self.reg_max))
        boxes = self._sides_to_boxes(distances, points, strides, dim=2)
        scores = logits.sigmoid()
        return torch.cat((boxes, torch.ones_like(scores[..., :1]), scores), 2)

    def decode(self, maps: list[torch.Tensor], corners: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(boxes (B, 4, N) in input pixels, xywh or corners, class probabilities (B, nc, N)), levels in order,
        cells row-major."""
        bs = maps[0].shape[0]
        flat = torch.cat([m.reshape(bs, self.no, -1) for m in maps], 2)
        if flat.dtype == torch.bfloat16:  # boxes in float32 at least: bfloat16 would put them pixels off
            flat = flat.float()
        distances, logits = flat.split((4 * self.reg_max, self.nc), 1)
        return self._boxes(distances, *self._anchor_points(maps, flat.dtype), corners), logits.sigmoid()

    def _boxes(self, distances, points, strides, corners: bool = False) -> torch.Tensor:
        """Boxes (B, 4, N) in input pixels, xywh or corners, from the DFL distances (B, 4 * reg_max, N)."""
        return self._sides_to_boxes(self.dfl(distances), points, strides, corners)

    @staticmethod
    def _sides_to_boxes(sides, points, strides, corners: bool = False, dim: int = 1) -> torch.Tensor:
        """Boxes in input pixels, xywh or corners along dim, from each cell's distances to its left, top, right and
        bottom sides along dim (in strides) and the cells' centres and strides, broadcast against them."""
        left_top, right_bottom = sides.chunk(2, dim)
        top_left, bottom_right = points - left_top, points + right_bottom
        if corners:
            boxes = torch.cat((top_left, bottom_right), dim)
        else:
            boxes = torch.cat(((top_left + bottom_right) / 2, bottom_right - top_left), dim)
        return boxes * strides

    def _anchor_points(self, maps: list[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Cell centres (2, N) in strides and each cell's stride (1, N), cached per map sizes."""
        key = (tuple(m.shape[-2:] for m in maps), dtype, maps[0].device)
        if key not in self._points:
            points, strides = [], []
            for i, m in enumerate(maps):
                h, w = m.shape[-2:]
                ys = torch.arange(h, device=m.device, dtype=dtype) + 0.5
                xs = torch.arange(w, device=m.device, dtype=dtype) + 0.5
                yv, xv = torch.meshgrid(ys, xs, indexing="ij")
                points.append(torch.stack((xv, yv)).view(2, -1))
                strides.append(self.stride[i].to(m.device, dtype).view(1, 1).expand(1, h * w))
            self._points[key] = (torch.cat(points, 1), torch.cat(strides, 1))
        return self._points[key]

    def initialize_biases(self) -> None:
        """Box bias 2 (sides a few strides away); class prior of 5 objects per 640x640 image spread over nc."""
        pairs = [(self.cv2, self.cv3)] + ([(self.one2one_cv2, self.one2one_cv3)] if self.has_one2one else [])
        for boxes, classes in pairs:
            for box, cls, s in zip(boxes, classes, self.stride):
                box[-1].bias.data[:] = 2.0
                cls[-1].bias.data[: self.nc] = math.log(5 / self.nc / (640 / float(s)) ** 2)

    def _apply(self, fn, *args, **kwargs):
        self._points = {}  # device or dtype changes invalidate cached anchor points
        return super()._apply(fn, *args, **kwargs)


def top_detections(boxes: torch.Tensor, scores: torch.Tensor, max_det: int) -> torch.Tensor:
    """The max_det highest (cell, class) scores of each image, as (B, k, 6): x1, y1, x2, y2, score, class.

    A cell may appear once per class. Boxes (B, 4, N) are corners; scores (B, nc, N). max_det placeholder cells
    (score -1, below any threshold) go after the real ones, so k is max_det whatever N is: a traced export keeps
    no k computed from its trace size's N (too many for a smaller input, too few for a larger one)."""
    return top_cells(boxes, scores, max_det)[0]


def top_cells(boxes: torch.Tensor, scores: torch.Tensor, max_det: int) -> tuple[torch.Tensor, torch.Tensor]:
    """top_detections' (B, k, 6) rows and the cell each comes from (B, k); a placeholder's cell is >= N."""
    bs, nc = scores.shape[:2]
    scores = torch.cat((scores, scores.new_full((bs, nc, max_det), -1.0)), 2).transpose(1, 2)  # (B, N + k, nc)
    boxes = torch.cat((boxes, boxes.new_zeros((bs, 4, max_det))), 2)
    k = max_det
    best_cells = scores.amax(2).topk(k, 1).indices  # only these cells can hold one of the k best pairs
    candidates = scores.gather(1, best_cells[..., None].expand(-1, -1, nc))
    top, flat = candidates.flatten(1).topk(k, 1)
    cells = best_cells.gather(1, torch.div(flat, nc, rounding_mode="floor"))
    corners = boxes.transpose(1, 2).gather(1, cells[..., None].expand(-1, -1, 4))
    return torch.cat((corners, top[..., None], (flat % nc)[..., None].to(top.dtype)), 2), cells


def set_end2end(model: nn.Module, enabled: bool) -> None:
    """Switch a model's end-to-end heads between their one-to-one output (final boxes) and their one-to-many
    predictions for NMS. Wrappers that merge predictions before NMS (TTA, ensembles) need the latter."""
    for m in model.modules():
        if isinstance(m, AnchorFreeDetect) and m.has_one2one:
            m.end2end = enabled


def is_end2end(model: nn.Module) -> bool:
    """Whether the model's eval output is final end-to-end detections (no NMS)."""
    return any(isinstance(m, AnchorFreeDetect) and m.has_one2one and m.end2end for m in model.modules())


def _sum_costs(costs) -> tuple[int, int, int]:
    costs = list(costs)
    return sum(c[0] for c in costs), sum(c[1] for c in costs), sum(c[2] for c in costs)


def _biased_conv_cost(size: int, c1: int, c2: int) -> tuple[int, int, int]:
    """A plain 1x1 Conv2d with a bias, the last layer of each branch."""
    return c1 * c2 + c2, c1 * c2 * size * size, c2 * size * size


def anchor_free_cost(sizes: list[int], nc: int, reg_max: int, end2end, legacy, ch: list[int]) -> tuple[int, int, int]:
    """(parameters, multiply-adds, output elements) of an AnchorFreeDetect on maps of these sizes, from its
    arguments alone (models/nn/config.py prices a config before building it)."""
    box_hidden, class_hidden = branch_widths(nc, reg_max, ch)
    costs = []
    for size, c in zip(sizes, ch):
        costs += [conv_cost(size, c, box_hidden, 3), conv_cost(size, box_hidden, box_hidden, 3)]
        costs.append(_biased_conv_cost(size, box_hidden, 4 * reg_max))
        if legacy:
            costs += [conv_cost(size, c, class_hidden, 3), conv_cost(size, class_hidden, class_hidden, 3)]
        else:
            costs += [dwconv_cost(size, c, c, 3), conv_cost(size, c, class_hidden)]
            costs += [dwconv_cost(size, class_hidden, class_hidden, 3), conv_cost(size, class_hidden, class_hidden)]
        costs.append(_biased_conv_cost(size, class_hidden, nc))
    params, macs, elements = _sum_costs(costs)
    if end2end:  # the one-to-one copy of both branches
        params, macs, elements = 2 * params, 2 * macs, 2 * elements
    points = sum(s * s for s in sizes)
    return params + (reg_max if reg_max > 1 else 0), macs, elements + points * (5 + nc)


def detect_cost(sizes: list[int], nc: int, levels: list, ch: list[int], extra: int = 0) -> tuple[int, int, int]:
    """(parameters, multiply-adds, output elements) of a Detect on maps of these sizes; extra channels per anchor
    (a segment head's mask coefficients) besides boxes, objectness and classes."""
    no = len(levels[0]) // 2 * (nc + 5 + extra)
    maps = [no * s * s for s in sizes]
    return sum(c * no + no for c in ch), sum(c * m for c, m in zip(ch, maps)), sum(maps)
