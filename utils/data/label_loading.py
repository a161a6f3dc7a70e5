"""A split's labels for LoadImagesAndLabels: from the label cache when it matches the files, else every image
verified with its labels (YOLO label files, or rows converted from a COCO JSON / VOC split) and cached; the summary
and the reason a split has no box logged.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from utils.data.annotations import AnnotatedSplit
from utils.data.cache import CACHE_VERSION, _files_hash, _load_cache, _save_cache, label_cache_paths
from utils.data.verify import img2label_paths, verify_image_label, verify_image_rows
from utils.log import LOGGER


def load_split_labels(
    path, im_files: list[str], lb_files: list[str], nc: int, prefix: str = "", polygons: bool = False
) -> tuple[list[str], list[np.ndarray], list, list[Path], list[list[np.ndarray]] | None]:
    """(images, labels, shapes, label cache places, polygons) of a split, verified or from a matching cache.
    polygons (only when asked for): per image, one float32 (k, 2) normalised polygon per label row, (0, 2) for a
    box row."""
    candidates, digest, scan = _label_plan(path, im_files, lb_files, nc, polygons)
    listed = set(im_files)
    cache = next((c for c in (_load_cache(f, digest, listed, prefix) for f in candidates) if c), None)
    if cache is None:
        cache = scan()
        cache["hash"] = np.array(digest)
        if cache["counts"].sum():
            _save_label_cache(candidates, cache, prefix)
        # else: no box at all (no label files, or all empty): nothing worth caching, and a run that stops on it
        # must not leave a cache (nor a labels/ folder) in a dataset that holds no labels
    n_images, n_bg, n_corrupt = (int(x) for x in cache["stats"])
    counts = cache["counts"]
    boxes = int(counts.sum())
    LOGGER.info(f"{prefix}{path}: {n_images} images, {n_bg} backgrounds, {n_corrupt} corrupt ({boxes} boxes)")
    for msg in cache["msgs"]:
        LOGGER.warning(f"{prefix}WARNING: {msg}")
    if n_images and not counts.sum():
        LOGGER.warning(f"{prefix}WARNING: {no_labels_message(path, cache['im_files'])}")
    labels = np.split(cache["labels"].astype(np.float32), np.cumsum(counts)[:-1]) if len(counts) else []
    labels = [np.ascontiguousarray(lb) for lb in labels]
    split_polygons = _split_polygons(cache) if polygons else None
    return [str(f) for f in cache["im_files"]], labels, cache["shapes"].tolist(), candidates, split_polygons


def _split_polygons(cache: dict) -> list[list[np.ndarray]]:
    """The cache's polygon vertices as, per image, one float32 (k, 2) array per label row."""
    vertices = cache["polygon_counts"].astype(np.int64)
    rows = np.split(cache["polygon_points"].astype(np.float32), np.cumsum(vertices)[:-1]) if len(vertices) else []
    starts = np.concatenate(([0], np.cumsum(cache["counts"])))
    return [rows[a:b] for a, b in zip(starts[:-1], starts[1:])]


def _label_plan(split, im_files: list[str], lb_files: list[str], nc: int, polygons: bool = False):
    """(label cache places, fingerprint, scan) for YOLO label files, or for labels converted from the split's
    COCO JSON / VOC XML (cached beside the annotations under our own name, else in the user cache folder); the
    annotations' outlines are read only for polygons (a label file's polygon rows always are)."""
    if isinstance(split, AnnotatedSplit):
        found = split.annotations(polygons)
        outlines = found.polygons if polygons else [None] * len(found.images)
        rows = dict(zip(found.images, zip(found.rows, found.sizes, outlines)))
        places = label_cache_paths(split.cache_source())
        digest = _files_hash(found.sources + im_files, nc, split.recipe(polygons))
        return places, digest, lambda: _scan(im_files, [rows[f] for f in im_files], verify_image_rows, nc)
    p = Path(split[0] if isinstance(split, (list, tuple)) else split)
    places = label_cache_paths(p if p.is_file() else Path(lb_files[0]).parent)
    digest = _files_hash(lb_files + im_files, nc)
    return places, digest, lambda: _scan(im_files, lb_files, verify_image_label, nc)


def _save_label_cache(candidates: list[Path], cache: dict, prefix: str) -> None:
    saved = next((f for f in candidates if _save_cache(f, cache)), None)
    if saved == candidates[0]:
        LOGGER.info(f"{prefix}New cache created: {saved}")
    elif saved is not None:
        why = "holds a file of that name" if os.path.lexists(candidates[0]) else "is not writable"
        why = why if candidates[0].parent.is_dir() else "does not exist"
        LOGGER.info(f"{prefix}{candidates[0].parent} {why}, label cache saved as {saved}")
    else:
        places = ", ".join(str(f.parent) for f in candidates)
        LOGGER.warning(f"{prefix}WARNING: cache not saved ({places} not writable)")


def no_labels_message(path, im_files) -> str:
    """Why a split has no box: no label files, only empty ones, or annotations without a usable box."""
    n = len(im_files)
    if isinstance(path, AnnotatedSplit):
        return f"no boxes in {path} for its {n} images: training needs at least one annotated object"
    lb_files = img2label_paths([str(f) for f in im_files])
    im_dirs = sorted({os.path.dirname(str(f)) for f in im_files})
    lb_dirs = sorted({os.path.dirname(f) for f in lb_files})

    def named(dirs: list[str]) -> str:
        return dirs[0] + (f" (and {len(dirs) - 1} more folders)" if len(dirs) > 1 else "")

    present = sum(os.path.isfile(f) for f in lb_files)
    if present:
        # Background images (an empty label file) train as YOLOv5 and Ultralytics train them, next to images with
        # boxes. A split of backgrounds only has nothing to learn a box from: YOLOv5's train.py stops on it (with a
        # traceback), Ultralytics warns and trains a model that cannot detect; we stop with this one line.
        some = "" if present == n else f" and {n - present} of the {n} images in {named(im_dirs)} have none"
        return (
            f"all {present} label files in {named(lb_dirs)} are empty{some} (background images only, no box): "
            f"training needs at least one labelled box"
        )
    return (
        f"no labels found in {named(lb_dirs)} for the {n} images in {named(im_dirs)}: training "
        f"needs YOLO label files (images/ -> labels/, .txt)"
    )


def _scan(im_files: list[str], sources: list, verify, nc: int) -> dict:
    """Verify every image with its labels (a label file, or converted rows) into cache arrays (threads: mostly file
    I/O)."""
    workers = min(8, os.cpu_count() or 1, max(1, len(im_files) // 64))
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda pair: verify(*pair, nc), zip(im_files, sources)))
    good, msgs, n_bg, n_corrupt = [], [], 0, 0
    for im_file, labels, shape, msg, status, polygons in results:
        if status == "corrupt":
            n_corrupt += 1
            msgs.append(f"{im_file}: ignoring corrupt image/label: {msg}")
            continue
        n_bg += status == "background"
        if msg:
            msgs.append(f"{im_file}: {msg}")
        good.append((im_file, labels, shape, polygons))
    return {
        "version": np.array(CACHE_VERSION),
        "im_files": np.array([g[0] for g in good], dtype=str),
        "shapes": np.array([g[2] for g in good], dtype=np.int64).reshape(-1, 2),
        "counts": np.array([len(g[1]) for g in good], dtype=np.int64),
        "labels": np.concatenate([g[1] for g in good], 0) if good else np.zeros((0, 5), np.float32),
        "msgs": np.array(msgs, dtype=str),
        "stats": np.array([len(good), n_bg, n_corrupt]),
        **_polygon_arrays([p for g in good for p in g[3]]),
    }


def _polygon_arrays(polygons: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Every label row's polygon (in label order) as the cache stores them: the vertex count of each, and all
    vertices in one (m, 2) float32 array."""
    return {
        "polygon_counts": np.array([len(p) for p in polygons], dtype=np.int64),
        "polygon_points": np.concatenate(polygons, 0) if polygons else np.zeros((0, 2), np.float32),
    }
