"""Image geometry and augmentation: letterbox resizing (shared by inference and training) and training augmentation."""

import math
import random

import cv2
import numpy as np
import torch

from utils.log import LOGGER


def check_img_size(imgsz: int | list[int], stride: int = 32, floor: int = 0) -> int | list[int]:
    """Image size(s) rounded up to multiples of stride (and at least floor), with a warning when they change."""
    sizes = [int(imgsz)] if isinstance(imgsz, (int, float)) else [int(v) for v in imgsz]
    rounded = [max(-(-v // stride) * stride, stride, floor) for v in sizes]
    if rounded != sizes:
        shown = (sizes[0], rounded[0]) if isinstance(imgsz, (int, float)) else (sizes, rounded)
        LOGGER.warning(
            f"WARNING: --img-size {shown[0]} must be a multiple of max stride {stride}, updating to {shown[1]}"
        )
    return rounded[0] if isinstance(imgsz, (int, float)) else rounded


def letterbox(
    image: np.ndarray,
    new_shape: int | tuple[int, int] = 640,
    color: tuple[int, int, int] = (114, 114, 114),
    auto: bool = True,
    scaleup: bool = True,
    stride: int = 32,
) -> tuple[np.ndarray, tuple[float, float], tuple[float, float]]:
    """Resize keeping aspect ratio and pad to new_shape (h, w); with auto, pad only to a stride multiple.

    Returns the image, the (w, h) scale ratio and the (left, top) padding, each half of the total.
    """
    h, w = image.shape[:2]
    if isinstance(new_shape, int):
        new_shape = (new_shape, new_shape)
    r = min(new_shape[0] / h, new_shape[1] / w)
    if not scaleup:  # only shrink: better mAP for small images at test time
        r = min(r, 1.0)
    new_unpad = (int(round(w * r)), int(round(h * r)))
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]
    if auto:
        dw, dh = dw % stride, dh % stride
    dw, dh = dw / 2, dh / 2
    if (w, h) != new_unpad:
        image = cv2.resize(image, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    if top or bottom or left or right:
        image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=color)
    return image, (r, r), (dw, dh)


# ---------------------------------------------------------------------------------------------------------------------
# Training augmentation. Targets are (n, 5) float arrays [cls, x1, y1, x2, y2] in pixels unless noted otherwise.
# Randomness comes from Python's `random` and NumPy's global generator, both seeded per dataloader worker.


def augment_hsv(image: np.ndarray, hgain: float = 0.5, sgain: float = 0.5, vgain: float = 0.5) -> None:
    """Randomly scale hue, saturation and value of a BGR uint8 image in place (lookup tables: fast)."""
    if not (hgain or sgain or vgain):
        return
    gains = np.random.uniform(-1, 1, 3) * (hgain, sgain, vgain) + 1
    x = np.arange(256, dtype=np.float32)
    lut = np.empty((1, 256, 3), np.uint8)  # one table per channel, applied in one pass (no split and merge)
    lut[0, :, 0] = (x * gains[0]) % 180  # OpenCV hue wraps at 180
    lut[0, :, 1] = np.clip(x * gains[1], 0, 255)
    lut[0, :, 2] = np.clip(x * gains[2], 0, 255)
    hsv = cv2.cvtColor(image, cv2.COLOR_BGR2HSV)
    cv2.cvtColor(cv2.LUT(hsv, lut, dst=hsv), cv2.COLOR_HSV2BGR, dst=image)


def _tile_places(
    shapes: list[tuple[int, int]], canvas_size: int, center: tuple[int, int]
) -> list[tuple[int, int, int, int, int, int]]:
    """Where each of four (h, w) images goes on the (canvas_size, canvas_size) mosaic canvas around center:
    top-left, top-right, bottom-left, bottom-right, each touching the centre. Per tile (x1a, y1a, x2a, y2a, x1b,
    y1b): the canvas region it covers and the top-left corner of the matching crop of the image."""
    xc, yc = center
    places = []
    for i, (h, w) in enumerate(shapes):
        x1a = max(xc - w, 0) if i in (0, 2) else xc
        x2a = xc if i in (0, 2) else min(xc + w, canvas_size)
        y1a = max(yc - h, 0) if i in (0, 1) else yc
        y2a = yc if i in (0, 1) else min(yc + h, canvas_size)
        x1b = w - (x2a - x1a) if i in (0, 2) else 0
        y1b = h - (y2a - y1a) if i in (0, 1) else 0
        places.append((x1a, y1a, x2a, y2a, x1b, y1b))
    return places


def _place_targets(targets: list[np.ndarray], places: list[tuple], canvas_size: int) -> np.ndarray:
    """The tiles' pixel targets shifted onto the canvas and clipped to it, as one (n, 5) array."""
    placed = []
    for t, (x1a, y1a, _, _, x1b, y1b) in zip(targets, places):
        t = np.asarray(t, dtype=np.float32).reshape(-1, 5).copy()
        t[:, [1, 3]] += x1a - x1b
        t[:, [2, 4]] += y1a - y1b
        placed.append(t)
    out = np.concatenate(placed, 0)
    np.clip(out[:, 1:], 0, canvas_size, out=out[:, 1:])
    return out


def mosaic4(
    images: list[np.ndarray], targets: list[np.ndarray], size: int, center: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Tile four images around center (xc, yc) on a grey (2*size, 2*size) canvas: top-left, top-right,
    bottom-left, bottom-right, each touching the centre. Targets are per-image pixel [cls, x1, y1, x2, y2];
    the result's targets are shifted onto the canvas and clipped to it."""
    canvas_size = 2 * size
    canvas = np.full((canvas_size, canvas_size, images[0].shape[2]), 114, dtype=np.uint8)
    places = _tile_places([im.shape[:2] for im in images], canvas_size, center)
    for image, (x1a, y1a, x2a, y2a, x1b, y1b) in zip(images, places):
        canvas[y1a:y2a, x1a:x2a] = image[y1b : y1b + (y2a - y1a), x1b : x1b + (x2a - x1a)]
    return canvas, _place_targets(targets, places, canvas_size)


def _source_window(inverse: np.ndarray, out_shape: tuple[int, int], canvas_size: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1): the part of the canvas an output of out_shape (h, w) reads through the inverse warp,
    with 2 pixels of margin for bilinear interpolation, clipped to the canvas (at least 1x1)."""
    h, w = out_shape
    corners = np.array([[0, 0, 1], [w, 0, 1], [0, h, 1], [w, h, 1]], dtype=np.float64) @ inverse.T
    xy = corners[:, :2] / corners[:, 2:3]
    x0, y0 = (int(np.clip(math.floor(v) - 2, 0, canvas_size - 1)) for v in xy.min(0))
    x1, y1 = (int(np.clip(math.ceil(v) + 3, x + 1, canvas_size)) for v, x in zip(xy.max(0), (x0, y0)))
    return x0, y0, x1, y1


def mosaic_warp(
    images: list[np.ndarray], targets: list[np.ndarray], size: int, center: tuple[int, int], **warp: float
) -> tuple[np.ndarray, np.ndarray]:
    """mosaic4 then random_perspective(border=(-size/2, -size/2)) in one go, with the same random draws and the
    same pixels, but building only the part of the (2*size)^2 canvas that the warp reads (on average a third of it
    at the default scale gain 0.5): the grey fill and the tile copies shrink with it. warp: random_perspective's
    degrees, translate, scale, shear and perspective."""
    image, matrix, s, places = mosaic_warp_image(images, size, center, **warp)
    targets = _place_targets(targets, places, 2 * size)
    return image, _warp_and_filter(targets, matrix, s, (size, size))


def mosaic_warp_image(
    images: list[np.ndarray],
    size: int,
    center: tuple[int, int],
    degrees: float = 10,
    translate: float = 0.1,
    scale: float = 0.1,
    shear: float = 10,
    perspective: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, float, list[tuple]]:
    """mosaic_warp's pixels: (the warped (size, size) image, the 3x3 canvas -> output matrix, its scale, each
    tile's place on the canvas (see _tile_places)), for the caller to move its labels with."""
    canvas_size = 2 * size
    places = _tile_places([im.shape[:2] for im in images], canvas_size, center)
    out_shape = (size, size)
    matrix, s = perspective_matrix((canvas_size, canvas_size), out_shape, degrees, translate, scale, shear, perspective)
    inverse = np.linalg.inv(matrix) if perspective else np.vstack((cv2.invertAffineTransform(matrix[:2]), (0, 0, 1)))
    x0, y0, x1, y1 = _source_window(inverse, out_shape, canvas_size)
    bgr = images[0].shape[2] == 3  # then built with a 4th channel, to be warped as 4 channels (see _warp_pixels)
    window = np.full((y1 - y0, x1 - x0, 4 if bgr else images[0].shape[2]), 114, dtype=np.uint8)
    for image, (x1a, y1a, x2a, y2a, x1b, y1b) in zip(images, places):
        ax1, ay1, ax2, ay2 = max(x1a, x0), max(y1a, y0), min(x2a, x1), min(y2a, y1)
        if ax1 < ax2 and ay1 < ay2:  # the part of this tile inside the window
            bx, by = x1b + ax1 - x1a, y1b + ay1 - y1a
            tile, dst = (
                image[by : by + ay2 - ay1, bx : bx + ax2 - ax1],
                window[ay1 - y0 : ay2 - y0, ax1 - x0 : ax2 - x0],
            )
            if bgr:
                cv2.cvtColor(tile, cv2.COLOR_BGR2BGRA, dst=dst)
            else:
                dst[:] = tile
    inverse[0] -= x0 * inverse[2]  # output -> window pixels instead of output -> canvas pixels
    inverse[1] -= y0 * inverse[2]
    image = _warp_pixels(window, inverse, out_shape, bool(perspective), cv2.WARP_INVERSE_MAP)
    if bgr:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    return image, matrix, s, places


def _warp_pixels(image: np.ndarray, matrix: np.ndarray, out_shape: tuple[int, int], perspective: bool, flags=0):
    """Bilinear warp with grey borders to (h, w) out_shape: warpPerspective, or warpAffine with the matrix's first
    two rows. A 3-channel image goes through as 4 channels: the same pixels (channels are interpolated
    independently), but OpenCV's 4-channel code is about twice as fast as its 3-channel one."""
    three = image.ndim == 3 and image.shape[2] == 3
    src = cv2.cvtColor(image, cv2.COLOR_BGR2BGRA) if three else image
    size, flags = (out_shape[1], out_shape[0]), flags | cv2.INTER_LINEAR
    if perspective:
        out = cv2.warpPerspective(src, matrix, dsize=size, flags=flags, borderValue=(114, 114, 114, 114))
    else:
        out = cv2.warpAffine(src, matrix[:2], dsize=size, flags=flags, borderValue=(114, 114, 114, 114))
    return cv2.cvtColor(out, cv2.COLOR_BGRA2BGR) if three else out


def perspective_matrix(
    in_shape: tuple[int, int],
    out_shape: tuple[int, int],
    degrees: float = 0.0,
    translate: float = 0.1,
    scale: float = 0.5,
    shear: float = 0.0,
    perspective: float = 0.0,
) -> tuple[np.ndarray, float]:
    """Random 3x3 warp from an (h, w) image to an (h, w) output, and its scale factor.

    Order: centre the input on the origin, perspective, rotate + scale, shear, then translate to the output
    centre plus a random offset of up to `translate` of the output size.
    """
    centre = np.eye(3)
    centre[0, 2], centre[1, 2] = -in_shape[1] / 2, -in_shape[0] / 2
    persp = np.eye(3)
    persp[2, 0], persp[2, 1] = np.random.uniform(-perspective, perspective, 2)
    rot = np.eye(3)
    angle = random.uniform(-degrees, degrees)
    s = random.uniform(1 - scale, 1 + scale)
    rot[:2] = cv2.getRotationMatrix2D(center=(0, 0), angle=angle, scale=s)
    sh = np.eye(3)
    sh[0, 1] = math.tan(math.radians(random.uniform(-shear, shear)))
    sh[1, 0] = math.tan(math.radians(random.uniform(-shear, shear)))
    move = np.eye(3)
    move[0, 2] = random.uniform(0.5 - translate, 0.5 + translate) * out_shape[1]
    move[1, 2] = random.uniform(0.5 - translate, 0.5 + translate) * out_shape[0]
    return move @ sh @ rot @ persp @ centre, s


def warp_targets(targets: np.ndarray, matrix: np.ndarray, out_shape: tuple[int, int]) -> np.ndarray:
    """Warp pixel boxes [cls, x1, y1, x2, y2] with a 3x3 matrix: the enclosing box of the moved corners,
    clipped to the (h, w) output."""
    n = len(targets)
    if not n:
        return targets.reshape(0, 5).astype(np.float32)
    corners = np.ones((n * 4, 3))
    corners[:, :2] = targets[:, [1, 2, 3, 4, 1, 4, 3, 2]].reshape(n * 4, 2)  # x1y1, x2y2, x1y2, x2y1
    moved = corners @ matrix.T
    xy = (moved[:, :2] / moved[:, 2:3] if matrix[2, 0] or matrix[2, 1] else moved[:, :2]).reshape(n, 8)
    x, y = xy[:, 0::2], xy[:, 1::2]
    boxes = np.stack((x.min(1), y.min(1), x.max(1), y.max(1)), 1)
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, out_shape[1])
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, out_shape[0])
    return np.concatenate((targets[:, :1], boxes), 1).astype(np.float32)


def box_candidates(
    box1: np.ndarray,
    box2: np.ndarray,
    wh_thr: float = 2,
    ar_thr: float = 100,
    area_thr: float = 0.1,
    eps: float = 1e-16,
) -> np.ndarray:
    """Boxes (4, n) x1y1x2y2 before (box1, already scaled) and after (box2) augmentation: keep those still
    wider/taller than wh_thr px, with more than area_thr of their area left and aspect ratio under ar_thr."""
    w1, h1 = box1[2] - box1[0], box1[3] - box1[1]
    w2, h2 = box2[2] - box2[0], box2[3] - box2[1]
    aspect = np.maximum(w2 / (h2 + eps), h2 / (w2 + eps))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + eps) > area_thr) & (aspect < ar_thr)


def random_perspective(
    image: np.ndarray,
    targets: np.ndarray = (),
    degrees: float = 10,
    translate: float = 0.1,
    scale: float = 0.1,
    shear: float = 10,
    perspective: float = 0.0,
    border: tuple[int, int] = (0, 0),
) -> tuple[np.ndarray, np.ndarray]:
    """Random rotation, scale, shear, translation and perspective of an image and its pixel targets.

    The output is the input size plus 2 * border (h, w); a negative border crops (mosaic: 2s -> s).
    Boxes that become too small, too thin or mostly cut off are dropped.
    """
    out_shape = (image.shape[0] + 2 * border[0], image.shape[1] + 2 * border[1])
    matrix, s = perspective_matrix(image.shape[:2], out_shape, degrees, translate, scale, shear, perspective)
    if any(border) or not np.array_equal(matrix, np.eye(3)):
        image = _warp_pixels(image, matrix, out_shape, bool(perspective))
    return image, _warp_and_filter(targets, matrix, s, out_shape)


def _warp_and_filter(targets, matrix: np.ndarray, s: float, out_shape: tuple[int, int]) -> np.ndarray:
    """Pixel targets through the warp, without those it made too small, too thin or mostly cut off."""
    targets = np.asarray(targets, dtype=np.float32).reshape(-1, 5)
    if len(targets):
        new = warp_targets(targets, matrix, out_shape)
        keep = box_candidates(targets[:, 1:5].T * s, new[:, 1:5].T, area_thr=0.10)
        targets = new[keep]
    return targets


def mixup(
    image: np.ndarray, labels: np.ndarray, image2: np.ndarray, labels2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Blend two same-size images with a Beta(32, 32) ratio and keep both label sets (MixUp)."""
    r = np.random.beta(32.0, 32.0)
    blended = cv2.addWeighted(image, r, image2, 1 - r, 0)
    return blended, np.concatenate((labels, labels2), 0)


def random_flip(
    image: np.ndarray, labels: np.ndarray, fliplr: float = 0.5, flipud: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Flip left-right / up-down with the given probabilities; labels are normalised [cls, cx, cy, w, h]."""
    if flipud and random.random() < flipud:
        image = np.flipud(image)
        if len(labels):
            labels[:, 2] = 1 - labels[:, 2]
    if fliplr and random.random() < fliplr:
        image = np.fliplr(image)
        if len(labels):
            labels[:, 1] = 1 - labels[:, 1]
    return image, labels


def to_chw_rgb(image: np.ndarray) -> torch.Tensor:
    """An HWC BGR uint8 image (any strides: flips are views) as a contiguous CHW RGB tensor, in one copy."""
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)[::-1]))
