"""Instance masks of a segment model's detections, at the original image's resolution and only inside each box.

A segment head gives, per detection, nm mask coefficients and, per image, nm prototypes at 1/4 of the letterboxed
input. A detection's mask is sigmoid(coefficients @ prototypes) > 0.5, i.e. the logit > 0, cropped to its box (the
recipe both peers use). Here each mask is computed for its box's pixels of the original image only: the prototype
logits are sampled bilinearly (as an align_corners=False resize does) at those pixels' centres mapped through the
letterbox, and kept as a boolean crop. No full-frame float mask is ever made: memory is the sum of the box areas
(one byte per pixel) plus one box's float logits at a time, whatever the number of detections and the image size.

This module knows nothing of models: the Predictor gives it the arrays (utils/infer/predict.py asks model.task).
"""

from collections.abc import Iterator
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


def _axis_mappings(input_hw, original_hw, ratio_pad) -> tuple[tuple[float, float], tuple[float, float]]:
    """((gain_x, pad_x), (gain_y, pad_y)) from original pixels to input pixels: the centred letterbox's, or a
    dataset's ratio_pad ((gain_h, gain_w), (pad_w, pad_h)) as its loader letterboxed the image (rectangular
    batches pad more than the centred letterbox of the same input size would)."""
    if ratio_pad is None:
        gain, pad_x, pad_y = letterbox_mapping(input_hw, original_hw)
        return (gain, pad_x), (gain, pad_y)
    (gain_h, gain_w), (pad_w, pad_h) = ratio_pad
    return (float(gain_w), float(pad_w)), (float(gain_h), float(pad_h))


def _sampling(pixels: np.ndarray, scale: float, offset: float, size: int):
    """Bilinear sampling of a prototype axis of `size` cells at original pixels: (low index, high index, weight of
    the high one), with align_corners=False and the edges clamped, as torch's bilinear resize samples."""
    position = np.maximum((pixels + 0.5) * scale + offset, 0)
    low = np.minimum(np.floor(position).astype(np.intp), size - 1)
    return low, np.minimum(low + 1, size - 1), np.clip(position - low, 0, 1).astype(np.float32)


def _box_logits(protos: np.ndarray, coefficients: np.ndarray, rows, columns) -> np.ndarray:
    """One detection's logits at the sampled pixels: only the prototype rows and columns its box touches are read
    and combined (rows x columns floats, no more). NumPy: a box is a handful of small array operations, where
    torch's per-call overhead made validation's masks cost more than its forward passes."""
    (y0, y1, wy), (x0, x1, wx) = rows, columns
    lo_y, hi_y, lo_x, hi_x = int(y0[0]), int(y1[-1]) + 1, int(x0[0]), int(x1[-1]) + 1  # indices never decrease
    window = (coefficients @ protos[:, lo_y:hi_y, lo_x:hi_x].reshape(len(protos), -1)).reshape(hi_y - lo_y, -1)
    across = window[:, x0 - lo_x] * (1 - wx) + window[:, x1 - lo_x] * wx  # (window rows, box columns)
    return across[y0 - lo_y] * (1 - wy)[:, None] + across[y1 - lo_y] * wy[:, None]


def pixel_bounds(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """(n, 4) int x1, y1, x2, y2 of the pixels whose centres lie inside each box (x + 0.5 in [x1, x2)), clipped to
    the image."""
    bounds = np.ceil(np.asarray(boxes, dtype=np.float64)[:, :4] - 0.5)
    return np.clip(bounds, 0, [width, height, width, height]).astype(np.intp)


def iter_instance_masks(
    protos: torch.Tensor,
    coefficients: torch.Tensor,
    boxes: np.ndarray,
    input_hw: tuple[int, int],
    original_hw: tuple[int, int],
    ratio_pad: tuple | None = None,
) -> Iterator[tuple[tuple[int, int], np.ndarray]]:
    """Each detection's (origin (x1, y1), boolean crop) in turn, one box's floats at a time: protos (nm, h, w) of
    the letterboxed input of input_hw, coefficients (n, nm), boxes (n, >= 4) x1, y1, x2, y2 in original pixels;
    ratio_pad: the dataset's letterbox (utils.boxes.scale_boxes' argument), else the centred letterbox's."""
    (gain_x, pad_x), (gain_y, pad_y) = _axis_mappings(input_hw, original_hw, ratio_pad)
    h, w = protos.shape[1:]
    protos, coefficients = (t.detach().float().cpu().numpy() for t in (protos, coefficients))
    scale_x, scale_y = gain_x * w / input_hw[1], gain_y * h / input_hw[0]  # original pixel -> prototype cell
    offset_x, offset_y = pad_x * w / input_hw[1] - 0.5, pad_y * h / input_hw[0] - 0.5
    height, width = original_hw
    # Every column's and row's sampling, once per image (width + height entries); a box takes its slices. Per box,
    # these small array operations had cost more than the box's logits (validation makes up to 300 masks an image).
    columns = _sampling(np.arange(width, dtype=np.float64), scale_x, offset_x, w)
    rows = _sampling(np.arange(height, dtype=np.float64), scale_y, offset_y, h)
    for (x1, y1, x2, y2), coefficient in zip(pixel_bounds(boxes, height, width).tolist(), coefficients):
        if x2 <= x1 or y2 <= y1:
            yield (x1, y1), np.zeros((max(y2 - y1, 0), max(x2 - x1, 0)), dtype=bool)
            continue
        box_columns, box_rows = (t[x1:x2] for t in columns), (t[y1:y2] for t in rows)
        yield (x1, y1), _box_logits(protos, coefficient, tuple(box_rows), tuple(box_columns)) > 0


def instance_masks(*arguments, **keywords) -> InstanceMasks:
    """The masks of n detections, all kept (one byte per box pixel): iter_instance_masks' arguments (protos,
    coefficients, boxes, input_hw, original_hw, ratio_pad=None)."""
    pieces = list(iter_instance_masks(*arguments, **keywords))
    original_hw = keywords["original_hw"] if "original_hw" in keywords else arguments[4]
    return InstanceMasks(tuple(original_hw), [o for o, _ in pieces], [c for _, c in pieces])


# Frames up to this size are encoded whole: 300 masks of a 256x256 image took 11 ms that way against 30 ms by
# crop_rle's runs; at 640x480 the two were even, and at 1920x1080 the runs took 0.4x the whole frame's time.
SMALL_FRAME_PIXELS = 2**17


def crop_rle(origin: tuple[int, int], crop: np.ndarray, shape: tuple[int, int]) -> dict:
    """The COCO RLE (pycocotools' compressed form) of a boolean crop at origin (x, y) in a (height, width) image.

    Equal, byte for byte, to pycocotools' mask.encode of the full-frame mask, in time and memory of the crop's
    size rather than the frame's (encode scans the whole frame: 12 ms a mask at 3840x2160). The runs are those of
    the frame in column-major order: each crop column's runs of ones, offset to their place in the frame; runs that
    meet across a column boundary are joined. pycocotools then compresses the counts."""
    from pycocotools import mask as mask_utils

    height, width = shape
    x0, y0 = origin
    if height * width <= SMALL_FRAME_PIXELS:  # the same RLE from pycocotools' C encoder, for less than the steps below
        frame = np.zeros(shape, dtype=np.uint8, order="F")
        frame[y0 : y0 + crop.shape[0], x0 : x0 + crop.shape[1]] = crop
        return {"size": [height, width], "counts": mask_utils.encode(frame)["counts"]}
    padded = np.zeros((crop.shape[1], crop.shape[0] + 2), dtype=np.int8)  # columns as rows, a zero above and below
    padded[:, 1:-1] = crop.T
    column, row = np.divmod(np.flatnonzero(np.diff(padded, axis=1)), crop.shape[0] + 1)  # run starts and ends
    edges = (x0 + column).astype(np.int64) * height + y0 + row
    starts, ends = edges[0::2], edges[1::2]
    joined = np.flatnonzero(starts[1:] == ends[:-1])  # a run ending at the bottom, the next one at the top
    starts, ends = np.delete(starts, joined + 1), np.delete(ends, joined)
    bounds = np.concatenate(([0], np.stack((starts, ends), 1).reshape(-1), [height * width]))
    counts = np.diff(bounds).tolist()
    if len(counts) > 1 and counts[-1] == 0:  # a mask that reaches the frame's last pixel has no final zeros
        counts.pop()
    rle = mask_utils.frPyObjects({"size": [height, width], "counts": counts}, height, width)
    return {"size": [height, width], "counts": rle["counts"]}


def draw_masks(image: np.ndarray, masks: InstanceMasks, colors: list[tuple[int, int, int]], alpha: float = 0.5):
    """Blend each mask's colour into the BGR image in place, inside its box only; the image.

    Each box is blended whole and only its mask's pixels copied back (cv2.copyTo with the mask): gathering and
    scattering the mask's pixels by boolean indexing cost 6.4 ms a mask of a 640x480 image, 9.6x this way (the same
    pixels: the uint16 sum halved is the float blend truncated, at the default alpha)."""
    halves = alpha == 0.5 and image.dtype == np.uint8 and image.ndim == 3 and image.strides[1:] == (image.shape[2], 1)
    for i in range(len(masks)):
        (x, y), crop = masks.origins[i], masks.crops[i]
        if not crop.any():
            continue
        region = image[y : y + crop.shape[0], x : x + crop.shape[1]]
        colour = np.asarray(colors[i], dtype=np.float32)
        if halves and (colour == np.round(colour)).all():
            blended = region.astype(np.uint16)
            blended += colour.astype(np.uint16)
            cv2.copyTo((blended >> 1).astype(np.uint8), crop.view(np.uint8), region)
        else:
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
