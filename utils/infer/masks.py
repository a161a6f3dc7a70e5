"""Instance masks of a segment model's detections, at the original image's resolution and only inside each box.

A segment head gives, per detection, nm mask coefficients and, per image, nm prototypes at 1/4 of the letterboxed
input. A detection's mask is sigmoid(coefficients @ prototypes) > 0.5, i.e. the logit > 0, cropped to its box (the
recipe both peers use). Here each mask is computed for its box's pixels of the original image only: the prototype
logits are sampled bilinearly (as an align_corners=False resize does) at those pixels' centres mapped through the
letterbox, and kept as a boolean crop. No full-frame float mask is ever made: memory is the sum of the box areas
(one byte per pixel) plus one box's float logits at a time, whatever the number of detections and the image size.

This module knows nothing of models: the Predictor gives it the arrays (utils/infer/predict.py asks model.task).
"""

from dataclasses import dataclass

import cv2
import numpy as np
import torch


@dataclass
class InstanceMasks:
    """One boolean mask per detection, each the crop of its box in original-image pixels.

    crops[i] is (y2 - y1, x2 - x1) for origins[i] = (x1, y1): the pixels whose centres lie in the box."""

    shape: tuple[int, int]  # original (height, width)
    origins: list[tuple[int, int]]
    crops: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.crops)

    def full(self, i: int) -> np.ndarray:
        """Detection i's mask as a full (height, width) boolean image (made on request, one at a time)."""
        mask = np.zeros(self.shape, dtype=bool)
        (x, y), crop = self.origins[i], self.crops[i]
        mask[y : y + crop.shape[0], x : x + crop.shape[1]] = crop
        return mask

    def polygon(self, i: int) -> np.ndarray:
        """Detection i's outline as (k, 2) x, y pixel vertices: its largest piece; (0, 2) for an empty mask."""
        crop = self.crops[i]
        if not crop.any():
            return np.zeros((0, 2), dtype=np.float32)
        contours, _ = cv2.findContours(crop.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        largest = max(contours, key=lambda c: (cv2.contourArea(c), len(c))).reshape(-1, 2).astype(np.float32)
        return largest + np.asarray(self.origins[i], dtype=np.float32)

    def polygon_normalised(self, i: int) -> np.ndarray:
        """polygon(i) in [0, 1] of the image's width and height."""
        h, w = self.shape
        return self.polygon(i) / np.asarray([w, h], dtype=np.float32)


def letterbox_mapping(input_hw: tuple[int, int], original_hw: tuple[int, int]) -> tuple[float, float, float]:
    """(gain, pad_x, pad_y) of the letterbox from the original image to the input (as utils.boxes.scale_boxes
    undoes it): input = original * gain + pad."""
    gain = min(input_hw[0] / original_hw[0], input_hw[1] / original_hw[1])
    return gain, (input_hw[1] - original_hw[1] * gain) / 2, (input_hw[0] - original_hw[0] * gain) / 2


def _sampling(pixels: torch.Tensor, scale: float, offset: float, size: int):
    """Bilinear sampling of a prototype axis of `size` cells at original pixels: (low index, high index, weight of
    the high one), with align_corners=False and the edges clamped, as torch's bilinear resize samples."""
    position = ((pixels + 0.5) * scale + offset).clamp(min=0)
    low = position.floor().long().clamp(max=size - 1)
    return low, (low + 1).clamp(max=size - 1), (position - low).clamp(0, 1)


def _box_logits(protos: torch.Tensor, coefficients: torch.Tensor, rows, columns) -> torch.Tensor:
    """One detection's logits at the sampled pixels: only the prototype rows and columns its box touches are read
    and combined (rows x columns floats, no more)."""
    (y0, y1, wy), (x0, x1, wx) = rows, columns
    lo_y, hi_y = int(y0.min()), int(y1.max()) + 1
    lo_x, hi_x = int(x0.min()), int(x1.max()) + 1
    window = torch.einsum("c,chw->hw", coefficients, protos[:, lo_y:hi_y, lo_x:hi_x])
    across = window[:, x0 - lo_x] * (1 - wx) + window[:, x1 - lo_x] * wx  # (window rows, box columns)
    return across[y0 - lo_y] * (1 - wy)[:, None] + across[y1 - lo_y] * wy[:, None]


def instance_masks(
    protos: torch.Tensor,
    coefficients: torch.Tensor,
    boxes: np.ndarray,
    input_hw: tuple[int, int],
    original_hw: tuple[int, int],
) -> InstanceMasks:
    """The masks of n detections: protos (nm, h, w) of the letterboxed input of input_hw, coefficients (n, nm),
    boxes (n, >= 4) x1, y1, x2, y2 in original pixels (as the Predictor gives them)."""
    gain, pad_x, pad_y = letterbox_mapping(input_hw, original_hw)
    h, w = protos.shape[1:]
    protos, coefficients = protos.float(), coefficients.float()
    scale_x, scale_y = gain * w / input_hw[1], gain * h / input_hw[0]  # original pixel -> prototype cell
    offset_x, offset_y = pad_x * w / input_hw[1] - 0.5, pad_y * h / input_hw[0] - 0.5
    height, width = original_hw
    origins, crops = [], []
    for box, coefficient in zip(np.asarray(boxes, dtype=np.float64)[:, :4], coefficients):
        # the pixels whose centres lie inside the box (x + 0.5 in [x1, x2)), clipped to the image
        x1, x2 = (int(np.clip(np.ceil(v - 0.5), 0, width)) for v in box[[0, 2]])
        y1, y2 = (int(np.clip(np.ceil(v - 0.5), 0, height)) for v in box[[1, 3]])
        origins.append((x1, y1))
        if x2 <= x1 or y2 <= y1:
            crops.append(np.zeros((max(y2 - y1, 0), max(x2 - x1, 0)), dtype=bool))
            continue
        columns = _sampling(torch.arange(x1, x2, dtype=torch.float32), scale_x, offset_x, w)
        rows = _sampling(torch.arange(y1, y2, dtype=torch.float32), scale_y, offset_y, h)
        crops.append((_box_logits(protos, coefficient, rows, columns) > 0).cpu().numpy())
    return InstanceMasks((height, width), origins, crops)


def draw_masks(image: np.ndarray, masks: InstanceMasks, colors: list[tuple[int, int, int]], alpha: float = 0.5):
    """Blend each mask's colour into the BGR image in place, inside its box only; the image."""
    for i in range(len(masks)):
        (x, y), crop = masks.origins[i], masks.crops[i]
        if not crop.any():
            continue
        region = image[y : y + crop.shape[0], x : x + crop.shape[1]]
        colour = np.asarray(colors[i], dtype=np.float32)
        region[crop] = (region[crop] * (1 - alpha) + colour * alpha).astype(image.dtype)
    return image


def polygon_rows(masks: InstanceMasks, boxes: np.ndarray, save_conf: bool, lowest_first: bool = False) -> list[str]:
    """detect.py --save-txt's rows of a segment model: 'cls x1 y1 x2 y2 ... [conf]', the normalised vertices of each
    mask's largest piece (Ultralytics' predict format), in the boxes' order (reversed with lowest_first, as YOLOv5
    writes its rows); a mask of fewer than 3 vertices (empty, or a sliver) has no outline and no row."""
    rows = []
    order = range(len(masks) - 1, -1, -1) if lowest_first else range(len(masks))
    for i in order:
        conf, cls = float(boxes[i, 4]), int(boxes[i, 5])
        polygon = masks.polygon_normalised(i)
        if len(polygon) < 3:
            continue
        values = [cls, *polygon.reshape(-1).tolist(), *([conf] if save_conf else [])]
        rows.append(" ".join(f"{v:g}" for v in values))
    return rows
