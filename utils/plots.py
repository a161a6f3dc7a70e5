"""Drawing with OpenCV only: class colours, box labels, crops of detections and batch mosaics."""

import math
from pathlib import Path

import cv2
import numpy as np
import torch

from utils.boxes import xywh2xyxy, xyxy2xywh
from utils.log import LOGGER

# 20 well-separated RGB colours, cycled by class index.
_PALETTE_HEX = (
    "E6194B",
    "3CB44B",
    "FFE119",
    "4363D8",
    "F58231",
    "911EB4",
    "46F0F0",
    "F032E6",
    "BCF60C",
    "FABEBE",
    "008080",
    "E6BEFF",
    "9A6324",
    "FFD8B1",
    "800000",
    "AAFFC3",
    "808000",
    "FFC8A0",
    "000075",
    "FF6F61",
)
_PALETTE = [tuple(int(h[k : k + 2], 16) for k in (0, 2, 4)) for h in _PALETTE_HEX]
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def colors(i: int, bgr: bool = False) -> tuple[int, int, int]:
    """Colour for class i as an (R, G, B) tuple, or (B, G, R) for drawing on OpenCV images."""
    r, g, b = _PALETTE[int(i) % len(_PALETTE)]
    return (b, g, r) if bgr else (r, g, b)


def imwrite(file: str | Path, image: np.ndarray, params: list[int] | None = None) -> bool:
    """cv2.imwrite that also handles non-ASCII paths; True when the file was written, False (never an exception)
    when OpenCV has no encoder for the suffix or the file cannot be written."""
    try:
        ok, encoded = cv2.imencode(Path(file).suffix or ".jpg", image, params or [])
        if ok:
            encoded.tofile(str(file))
        return bool(ok)
    except (cv2.error, OSError):
        return False


def default_line_width(shape: tuple[int, ...]) -> int:
    """Box line width for an image of this (h, w, channels) shape when none is given, as YOLOv5 draws: 0.3% of the
    mean of its dimensions, at least 2 px (2 at 256x256 and 640x480, 3 at 1080x810, 6 at 1920x1920)."""
    return max(round(sum(shape) / 2 * 0.003), 2)


class Annotator:
    """Draws labelled boxes onto a BGR uint8 image in place; the label font scales with the line width."""

    def __init__(self, im: np.ndarray, line_width: int | None = None):
        if not im.flags.writeable or not im.flags.c_contiguous:
            im = np.ascontiguousarray(im).copy()
        self.im = im
        self.lw = line_width or default_line_width(im.shape)

    def box_label(
        self, box, label: str = "", color: tuple = (128, 128, 128), txt_color: tuple = (255, 255, 255)
    ) -> None:
        """Draw an xyxy box and, when label is given, the label on a filled tag above (or inside) it."""
        p1, p2 = (int(box[0]), int(box[1])), (int(box[2]), int(box[3]))
        cv2.rectangle(self.im, p1, p2, color, thickness=self.lw, lineType=cv2.LINE_AA)
        if label:
            self.label(p1, label, color, txt_color)

    def label(
        self, corner: tuple[int, int], text: str, color: tuple = (128, 128, 128), txt_color: tuple = (255, 255, 255)
    ) -> None:
        """A filled tag with text whose lower-left corner is at corner (moved inside when it would leave the image)."""
        scale, thickness = self.lw / 3, max(self.lw - 1, 1)
        (w, h), _ = cv2.getTextSize(text, _FONT, scale, thickness)
        x, y = corner
        outside = y - h - 3 >= 0  # room above the box for the tag
        top = y - h - 3 if outside else y
        bottom = y if outside else y + h + 3
        cv2.rectangle(self.im, (x, top), (x + w, bottom), color, -1, cv2.LINE_AA)
        cv2.putText(self.im, text, (x, bottom - 2), _FONT, scale, txt_color, thickness, cv2.LINE_AA)

    def text(self, xy: tuple[int, int], text: str, txt_color: tuple = (255, 255, 255)) -> None:
        """Plain text with its lower-left corner at xy."""
        cv2.putText(
            self.im, text, (int(xy[0]), int(xy[1])), _FONT, self.lw / 3, txt_color, max(self.lw - 1, 1), cv2.LINE_AA
        )

    def result(self) -> np.ndarray:
        """The annotated image."""
        return self.im


def _free_name(file: Path) -> Path:
    """file, or file with 2, 3, ... appended to its stem when it already exists."""
    if not file.exists():
        return file
    n = 2
    while (candidate := file.with_name(f"{file.stem}{n}{file.suffix}")).exists():
        n += 1
    return candidate


def save_one_box(
    xyxy,
    im: np.ndarray,
    file: str | Path = "im.jpg",
    gain: float = 1.02,
    pad: int = 10,
    square: bool = False,
    save: bool = True,
) -> np.ndarray:
    """Crop an xyxy box (grown by gain and pad pixels) from a BGR image; save it as a new jpg unless save=False."""
    box = xyxy2xywh(torch.as_tensor(xyxy, dtype=torch.float32).view(-1, 4))
    if square:
        box[:, 2:] = box[:, 2:].max(1, keepdim=True).values
    box[:, 2:] = box[:, 2:] * gain + pad
    x1, y1, x2, y2 = xywh2xyxy(box)[0].tolist()
    h, w = im.shape[:2]
    x1, x2 = (int(min(max(v, 0), w)) for v in (x1, x2))
    y1, y2 = (int(min(max(v, 0), h)) for v in (y1, y2))
    crop = im[y1:y2, x1:x2]
    if save and crop.size:
        file = Path(file).with_suffix(".jpg")
        file.parent.mkdir(parents=True, exist_ok=True)
        imwrite(_free_name(file), crop, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return crop


def _to_numpy(x) -> np.ndarray:
    return x.detach().cpu().float().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _class_name(names, cls: int) -> str:
    """names[cls] for a list or dict of names, else the index."""
    if isinstance(names, dict):
        return str(names.get(cls, cls))
    return str(names[cls]) if names is not None and 0 <= cls < len(names) else str(cls)


def _as_uint8_images(images) -> np.ndarray:
    """(B, 3, H, W) uint8 from uint8 or float images, tensors or arrays (floats in [0, 1] are scaled to 0-255,
    then clipped and truncated).

    Converted by torch in one threaded pass, uint8 kept as it is: numpy's float32 round trip of a (32, 3, 640, 640)
    validation batch took 3.3 s of CPU, a quarter of test.py's main thread with an INT8 model."""
    images = images.detach() if isinstance(images, torch.Tensor) else torch.as_tensor(np.asarray(images))
    if images.dtype != torch.uint8:
        images = images.float()
        scale = 255.0 if images.numel() == 0 or float(images.amax()) <= 1.0 else 1.0
        images = images.mul(scale).clamp_(0, 255).to(torch.uint8)  # .to truncates, as numpy's astype does
    return images.cpu().numpy()


def _tile(images: np.ndarray, ns: int, max_size: int) -> tuple[np.ndarray, float, int, int]:
    """(mosaic BGR, scale, tile h, tile w): the first ns*ns images on an ns x ns grid, shrunk to max_size."""
    bs, _, h, w = images.shape
    mosaic = np.full((ns * h, ns * w, 3), 255, dtype=np.uint8)
    for i in range(bs):
        y, x = (i // ns) * h, (i % ns) * w
        mosaic[y : y + h, x : x + w] = images[i].transpose(1, 2, 0)[..., ::-1]  # RGB CHW -> BGR HWC
    scale = max_size / ns / max(h, w)
    if scale >= 1:
        return mosaic, 1.0, h, w
    h, w = math.ceil(scale * h), math.ceil(scale * w)
    return cv2.resize(mosaic, (ns * w, ns * h), interpolation=cv2.INTER_AREA), scale, h, w


def _draw_tile_boxes(annotator, ti: np.ndarray, origin, tile_hw, scale: float, names, conf_thres: float) -> None:
    """Draw one tile's labels (n, 6) or predictions (n, 7); boxes normalised or in batch-image pixels."""
    (x, y), (h, w) = origin, tile_hw
    boxes = xywh2xyxy(ti[:, 2:6].astype(np.float32))
    if boxes.max() <= 1.01:  # normalised: to tile pixels
        boxes[:, [0, 2]] *= w
        boxes[:, [1, 3]] *= h
    elif scale < 1:  # pixels of the original batch images
        boxes *= scale
    boxes[:, [0, 2]] += x
    boxes[:, [1, 3]] += y
    for j, box in enumerate(boxes):
        cls = int(ti[j, 1])
        conf = float(ti[j, 6]) if ti.shape[1] == 7 else None
        if conf is not None and conf < conf_thres:
            continue
        name = _class_name(names, cls)
        label = name if conf is None else f"{name} {conf:.1f}"
        annotator.box_label(box, label, color=colors(cls, bgr=True))


def plot_images(
    images,
    targets,
    paths=None,
    fname: str | Path = "images.jpg",
    names=None,
    max_size: int = 1920,
    max_subplots: int = 16,
    conf_thres: float = 0.25,
) -> np.ndarray:
    """Write a mosaic jpg of a batch with its boxes; return the mosaic (BGR).

    images: (B, 3, H, W) RGB, uint8 or float in [0, 1]. targets: (n, 6) labels [batch_idx, cls, cx, cy, w, h]
    or (n, 7) predictions [batch_idx, cls, cx, cy, w, h, conf]; boxes normalised to [0, 1] or in pixels of
    the batch images. Predictions below conf_thres are not drawn.
    """
    images = _as_uint8_images(images[:max_subplots])
    targets = _to_numpy(targets).astype(np.float32)
    if targets.size == 0:
        targets = np.zeros((0, 6), dtype=np.float32)
    bs = len(images)
    ns = math.ceil(bs**0.5)  # tiles per side
    mosaic, scale, h, w = _tile(images, ns, max_size)
    annotator = Annotator(mosaic, line_width=max(round(sum(mosaic.shape[:2]) / 2 * 0.002), 1))
    for i in range(bs):
        x, y = (i % ns) * w, (i // ns) * h
        cv2.rectangle(annotator.im, (x, y), (x + w, y + h), (255, 255, 255), 2)
        if paths is not None and i < len(paths):
            annotator.text((x + 5, y + 5 + annotator.lw * 8), Path(str(paths[i])).name[:40], (220, 220, 220))
        ti = targets[targets[:, 0] == i]
        if len(ti):
            _draw_tile_boxes(annotator, ti, (x, y), (h, w), scale, names, conf_thres)
    fname = Path(fname)
    fname.parent.mkdir(parents=True, exist_ok=True)
    imwrite(fname, annotator.result(), [cv2.IMWRITE_JPEG_QUALITY, 90])
    return annotator.result()


def save_batch_plot(images, targets, paths, file: Path, names) -> None:
    """plot_images for run logs (train_batch*.jpg, val_batch*.jpg): a failure is a warning, never the end of a run."""
    try:
        plot_images(images, targets, paths, file, names)
    except Exception as e:  # a plot must never stop training or validation
        LOGGER.warning(f"WARNING: could not plot {Path(file).name}: {e}")
