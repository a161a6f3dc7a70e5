"""What the edge-export tests (NCNN, LiteRT, ExecuTorch) share: real images letterboxed as detect.py does, the
.pt's and an export's detections on them, and the issue's measure of agreement (a detection matches when a box of
the other set has its class, IoU >= 0.99 and a confidence within 0.01)."""

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.ops import box_iou

from utils.boxes import end2end_detections, non_max_suppression
from utils.data.augment import letterbox
from utils.images import read_image_checked

MIN_IOU, MAX_CONF_DIFF, MIN_MATCHED = 0.99, 0.01, 0.99


def needs(*packages: str) -> None:
    """Skip the test, naming the extra, when an edge package is not installed."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -r requirements-edge.txt)")


def letterboxed(image_path: Path, size: int) -> torch.Tensor:
    """An image letterboxed to a size x size square (a static export's input), (1, 3, size, size) in [0, 1]."""
    image, _ = read_image_checked(str(image_path))
    boxed = letterbox(image, (size, size), stride=32, auto=False)[0]
    return torch.from_numpy(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))).float()[None] / 255


def detections(model, x: torch.Tensor, end2end: bool, conf: float = 0.25) -> torch.Tensor:
    """(n, 6) detections of one image as detect.py keeps them: NMS, or an end-to-end head's final boxes."""
    with torch.no_grad():
        pred = model(x)[0].float()
    if end2end:
        return end2end_detections(pred, conf)[0]
    return non_max_suppression(pred, conf, 0.45)[0]


@dataclass
class Agreement:
    """How two sets of detections agree: matched detections, all detections (the larger set per image), the
    lowest IoU and the largest confidence difference among the matches."""

    matched: int = 0
    total: int = 0
    worst_iou: float = 1.0
    worst_conf: float = 0.0

    @property
    def rate(self) -> float:
        return self.matched / self.total if self.total else 1.0

    def add(self, expected: torch.Tensor, got: torch.Tensor) -> None:
        """Count one image: each expected detection matched to its best same-class box of got."""
        self.total += max(len(expected), len(got))
        if not len(expected) or not len(got):
            return
        iou = box_iou(expected[:, :4], got[:, :4])
        iou[expected[:, 5:6] != got[:, 5][None]] = 0
        best, index = iou.max(1)
        conf = (expected[:, 4] - got[index, 4]).abs()
        good = (best >= MIN_IOU) & (conf <= MAX_CONF_DIFF)
        self.matched += int(good.sum())
        if good.any():
            self.worst_iou = min(self.worst_iou, float(best[good].min()))
            self.worst_conf = max(self.worst_conf, float(conf[good].max()))

    def add_rows(self, expected: torch.Tensor, got: torch.Tensor) -> None:
        """Count one image's raw rows (one per anchor, (n, 6) as rows() gives), row against the same row."""
        self.total += len(expected)
        iou = _paired_iou(expected[:, :4], got[:, :4])
        conf = (expected[:, 4] - got[:, 4]).abs()
        good = (iou >= MIN_IOU) & (conf <= MAX_CONF_DIFF) & (expected[:, 5] == got[:, 5])
        self.matched += int(good.sum())
        if good.any():
            self.worst_iou = min(self.worst_iou, float(iou[good].min()))
            self.worst_conf = max(self.worst_conf, float(conf[good].max()))

    def line(self) -> str:
        return (
            f"{self.matched}/{self.total} matched ({self.rate:.2%}), lowest IoU {self.worst_iou:.4f}, "
            f"largest confidence difference {self.worst_conf:.4f}"
        )


def _paired_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of each box of a with the box of b in the same row (xyxy)."""
    inter = (torch.minimum(a[:, 2:], b[:, 2:]) - torch.maximum(a[:, :2], b[:, :2])).clamp(min=0).prod(1)
    union = (a[:, 2:] - a[:, :2]).prod(1) + (b[:, 2:] - b[:, :2]).prod(1) - inter
    return inter / union.clamp(min=1e-9)


def rows(pred: torch.Tensor) -> torch.Tensor:
    """One image's raw (N, 5 + nc) predictions as (N, 6) x1, y1, x2, y2, confidence, class: every anchor's box
    before NMS (the random-initialised models' near-equal scores make NMS keep a different few among equals)."""
    xy, wh = pred[:, :2], pred[:, 2:4] / 2
    conf, cls = (pred[:, 5:] * pred[:, 4:5]).max(1)
    return torch.cat((xy - wh, xy + wh, conf[:, None], cls[:, None].float()), 1)


def raw_agreement(model, backend, images: list[Path], size: int) -> Agreement:
    """The .pt model's and an export's raw predictions compared anchor by anchor on images letterboxed to size."""
    result = Agreement()
    for path in images:
        x = letterboxed(path, size)
        with torch.no_grad():
            result.add_rows(rows(model(x)[0][0].float()), rows(backend(x)[0][0].float()))
    return result


def agreement(model, backend, images: list[Path], size: int, end2end: bool, conf: float = 0.25) -> Agreement:
    """The .pt model's and an export's detections (above conf, after NMS) compared on images letterboxed to size."""
    result = Agreement()
    for path in images:
        x = letterboxed(path, size)
        result.add(detections(model, x, end2end, conf), detections(backend, x, end2end, conf))
    return result
