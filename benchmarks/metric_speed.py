"""Speed of the metric step against pycocotools on a COCO-val-sized synthetic input.

Usage: python benchmarks/metric_speed.py [--images 5000] [--dets 100]

Both sides score the same ground truth and detections. Ours is timed from in-memory per-image arrays to the
12 COCO numbers and the per-class table (AP50, AP50-95, P, R): CocoEvaluator.add for every image, then
evaluate(). pycocotools is timed on evaluate() + accumulate() only, after its COCO objects were built.
"""

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from utils.eval.evaluator import CocoEvaluator  # noqa: E402


def synthetic_coco(
    n_images: int = 5000, gt_per_image: float = 7.3, dets_per_image: int = 100, nc: int = 80, seed: int = 0
) -> list[dict]:
    """Per-image ground truth and detections shaped like COCO val: about 36,000 boxes on 5,000 images.

    Up to three detections per ground truth are jittered copies of it (mostly the right class, higher scores),
    the rest random boxes. Like a real detector's, an image's detections spread over a few plausible classes
    (its own and 12 others): yolov5n's top 100 per image on coco128 cover 15 classes on average. 1% of the
    ground truth are crowd regions.
    """
    rng = np.random.default_rng(seed)
    images = []
    for image_id in range(1, n_images + 1):
        w, h = rng.integers(320, 641), rng.integers(240, 481)
        n = rng.poisson(gt_per_image)
        size = rng.uniform(0.02, 0.6, (n, 2)) * [w, h]
        xy = rng.uniform(0, 1, (n, 2)) * ([w, h] - size)
        gt = np.concatenate((xy, xy + size), 1)
        gt_cls = rng.integers(0, nc, n)
        plausible = np.concatenate((gt_cls, rng.choice(nc, 12, replace=False)))
        n_near = min(3 * n, dets_per_image)
        src = np.arange(n_near) % max(n, 1)
        near = gt[src] + rng.normal(0, 0.1, (n_near, 4)) * np.tile(size[src], 2) if n else np.zeros((0, 4))
        near_cls = np.where(rng.random(n_near) < 0.8, gt_cls[src] if n else 0, rng.choice(plausible, n_near))
        n_far = dets_per_image - n_near
        far_size = rng.uniform(0.02, 0.5, (n_far, 2)) * [w, h]
        far_xy = rng.uniform(0, 1, (n_far, 2)) * ([w, h] - far_size)
        images.append(
            {
                "id": image_id,
                "shape": (int(h), int(w)),
                "gt": gt,
                "gt_cls": gt_cls,
                "crowd": rng.random(n) < 0.01,
                "det": np.concatenate((near, np.concatenate((far_xy, far_xy + far_size), 1))),
                "conf": np.concatenate((np.sqrt(rng.random(n_near)), 0.5 * rng.random(n_far) ** 2)),
                "det_cls": np.concatenate((near_cls, rng.choice(plausible, n_far))),
            }
        )
    return images


def ours(images: list[dict], nc: int = 80) -> tuple[CocoEvaluator, np.ndarray, float]:
    """Fill the evaluator image by image and evaluate; returns it, the 12 numbers and the seconds taken."""
    t0 = time.perf_counter()
    evaluator = CocoEvaluator([str(c) for c in range(nc)])
    for im in images:
        evaluator.add(
            im["id"],
            im["gt"],
            im["gt_cls"],
            im["det"],
            im["conf"],
            im["det_cls"],
            gt_crowd=im["crowd"],
            shape=im["shape"],
        )
    stats = evaluator.evaluate().stats
    return evaluator, stats, time.perf_counter() - t0


def pycocotools_timed(gt: dict, predictions: list) -> tuple[np.ndarray, float]:
    """pycocotools' 12 numbers and the seconds its evaluate() + accumulate() took."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        evaluator = COCOeval(coco_gt, coco_gt.loadRes(predictions), "bbox")
        t0 = time.perf_counter()
        evaluator.evaluate()
        evaluator.accumulate()
        seconds = time.perf_counter() - t0
        evaluator.summarize()
    return np.asarray(evaluator.stats), seconds


def run(n_images: int = 5000, dets_per_image: int = 100, seed: int = 0, verbose: bool = True) -> dict:
    """Time both on the same synthetic input; returns the timings, their ratio and the largest metric difference."""
    images = synthetic_coco(n_images, dets_per_image=dets_per_image, seed=seed)
    evaluator, stats, ours_s = ours(images)
    ref_stats, ref_s = pycocotools_timed(evaluator.ground_truth(), evaluator.predictions())
    result = {
        "images": n_images,
        "gt_boxes": int(sum(len(im["gt"]) for im in images)),
        "detections": int(sum(len(im["det"]) for im in images)),
        "ours_s": ours_s,
        "pycocotools_s": ref_s,
        "speedup": ref_s / ours_s,
        "max_abs_diff": float(np.abs(stats - ref_stats).max()),
    }
    if verbose:
        print(f"{result['images']} images, {result['gt_boxes']} ground-truth boxes, {result['detections']} detections")
        print(f"ours (add + evaluate):                    {ours_s:7.2f} s")
        print(f"pycocotools (evaluate + accumulate):      {ref_s:7.2f} s")
        print(
            f"speed-up: {result['speedup']:.1f}x   largest difference in the 12 numbers: {result['max_abs_diff']:.1e}"
        )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--dets", type=int, default=100, help="detections per image")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(args.images, args.dets, args.seed)
