"""AutoAnchor: check how well a model's anchors fit a dataset's boxes, and evolve better ones when they do not."""

import numpy as np
import torch
from torch import nn

from utils.log import LOGGER
from utils.torch_utils import de_parallel

PREFIX = "AutoAnchor: "
BPR_GOOD = 0.98  # below this best possible recall, new anchors are computed
KMEANS_MAX_POINTS = 50_000


def _label_wh(dataset, img_size: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Box widths and heights (n, 2) in pixels of images resized to img_size on their long side."""
    shapes = np.asarray(dataset.shapes, dtype=np.float64).reshape(-1, 2)
    shapes = img_size * shapes / shapes.max(1, keepdims=True)
    if rng is not None:  # random scale jitter, as training augmentation resizes images
        shapes = shapes * rng.uniform(0.9, 1.1, size=(shapes.shape[0], 1))
    boxes = [np.asarray(lb, dtype=np.float64).reshape(-1, 5)[:, 3:5] * s for s, lb in zip(shapes, dataset.labels)]
    return np.concatenate(boxes, 0) if boxes else np.zeros((0, 2))


def _ratio_metric(k: torch.Tensor, wh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per box and anchor, the worse of the w and h ratios (<= 1), and each box's best anchor ratio."""
    r = wh[:, None] / k[None]
    x = torch.min(r, 1 / r).min(2)[0]
    return x, x.max(1)[0]


def anchor_metrics(anchors_px: torch.Tensor, wh: torch.Tensor, thr: float = 4.0) -> tuple[float, float]:
    """(best possible recall, mean anchors per target) of anchors (k, 2) for boxes wh (n, 2), both in pixels."""
    x, best = _ratio_metric(anchors_px.float().view(-1, 2), wh.float())
    bpr = (best > 1 / thr).float().mean()
    aat = (x > 1 / thr).float().sum(1).mean()
    return float(bpr), float(aat)


def check_anchors(
    dataset, model: nn.Module, thr: float = 4.0, imgsz: int = 640, seed: int = 0, refit: bool = True
) -> None:
    """Report the anchors' fit to dataset.labels; replace them with evolved ones when BPR < 0.98 and they help.

    refit=False (a head trained with these anchors, from --weights) reports the fit and keeps them: the head's box
    outputs are scaled by its anchors, so new ones void what it learned (YOLOv5 refits them anyway; a 1-epoch
    fine-tune of yolov5n.pt at 320 on COCO128 then scores mAP50-95 0.19 where it started at 0.29)."""
    detect = de_parallel(model).model[-1]
    if not de_parallel(model).family.anchors:  # YOLOv8, YOLO11, YOLO26: no anchors to fit
        LOGGER.info("%sskipped: %s models have no anchors", PREFIX, de_parallel(model).family.title)
        return
    rng = np.random.default_rng(seed)
    wh = torch.tensor(_label_wh(dataset, imgsz, rng), dtype=torch.float32)
    if not len(wh):
        LOGGER.warning("%sWARNING: no labels in the dataset, anchors left unchanged", PREFIX)
        return
    stride = detect.stride.to(detect.anchors.device).view(-1, 1, 1)
    anchors_px = (detect.anchors.clone() * stride).cpu()
    bpr, aat = anchor_metrics(anchors_px, wh, thr)
    message = f"{PREFIX}{aat:.2f} anchors/target, {bpr:.3f} Best Possible Recall (BPR). "
    if bpr > BPR_GOOD:
        LOGGER.info("%sCurrent anchors are a good fit to dataset", message)
        return
    if not refit:
        LOGGER.info(
            "%sAnchors kept: the head from the weights was trained with them (train from --cfg to fit new ones)",
            message,
        )
        return
    LOGGER.info("%sAnchors are a poor fit to dataset, attempting to improve...", message)
    na = detect.anchors.numel() // 2
    try:
        new = torch.tensor(kmean_anchors(dataset, n=na, img_size=imgsz, thr=thr, gen=1000, verbose=False, seed=seed))
    except ValueError as e:
        LOGGER.warning("%sWARNING: could not compute new anchors (%s), keeping the original ones", PREFIX, e)
        return
    new_bpr, _ = anchor_metrics(new, wh, thr)
    if new_bpr > bpr:
        new = new.view_as(detect.anchors)  # sorted by area, so the smallest go to the finest level
        if detect.stride[-1] < detect.stride[0]:
            new = new.flip(0)
        de_parallel(model).set_anchors_pixels(new)
        LOGGER.info(
            "%sDone: new anchors saved to the model (BPR %.4f; optionally update the model YAML with them)",
            PREFIX,
            new_bpr,
        )
    else:
        LOGGER.info("%sDone: original anchors better than new anchors, proceeding with the original ones", PREFIX)


def kmeans(
    x: np.ndarray, k: int, restarts: int = 30, iters: int = 300, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, float]:
    """Lloyd's k-means of x (n, d), best of several random starts; returns centroids (k, d) and mean distance."""
    rng = rng or np.random.default_rng(0)
    if len(x) < k:
        raise ValueError(f"{len(x)} points cannot make {k} clusters")
    best, best_dist = None, np.inf
    for _ in range(restarts):
        centroids = x[rng.choice(len(x), k, replace=False)]
        for _ in range(iters):
            dist = np.linalg.norm(x[:, None] - centroids[None], axis=2)
            assign = dist.argmin(1)
            # A cluster that lost all its points keeps its old centroid.
            updated = np.array([x[assign == j].mean(0) if (assign == j).any() else centroids[j] for j in range(k)])
            if np.allclose(updated, centroids):
                break
            centroids = updated
        mean_dist = np.linalg.norm(x[:, None] - centroids[None], axis=2).min(1).mean()
        if mean_dist < best_dist:
            best, best_dist = centroids, mean_dist
    return best, float(best_dist)


def kmean_anchors(
    dataset, n: int = 9, img_size: int = 640, thr: float = 4.0, gen: int = 1000, verbose: bool = True, seed: int = 0
) -> np.ndarray:
    """Anchors (n, 2) in pixels, sorted by area: k-means of the label sizes, then evolved for the ratio fitness."""
    rng = np.random.default_rng(seed)
    inv_thr = 1 / thr
    wh0 = _label_wh(dataset, img_size)
    tiny = int((wh0 < 3.0).any(1).sum())
    if tiny:
        LOGGER.warning(
            "%sWARNING: extremely small objects found: %d of %d labels are < 3 pixels in size", PREFIX, tiny, len(wh0)
        )
    wh = wh0[(wh0 >= 2.0).any(1)].astype(np.float32)  # drop boxes under 2 pixels: too small to matter
    if len(wh) < n:
        raise ValueError(f"only {len(wh)} usable labels for {n} anchors")

    LOGGER.info("%sRunning k-means for %d anchors on %d points...", PREFIX, n, len(wh))
    scale = wh.std(0)
    scale[scale == 0] = 1.0
    # k-means only seeds the evolution, so a random subset of a very large label set is enough.
    sample = wh if len(wh) <= KMEANS_MAX_POINTS else wh[rng.choice(len(wh), KMEANS_MAX_POINTS, replace=False)]
    k = kmeans(sample / scale, n, rng=rng)[0] * scale  # cluster whitened sizes so w and h weigh the same
    wh_t, wh0_t = torch.tensor(wh), torch.tensor(wh0, dtype=torch.float32)

    def fitness(anchors: np.ndarray) -> float:
        _, best = _ratio_metric(torch.tensor(anchors, dtype=torch.float32), wh_t)
        return float((best * (best > inv_thr).float()).mean())

    # Genetic evolution: mutate a random subset of anchor dimensions, keep the mutation when fitness improves.
    f, shape, mutation_p, sigma = fitness(k), k.shape, 0.9, 0.1
    for _ in range(gen):
        v = np.ones(shape)
        while (v == 1).all():  # at least one dimension must change
            mutate = rng.random(shape) < mutation_p
            v = (mutate * rng.random() * rng.standard_normal(shape) * sigma + 1).clip(0.3, 3.0)
        candidate = (k * v).clip(min=2.0)
        fg = fitness(candidate)
        if fg > f:
            f, k = fg, candidate

    k = k[np.argsort(k.prod(1))]
    if verbose:
        x, best = _ratio_metric(torch.tensor(k, dtype=torch.float32), wh0_t)
        bpr, aat = (best > inv_thr).float().mean(), (x > inv_thr).float().mean() * n
        LOGGER.info(
            "%sthr=%.2f: %.4f best possible recall, %.2f anchors past thr, fitness %.4f", PREFIX, inv_thr, bpr, aat, f
        )
        LOGGER.info("%sanchors: %s", PREFIX, ", ".join(f"{w:.0f},{h:.0f}" for w, h in k))
    return k.astype(np.float32)
