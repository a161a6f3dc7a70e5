"""The training and validation dataset: verified images and labels (through the cache), letterbox, rectangular
batches, mosaic and the other augmentations, and the images --image-weights draws.
"""

import contextlib
import math
import os
import random
import secrets
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import Dataset, get_worker_info

from utils.boxes import xywhn2xyxy, xyxy2xywhn
from utils.data.augment import (
    augment_hsv,
    letterbox,
    mixup,
    mosaic_warp,
    random_flip,
    random_perspective,
    to_chw_rgb,
)
from utils.data.cache import (
    _load_npy,
    _npy_path,
    _own_cache_folder,
    _prune_image_cache,
    image_cache_dirs,
)
from utils.data.hyp import load_hyp
from utils.data.label_loading import load_split_labels, no_labels_message
from utils.data.segments import polygon_item
from utils.data.verify import img2label_paths, list_image_files
from utils.errors import DatasetError
from utils.files import DATA_DIR
from utils.images import (
    read_image,
)
from utils.log import LOGGER

LABEL_ROWS = ("box", "polygon")  # a model task's label_rows: what a label row is read as
cv2.setNumThreads(0)  # dataloader workers parallelise; OpenCV's own threads would oversubscribe the cores
BUFFER_PER_BATCH_IMAGE, BUFFER_MAX = 8, 1000  # decoded-image buffer: 8 images per batch image, at most 1000


class LoadImagesAndLabels(Dataset):
    """Images with YOLO labels for training and validation (letterbox, rectangular batches, mosaic).

    nc (optional, beyond YOLOv5's arguments) rejects label files with classes outside [0, nc) as corrupt.
    label_rows: what a model learns from a label row, 'box' or 'polygon' (a segment model: self.segments holds each
    row's polygon, and items carry one mask per row; utils.data.segments).
    """

    def __init__(
        self,
        path,
        img_size: int = 640,
        batch_size: int = 16,
        augment: bool = False,
        hyp: dict | None = None,
        rect: bool = False,
        cache: str | bool | None = None,
        single_cls: bool = False,
        stride: int = 32,
        pad: float = 0.0,
        prefix: str = "",
        nc: int | None = None,
        label_rows: str = "box",
    ):
        if label_rows not in LABEL_ROWS:
            raise DatasetError(f"label_rows must be one of {', '.join(LABEL_ROWS)}, got {label_rows!r}"[:300])
        self.label_rows = label_rows
        self.img_size, self.augment, self.rect, self.stride, self.prefix = img_size, augment, rect, stride, prefix
        self.hyp = hyp if hyp is not None or not augment else load_hyp(DATA_DIR / "hyp.scratch.yaml")
        self.mosaic = augment and not rect  # mosaic mixes images, so it cannot keep rectangular batches
        self.mosaic_border = [-img_size // 2, -img_size // 2]
        self.path = path
        files = list_image_files(path, prefix)
        # classes are checked against nc; without it (or with single_cls, which merges them) only negatives fail
        self.nc = nc if nc is not None and not single_cls else 1 << 30
        self.im_files, self.labels, shapes = self._load_labels(files, img2label_paths(files))
        if not self.im_files:
            raise DatasetError(f"{prefix}no usable images in {path}: all are corrupt")
        if single_cls:
            for lb in self.labels:
                lb[:, 0] = 0
        self.label_files = img2label_paths(self.im_files)
        self.shapes = np.array(shapes, dtype=np.int64).reshape(-1, 2)  # (w, h)
        n = len(self.im_files)
        self.batch = np.arange(n) // batch_size  # batch index of each image
        self.indices = range(n)
        self.batch_shapes = None
        if rect:
            self._rect_shapes(batch_size, pad)
        self._bad: set[int] = set()
        self.ims = [None] * n
        self.npy_files: list[str | None] = [None] * n  # --cache disk: each image's .npy in our cache folder
        self._buffer: OrderedDict[int, tuple] = OrderedDict()
        self.buffer_size = 0
        self.cache_mode = self._cache_images(cache)
        # mosaic training: each process (each loader worker) keeps the images it decoded last, so that most of a
        # mosaic's tiles skip decoding; not with every image already in RAM
        if self.mosaic and self.cache_mode != "ram":
            self.buffer_size = min(n, batch_size * BUFFER_PER_BATCH_IMAGE, BUFFER_MAX)

    # -- labels --------------------------------------------------------------------------------------------------------
    def _load_labels(self, im_files: list[str], lb_files: list[str]) -> tuple[list[str], list[np.ndarray], list]:
        """Verified (images, labels, shapes), from the cache when its hash matches (utils.data.label_loading)."""
        im_files, labels, shapes, self.cache_places, self.segments = load_split_labels(
            self.path, im_files, lb_files, self.nc, self.prefix, polygons=self.label_rows == "polygon"
        )  # the disk image cache goes beside whichever of cache_places is usable
        return im_files, labels, shapes

    def _no_labels_message(self, im_files) -> str:
        """Why the split has no box (no label files, only empty ones, annotations without a usable box)."""
        return no_labels_message(self.path, im_files)

    def _rect_shapes(self, batch_size: int, pad: float) -> None:
        """Sort images by aspect ratio and give each batch the smallest stride-multiple shape that fits it."""
        aspect = self.shapes[:, 1] / self.shapes[:, 0]  # h / w
        # numpy's default (unstable) sort, as YOLOv5: images with tied ratios then land in the same batches
        order = aspect.argsort()
        self.im_files = [self.im_files[i] for i in order]
        self.labels = [self.labels[i] for i in order]
        if self.segments is not None:
            self.segments = [self.segments[i] for i in order]
        self.label_files = [self.label_files[i] for i in order]
        self.shapes, aspect = self.shapes[order], aspect[order]
        n_batches = int(self.batch[-1]) + 1
        shapes = np.ones((n_batches, 2))  # (h, w) relative to img_size
        for i in range(n_batches):
            ar = aspect[self.batch == i]
            if ar.max() < 1:  # all landscape: full width, height of the tallest
                shapes[i] = (ar.max(), 1)
            elif ar.min() > 1:  # all portrait: full height, width of the widest
                shapes[i] = (1, 1 / ar.min())
        self.batch_shapes = np.ceil(shapes * self.img_size / self.stride + pad).astype(int) * self.stride

    # -- images --------------------------------------------------------------------------------------------------------
    def _cache_images(self, cache) -> str | None:
        """Fill the RAM cache or write .npy files for --cache ram/disk; returns the mode in effect."""
        mode = "ram" if cache is True else (cache or None)
        if mode not in (None, "ram", "disk"):
            raise DatasetError(f"cache must be 'ram', 'disk' or None, got {cache!r}")
        if mode == "disk":
            folder = next((d for d in image_cache_dirs(self.cache_places) if _own_cache_folder(d)), None)
            if folder is None:
                places = ", ".join(str(d) for d in image_cache_dirs(self.cache_places))
                LOGGER.warning(f"{self.prefix}WARNING: no folder of ours to write to ({places}), --cache disk disabled")
                return None
            self.npy_files = [_npy_path(folder, f) for f in self.im_files]
            todo = _prune_image_cache(folder, self.npy_files)
            with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
                for i in todo:
                    pool.submit(self._write_npy, i)
            LOGGER.info(f"{self.prefix}Disk image cache: {folder} ({len(todo)} images written)")
        elif mode == "ram":
            if not self._ram_fits():
                return None
            with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
                for i, loaded in enumerate(pool.map(self.load_image, range(len(self.im_files)))):
                    self.ims[i] = loaded
            gb = sum(x[0].nbytes for x in self.ims) / 1e9
            LOGGER.info(f"{self.prefix}Cached {len(self.ims)} images in RAM ({gb:.2f} GB)")
        return mode

    def _write_npy(self, i: int) -> None:
        """The decoded image into its cache file (a new temporary file of ours, then renamed into our folder)."""
        im, target = read_image(self.im_files[i]), self.npy_files[i]
        if im is None or target is None:
            return
        tmp = f"{target}.{secrets.token_hex(4)}.tmp"
        try:
            with open(tmp, "xb") as f:
                np.save(f, im, allow_pickle=False)
            os.replace(tmp, target)
        except OSError:  # disk full: the image is read from its file instead
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _ram_fits(self) -> bool:
        """Estimate the RAM cache size from the image shapes; refuse it above 90% of free memory."""
        scale = self.img_size / self.shapes.max(1)
        need = float((self.shapes.prod(1) * scale**2 * 3).sum())
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # not Linux: trust the user
            return True
        if need > 0.9 * free:
            LOGGER.warning(
                f"{self.prefix}WARNING: --cache ram needs {need / 1e9:.1f} GB but {free / 1e9:.1f} GB "
                f"is free, not caching"
            )
            return False
        return True

    def buffer_bytes(self) -> int:
        """The decoded-image buffer's largest size in bytes (its largest images, resized), per process."""
        if not self.buffer_size:
            return 0
        resized = self.shapes.prod(1) * (self.img_size / self.shapes.max(1)) ** 2 * 3
        return int(np.sort(resized)[-self.buffer_size :].sum())

    def load_image(self, i: int) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        """Image i as BGR uint8 resized so its long side is img_size: (image, (h0, w0), (h, w)). Read-only for
        callers: it may be the RAM cache's or the buffer's."""
        if self.ims[i] is not None:
            return self.ims[i]
        if i in self._buffer:
            return self._buffer[i]
        loaded = self._read_resized(i)
        if self.buffer_size:
            # first in, first out: a hit does not keep an image longer, or mosaics would favour the images
            # they already drew
            self._buffer[i] = loaded
            if len(self._buffer) > self.buffer_size:
                self._buffer.popitem(last=False)
        return loaded

    def _read_resized(self, i: int) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
        """Image i decoded (from its .npy with --cache disk) and resized, as load_image returns it."""
        im = _load_npy(self.npy_files[i], self.shapes[i]) if self.npy_files[i] else None
        if im is None:
            im = read_image(self.im_files[i])
        if im is None:  # it was fine when verified; keep training on a grey placeholder rather than crash
            if i not in self._bad:
                LOGGER.warning(f"{self.prefix}WARNING: {self.im_files[i]} could not be read, using a blank image")
            self._bad.add(i)
            w0, h0 = (int(v) for v in self.shapes[i])
            im = np.full((h0, w0, 3), 114, np.uint8)
        h0, w0 = im.shape[:2]
        r = self.img_size / max(h0, w0)
        if r != 1:
            interp = cv2.INTER_LINEAR if (self.augment or r > 1) else cv2.INTER_AREA
            # ceil, as YOLOv5: official weights then see the very pixels they were validated on
            im = cv2.resize(im, (max(1, math.ceil(w0 * r)), max(1, math.ceil(h0 * r))), interpolation=interp)
        return im, (h0, w0), im.shape[:2]

    def _labels(self, i: int) -> np.ndarray:
        return np.zeros((0, 5), np.float32) if i in self._bad else self.labels[i].copy()

    def close_mosaic(self) -> None:
        """No more mosaic (nor MixUp, which blends mosaics): single letterboxed images, still warped, coloured and
        flipped (the anchor-free models' last close_mosaic epochs). Loader workers already started keep their own
        copy of the dataset: the caller starts new ones."""
        self.mosaic = False
        self.buffer_size = 0  # the buffer serves mosaics: its memory goes with them
        self._buffer.clear()

    def load_mosaic(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Four images (this one and three random ones) tiled around a random centre, then randomly warped
        to img_size x img_size: (BGR image, pixel [cls, x1, y1, x2, y2] labels)."""
        s = self.img_size
        xc, yc = (int(random.uniform(-b, 2 * s + b)) for b in self.mosaic_border)
        indices = [index] + self._mosaic_partners(index)
        random.shuffle(indices)
        images, targets = [], []
        for i in indices:
            im, _, (h, w) = self.load_image(i)
            labels = self._labels(i)
            if len(labels):
                labels[:, 1:] = xywhn2xyxy(labels[:, 1:], w, h)
            images.append(im)
            targets.append(labels)
        return mosaic_warp(images, targets, s, (xc, yc), **self._warp_args())

    def _mosaic_partners(self, index: int) -> list[int]:
        """A mosaic's other three images: drawn from all images (as YOLOv5) while the dataset fits the buffer
        (or the buffer is not full yet); otherwise three distinct buffered ones other than `index` (as Ultralytics
        draws from its buffer, but never repeating an image in one mosaic), already decoded. The buffer holds the
        images this process loaded last, a uniform random subset when the epoch is shuffled: each tile is still any
        image with equal odds, and a mosaic's four images are distinct, as they nearly always are when drawn from a
        large dataset."""
        full = self.buffer_size and len(self._buffer) == self.buffer_size < len(self.indices)
        if not full:
            return random.choices(self.indices, k=3)
        return random.sample([i for i in self._buffer if i != index], k=3)

    def _warp_args(self) -> dict[str, float]:
        """The random_perspective hyperparameters."""
        return {k: self.hyp[k] for k in ("degrees", "translate", "scale", "shear", "perspective")}

    # -- Dataset protocol ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.im_files)

    def __getitem__(self, index: int):
        """(image uint8 (3, H, W) RGB, labels (n, 6) [0, cls, cx, cy, w, h] normalised, path, shapes or None) of
        image self.indices[index]: the identity, or the images --image-weights drew for this epoch. With
        label_rows 'polygon', a 5-tuple ending with the (n, H // 4, W // 4) uint8 masks (utils.data.segments)."""
        if self.segments is not None:
            return polygon_item(self, index)
        index = self.indices[index]
        hyp = self.hyp
        if self.mosaic and random.random() < hyp["mosaic"]:
            img, labels = self.load_mosaic(index)
            shapes = None
            if random.random() < hyp["mixup"]:
                img, labels = mixup(img, labels, *self.load_mosaic(random.choice(self.indices)))
        else:
            loaded, (h0, w0), (h, w) = self.load_image(index)
            shape = self.batch_shapes[self.batch[index]] if self.rect else self.img_size
            img, ratio, pad = letterbox(loaded, shape, auto=False, scaleup=self.augment)
            if self.augment and img is loaded:
                img = img.copy()  # colour augmentation works in place: keep the RAM cache and the buffer pristine
            shapes = (h0, w0), ((ratio[1] * h / h0, ratio[0] * w / w0), pad)  # for utils.boxes.scale_boxes
            labels = self._labels(index)
            if len(labels):
                labels[:, 1:] = xywhn2xyxy(labels[:, 1:], ratio[0] * w, ratio[1] * h, padw=pad[0], padh=pad[1])
            if self.augment:
                img, labels = random_perspective(img, labels, **self._warp_args())
        n = len(labels)
        if n:
            labels[:, 1:5] = xyxy2xywhn(labels[:, 1:5], w=img.shape[1], h=img.shape[0], clip=True)
        if self.augment:
            augment_hsv(img, hgain=hyp["hsv_h"], sgain=hyp["hsv_s"], vgain=hyp["hsv_v"])
            img, labels = random_flip(img, labels, fliplr=hyp["fliplr"], flipud=hyp["flipud"])
        labels_out = torch.zeros((n, 6))
        if n:
            labels_out[:, 1:] = torch.from_numpy(np.asarray(labels, dtype=np.float32))
        return to_chw_rgb(img), labels_out, self.im_files[index], shapes

    @staticmethod
    def collate_fn(batch):
        """Stack images; concatenate labels with the image's index in the batch in column 0. In a loader worker
        the images are stacked straight into shared memory, where the batch has to go to reach the main process
        (otherwise it is copied there once more). Items with masks (label_rows 'polygon'): their masks
        concatenated as a 5th element, row j belonging to label row j."""
        imgs, labels, paths, shapes, *masks = zip(*batch)
        for i, lb in enumerate(labels):
            lb[:, 0] = i
        collated = _stack(imgs), torch.cat(labels, 0), paths, shapes
        return (*collated, torch.cat(masks[0], 0)) if masks else collated

    @staticmethod
    def collate_quad(batch: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, tuple, tuple]:
        """--quad: each group of 4 consecutive images becomes one image of twice the side, either the group's first
        image upsampled 2x or the 4 tiled 2x2 (even odds), labels following; a last group of 1-3 images (only in an
        epoch's last batch) is always upsampled. Same structure as collate_fn, ceil(len(batch) / 4) images, each
        with its first image's path and shapes None (no longer one letterboxed original)."""
        imgs, labels, paths, _ = zip(*batch)
        out_imgs, out_labels, out_paths = [], [], []
        for start in range(0, len(imgs), 4):
            group, group_labels = imgs[start : start + 4], labels[start : start + 4]
            same_size = all(im.shape == group[0].shape for im in group)
            if len(group) < 4 or not same_size or random.random() < 0.5:
                image, lb = _upsample_2x(group[0]), group_labels[0].clone()
            else:
                image, lb = _tile_2x2(group, group_labels)
            lb[:, 0] = len(out_imgs)
            out_imgs.append(image)
            out_labels.append(lb)
            out_paths.append(paths[start])
        return torch.stack(out_imgs, 0), torch.cat(out_labels, 0), tuple(out_paths), (None,) * len(out_imgs)


def _stack(tensors) -> torch.Tensor:
    """torch.stack, into shared memory when called in a loader worker (as torch's default collate does)."""
    if get_worker_info() is None:
        return torch.stack(tensors, 0)
    first = tensors[0]
    storage = first.untyped_storage()._new_shared(len(tensors) * first.numel() * first.element_size())
    out = first.new(storage).resize_(len(tensors), *first.shape)
    return torch.stack(tensors, 0, out=out)


def _upsample_2x(image: torch.Tensor) -> torch.Tensor:
    """A uint8 (3, H, W) image at (3, 2H, 2W), bilinear; its normalised labels stay valid as they are."""
    big = F.interpolate(image[None].float(), scale_factor=2.0, mode="bilinear", align_corners=False)[0]
    return big.round_().clamp_(0, 255).to(torch.uint8)


def _tile_2x2(images: tuple, labels: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """Four equal-size (3, H, W) images tiled in reading order (top-left, top-right, bottom-left, bottom-right)
    into one (3, 2H, 2W) image, with their [i, cls, cx, cy, w, h] labels renormalised to it."""
    top, bottom = torch.cat(images[:2], 2), torch.cat(images[2:], 2)
    moved = []
    for k, lb in enumerate(labels):
        lb = lb.clone()
        lb[:, 2] = (lb[:, 2] + k % 2) / 2  # column offset, then half the width
        lb[:, 3] = (lb[:, 3] + k // 2) / 2  # row offset, then half the height
        lb[:, 4:6] /= 2
        moved.append(lb)
    return torch.cat((top, bottom), 1), torch.cat(moved, 0)
