"""A segment dataset's items (LoadImagesAndLabels with label_rows 'polygon'): the image and its labels as for
boxes, each label row's polygon moved through the same letterbox and augmentations, then drawn as one mask per row
at the prototype resolution (utils.data.polygons.MASK_RATIO).
"""

import random

import numpy as np
import torch

from utils.boxes import xywhn2xyxy, xyxy2xywhn
from utils.data.augment import _place_targets, augment_hsv, letterbox, mixup, mosaic_warp_image, to_chw_rgb
from utils.data.augment_segments import (
    _with_polygon_boxes,
    copy_paste,
    flip_polygons,
    perspective_polygons,
    place_polygons,
    warp_polygons,
)
from utils.data.polygons import polygons_to_masks

Targets = tuple[np.ndarray, list[np.ndarray]]  # pixel [cls, x1, y1, x2, y2] rows and their pixel polygons


def _pixel_targets(ds, i: int, w: float, h: float, pad: tuple[float, float] = (0.0, 0.0)) -> Targets:
    """Image i's labels and polygons in the pixels of its (w, h) resized copy, moved by pad (a letterbox's)."""
    if i in ds._bad:  # an unreadable image trains as a blank one, without its labels
        return np.zeros((0, 5), np.float32), []
    labels = ds.labels[i].copy()
    if len(labels):
        labels[:, 1:] = xywhn2xyxy(labels[:, 1:], w, h, padw=pad[0], padh=pad[1])
    scale, shift = np.array([w, h], np.float64), np.array(pad, np.float64)
    return labels, [p.astype(np.float64) * scale + shift for p in ds.segments[i]]


def load_mosaic_polygons(ds, index: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """LoadImagesAndLabels.load_mosaic (same random draws, same pixels) with each row's polygon: (image, pixel
    labels, pixel polygons)."""
    s = ds.img_size
    xc, yc = (int(random.uniform(-b, 2 * s + b)) for b in ds.mosaic_border)
    indices = [index] + ds._mosaic_partners(index)
    random.shuffle(indices)
    images, targets, polygons = [], [], []
    for i in indices:
        im, _, (h, w) = ds.load_image(i)
        labels, tile_polygons = _pixel_targets(ds, i, w, h)
        images.append(im)
        targets.append(labels)
        polygons.append(tile_polygons)
    image, matrix, scale, places = mosaic_warp_image(images, s, (xc, yc), **ds._warp_args())
    placed = place_polygons(polygons, places, 2 * s)
    labels = _with_polygon_boxes(_place_targets(targets, places, 2 * s), [p for t in polygons for p in t], placed)
    return (image, *warp_polygons(labels, placed, matrix, scale, (s, s)))


def _mosaic_item(ds, index: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """A mosaic with its targets, mixed up with a second one (hyp mixup) and copy-pasted (hyp copy_paste)."""
    image, labels, polygons = load_mosaic_polygons(ds, index)
    if random.random() < ds.hyp["mixup"]:
        image2, labels2, polygons2 = load_mosaic_polygons(ds, random.choice(ds.indices))
        image, labels = mixup(image, labels, image2, labels2)
        polygons = polygons + polygons2
    return copy_paste(image, labels, polygons, ds.hyp.get("copy_paste", 0.0))


def _letterbox_item(ds, index: int):
    """Image index letterboxed (to its batch's shape with rect), warped when augmenting: (image, labels, polygons,
    shapes for utils.boxes.scale_boxes)."""
    loaded, (h0, w0), (h, w) = ds.load_image(index)
    shape = ds.batch_shapes[ds.batch[index]] if ds.rect else ds.img_size
    image, ratio, pad = letterbox(loaded, shape, auto=False, scaleup=ds.augment)
    if ds.augment and image is loaded:
        image = image.copy()  # colour augmentation works in place: keep the RAM cache and the buffer pristine
    shapes = (h0, w0), ((ratio[1] * h / h0, ratio[0] * w / w0), pad)
    labels, polygons = _pixel_targets(ds, index, ratio[0] * w, ratio[1] * h, pad)
    if ds.augment:
        image, labels, polygons = perspective_polygons(image, labels, polygons, **ds._warp_args())
    return image, labels, polygons, shapes


def polygon_item(ds, index: int):
    """LoadImagesAndLabels.__getitem__ for label_rows 'polygon': (image uint8 (3, H, W) RGB, labels (n, 6)
    [0, cls, cx, cy, w, h] normalised, path, shapes or None, masks uint8 (n, H // 4, W // 4)), mask j drawn from
    label row j's polygon (empty for a box-only row)."""
    index = ds.indices[index]
    hyp = ds.hyp
    if ds.mosaic and random.random() < hyp["mosaic"]:
        image, labels, polygons = _mosaic_item(ds, index)
        shapes = None
    else:
        image, labels, polygons, shapes = _letterbox_item(ds, index)
    h, w = image.shape[:2]
    n = len(labels)
    size = np.array([w, h], np.float64)
    polygons = [p / size for p in polygons]  # normalised: flips work on normalised rows
    if n:
        labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], w=w, h=h, clip=True)
    if ds.augment:
        augment_hsv(image, hgain=hyp["hsv_h"], sgain=hyp["hsv_s"], vgain=hyp["hsv_v"])
        image = flip_polygons(image, labels, polygons, fliplr=hyp["fliplr"], flipud=hyp["flipud"])
    masks = polygons_to_masks([p * size for p in polygons], (h, w))
    labels_out = torch.zeros((n, 6))
    if n:
        labels_out[:, 1:] = torch.from_numpy(np.asarray(labels, dtype=np.float32))
    return to_chw_rgb(image), labels_out, ds.im_files[index], shapes, torch.from_numpy(masks)
