"""Test-time augmentation (YOLOv5's `--augment`): three views of each input, their predictions merged before NMS.

The views are the input as is, 0.83x scaled and flipped left-right, and 0.67x scaled. Each scaled view is padded
(grey, as the letterbox pads) up to a multiple of the stride; its boxes are mapped back to the input's pixels.
As YOLOv5 does, the full-size view drops its largest-object level and the smallest view its smallest-object level,
where boxes of that size are least reliable.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.api.ensemble import Ensemble
from models.nn.head import set_end2end

PASSES = ((1.0, False), (0.83, True), (0.67, False))  # (scale, flipped left-right)
PAD_VALUE = 114 / 255  # the letterbox's grey, in [0, 1] inputs (YOLOv5 uses 0.447)


class TTAModel(nn.Module):
    """Wrap a Model or an Ensemble; forward(x) -> (the three views' predictions concatenated along the boxes, None).

    An Ensemble is augmented member by member, so each member's levels can be clipped.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        set_end2end(model, False)  # views are merged before NMS: end-to-end heads give their NMS predictions
        self.model = model
        self.names = list(model.names)
        self.family = model.family.merged()
        self.imgsz = model.imgsz

    @property
    def stride(self) -> torch.Tensor:
        return self.model.stride

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        members = list(self.model.models) if isinstance(self.model, Ensemble) else [self.model]
        predictions = [augmented_predictions(member, x) for member in members]
        return torch.cat([p.to(predictions[0].dtype) for p in predictions], 1), None


def augmented_predictions(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One model's predictions (B, N, 5 + nc) on the three views of x, in x's pixels, concatenated along N."""
    height, width = x.shape[-2:]
    stride = int(model.stride.max())
    views = []
    for scale, flipped in PASSES:
        view = scale_and_pad(x.flip(-1) if flipped else x, scale, stride)
        predictions = model(view)[0]
        views.append(descale(predictions, scale, width if flipped else None))
    levels = level_rows(model, *(scale_and_pad(x, s, stride).shape[-2:] for s, _ in PASSES[::2]))
    return torch.cat(clip_levels(views, levels), 1)


def clip_levels(views: list[torch.Tensor], levels: list[list[int]] | None) -> list[torch.Tensor]:
    """Drop the full-size view's largest-object level and the smallest view's smallest-object level.

    levels holds the rows per level of the first and last views; views are left whole when they do not match."""
    if levels is None or [sum(rows) for rows in levels] != [views[0].shape[1], views[-1].shape[1]]:
        return views
    first_rows, last_rows = levels
    return [views[0][:, : -first_rows[-1]], *views[1:-1], views[-1][:, last_rows[0] :]]


def scale_and_pad(x: torch.Tensor, scale: float, stride: int) -> torch.Tensor:
    """x resized by scale (bilinear), then padded right and bottom with grey up to a multiple of stride."""
    if scale == 1.0:
        return x
    height, width = x.shape[-2:]
    size = (int(height * scale), int(width * scale))
    x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
    padded_h, padded_w = (math.ceil(v * scale / stride) * stride for v in (height, width))
    return F.pad(x, [0, padded_w - size[1], 0, padded_h - size[0]], value=PAD_VALUE)


def descale(predictions: torch.Tensor, scale: float, flipped_width: int | None = None) -> torch.Tensor:
    """Boxes (xywh, first 4 columns) of a scaled view back in the input's pixels; un-flipped when flipped_width."""
    boxes = predictions[..., :4] / scale
    if flipped_width is not None:
        boxes = torch.cat((flipped_width - boxes[..., :1], boxes[..., 1:]), -1)
    return torch.cat((boxes, predictions[..., 4:]), -1)


def level_rows(model: nn.Module, *shapes) -> list[list[int]] | None:
    """Prediction rows per detection level for each (H, W) input shape; None when the head is not a YOLO Detect."""
    layers = getattr(model, "model", None)
    head = layers[-1] if isinstance(layers, nn.Sequential) and len(layers) else None
    if head is None or not all(hasattr(head, k) for k in ("nl", "na", "stride")):
        return None
    strides = [float(s) for s in head.stride]
    return [[head.na * math.ceil(h / s) * math.ceil(w / s) for s in strides] for h, w in shapes]
