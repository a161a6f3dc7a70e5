"""The one writer of YOLO-format prediction labels, shared by detect.py (--save-txt) and test.py (--save-txt)."""

from pathlib import Path

import torch

from utils.boxes import xyxy2xywh


def write_yolo_labels(file: Path, boxes: torch.Tensor, shape: tuple[int, int], save_conf: bool) -> None:
    """Write rows of boxes (n, 6: x1 y1 x2 y2 conf cls, original-image pixels) as 'cls cx cy w h [conf]' lines.

    Coordinates are normalised to shape (h, w); numbers are written with 6 significant digits (%g), rows in the
    order given (detect.py passes them lowest confidence first, as YOLOv5 writes them).
    """
    boxes = boxes.detach().cpu()  # in the caller's precision: detect.py's float32 rounds as YOLOv5's files do
    height, width = shape
    xywh = xyxy2xywh(boxes[:, :4]) / torch.tensor([width, height, width, height], dtype=boxes.dtype)
    lines = []
    for (cx, cy, w, h), conf, cls in zip(xywh.tolist(), boxes[:, 4].tolist(), boxes[:, 5].tolist()):
        values = (int(cls), cx, cy, w, h, conf) if save_conf else (int(cls), cx, cy, w, h)
        lines.append(" ".join(f"{v:g}" for v in values))
    file.write_text("".join(f"{line}\n" for line in lines))
