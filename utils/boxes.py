"""Box formats, rescaling between letterboxed and original images, and non-maximum suppression."""

import functools
import importlib.machinery
import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

Array = torch.Tensor | np.ndarray
MAX_WH = 7680  # pixels: larger than any box, so boxes shifted by class * MAX_WH never overlap across classes
TORCHVISION_LIBRARIES = ("_C_stable", "_C")  # where torchvision 0.2x compiles its operators, in its own order


@functools.cache
def torchvision_nms() -> Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]:
    """torchvision's NMS kernel, torch.ops.torchvision.nms (what torchvision.ops.nms calls), registered by loading
    torchvision's compiled library. `import torchvision` would also import its model zoo and, through it,
    torch._dynamo: about 1.5 s of every command's start-up on a 2-core CPU, for this one operator. Where the
    library is not found or does not load, the package is imported as usual."""
    spec = importlib.util.find_spec("torchvision")
    folder = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    for name in TORCHVISION_LIBRARIES if folder else ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if (folder / f"{name}{suffix}").is_file():
                try:
                    torch.ops.load_library(str(folder / f"{name}{suffix}"))
                    return torch.ops.torchvision.nms
                except (OSError, RuntimeError, AttributeError):
                    break  # as torchvision does: the next library name, then the package
    import torchvision

    return torchvision.ops.nms


def _empty_like(x: Array) -> Array:
    return x.clone() if isinstance(x, torch.Tensor) else np.copy(x)


def xyxy2xywh(x: Array) -> Array:
    """Corners (x1, y1, x2, y2) to centre, width, height."""
    y = _empty_like(x)
    y[..., 0] = (x[..., 0] + x[..., 2]) / 2
    y[..., 1] = (x[..., 1] + x[..., 3]) / 2
    y[..., 2] = x[..., 2] - x[..., 0]
    y[..., 3] = x[..., 3] - x[..., 1]
    return y


def xywh2xyxy(x: Array) -> Array:
    """Centre, width, height to corners (x1, y1, x2, y2)."""
    y = _empty_like(x)
    half_w, half_h = x[..., 2] / 2, x[..., 3] / 2
    y[..., 0] = x[..., 0] - half_w
    y[..., 1] = x[..., 1] - half_h
    y[..., 2] = x[..., 0] + half_w
    y[..., 3] = x[..., 1] + half_h
    return y


def xywhn2xyxy(x: Array, w: float, h: float, padw: float = 0.0, padh: float = 0.0) -> Array:
    """Normalised centre/size to pixel corners, shifted by a padding offset."""
    y = xywh2xyxy(x)
    y[..., [0, 2]] = y[..., [0, 2]] * w + padw
    y[..., [1, 3]] = y[..., [1, 3]] * h + padh
    return y


def xyxy2xywhn(x: Array, w: float, h: float, clip: bool = False) -> Array:
    """Pixel corners to centre/size normalised by the image width and height."""
    if clip:
        x = clip_boxes(_empty_like(x), (h, w))
    y = xyxy2xywh(x)
    y[..., [0, 2]] /= w
    y[..., [1, 3]] /= h
    return y


def clip_boxes(boxes: Array, shape: tuple[int, int]) -> Array:
    """Clip corner boxes in place to an image of shape (height, width); returns them."""
    h, w = shape[:2]
    if isinstance(boxes, torch.Tensor):
        boxes[..., [0, 2]] = boxes[..., [0, 2]].clamp(0, w)
        boxes[..., [1, 3]] = boxes[..., [1, 3]].clamp(0, h)
    else:
        boxes[..., [0, 2]] = boxes[..., [0, 2]].clip(0, w)
        boxes[..., [1, 3]] = boxes[..., [1, 3]].clip(0, h)
    return boxes


def scale_boxes(
    letterboxed_shape: tuple[int, int], boxes: Array, original_shape: tuple[int, int], ratio_pad: tuple | None = None
) -> Array:
    """Map corner boxes in place from a letterboxed image back to the original (h, w) image; clip them."""
    if ratio_pad is None:
        gain = min(letterboxed_shape[0] / original_shape[0], letterboxed_shape[1] / original_shape[1])
        pad_w = (letterboxed_shape[1] - original_shape[1] * gain) / 2
        pad_h = (letterboxed_shape[0] - original_shape[0] * gain) / 2
    else:
        gain = ratio_pad[0][0]
        pad_w, pad_h = ratio_pad[1]
    boxes[..., [0, 2]] -= pad_w
    boxes[..., [1, 3]] -= pad_h
    boxes[..., :4] /= gain
    return clip_boxes(boxes, original_shape)


def non_max_suppression(
    prediction: torch.Tensor,
    conf_thres: float = 0.25,
    iou_thres: float = 0.45,
    classes: list[int] | None = None,
    agnostic: bool = False,
    multi_label: bool = False,
    max_det: int = 300,
    max_nms: int = 30000,
    extra: int = 0,
) -> list[torch.Tensor]:
    """Filter raw predictions (B, N, 5 + nc) into per-image (n, 6) tensors: x1, y1, x2, y2, conf, class.

    conf = objectness x class score. multi_label keeps every class above conf_thres for a box
    (used for mAP); otherwise only the best class. NMS is torchvision's, per class unless agnostic.
    The last `extra` columns of a prediction (a segment model's mask coefficients) are not classes: they follow
    each kept box, as (n, 6 + extra) rows.
    """
    if isinstance(prediction, (list, tuple)):
        prediction = prediction[0]  # eval-mode models return (decoded, raw maps)
    nc = prediction.shape[2] - 5 - extra
    multi_label &= nc > 1
    candidates = prediction[..., 4] > conf_thres
    output = []
    for image_pred, keep in zip(prediction, candidates):
        x = image_pred[keep].float()
        if not x.shape[0]:
            output.append(torch.zeros((0, 6 + extra), device=prediction.device))
            continue
        scores, carried = x[:, 5 : 5 + nc] * x[:, 4:5], x[:, 5 + nc :]
        box = xywh2xyxy(x[:, :4])
        if multi_label:
            i, j = (scores > conf_thres).nonzero(as_tuple=True)
            det = torch.cat((box[i], scores[i, j, None], j[:, None].float(), carried[i]), 1)
        else:
            conf, j = scores.max(1, keepdim=True)
            det = torch.cat((box, conf, j.float(), carried), 1)[conf.view(-1) > conf_thres]
        if classes is not None:
            det = det[(det[:, 5:6] == torch.tensor(classes, device=det.device)).any(1)]
        if det.shape[0] > max_nms:
            det = det[det[:, 4].argsort(descending=True)[:max_nms]]
        # Class-aware NMS as one torchvision NMS over boxes shifted apart by class (batched_nms's coordinate
        # trick): torchvision's batched_nms falls back to a per-class loop above 1,000 boxes on CPU.
        offsets = 0 if agnostic else det[:, 5:6] * MAX_WH
        output.append(det[first_kept(det[:, :4] + offsets, det[:, 4], iou_thres, max_det)])
    return output


def first_kept(boxes: torch.Tensor, scores: torch.Tensor, iou_thres: float, max_det: int) -> torch.Tensor:
    """The indices of the first max_det boxes that torchvision's greedy NMS keeps, highest score first: the same as
    its NMS over all boxes cut to max_det (up to the order of exactly equal scores), at a fraction of the cost when
    there are many. Greedy NMS decides each box from the higher-scoring boxes alone, so NMS over the k highest keeps
    exactly the full NMS's kept boxes among them; k starts at 4 x max_det and doubles until max_det are kept or all
    boxes are in. Why: the kernel compares each kept box with every box after it, so an untrained model's tens of
    thousands of candidates at a validation's conf 0.001 cost their number squared (a third of a yolov5n-seg's
    per-epoch validation on a 2-core CPU), while only the first max_det are used."""
    nms, n = torchvision_nms(), scores.shape[0]
    if n <= 4 * max_det:
        return nms(boxes, scores, iou_thres)[:max_det]
    ranked = scores.sort(descending=True).values
    k = 4 * max_det
    while True:
        # The boxes scoring at least the k-th score, in their own order: the kernel then sorts them, ties included, as
        # it sorts them among all boxes.
        top = (scores >= ranked[k - 1]).nonzero()[:, 0]
        kept = nms(boxes[top], scores[top], iou_thres)
        if kept.shape[0] >= max_det or top.shape[0] == n:
            return top[kept[:max_det]]
        k = min(2 * k, n)


def end2end_detections(
    prediction: torch.Tensor, conf_thres: float = 0.25, classes: list[int] | None = None, max_det: int = 300
) -> list[torch.Tensor]:
    """Per-image (n, 6) detections from an end-to-end head's (B, k, 6) output: no NMS, the boxes are final; only
    those above conf_thres (and of the given classes) are kept, highest score first, at most max_det."""
    if isinstance(prediction, (list, tuple)):
        prediction = prediction[0]
    output = []
    for image in prediction.float():
        det = image[image[:, 4] > conf_thres]
        if classes is not None:
            det = det[(det[:, 5:6] == torch.tensor(classes, device=det.device, dtype=det.dtype)).any(1)]
        output.append(det[det[:, 4].argsort(descending=True)[:max_det]])
    return output
