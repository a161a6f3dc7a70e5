"""Tracking costs on this CPU: each tracker's update per frame (ByteTrack at 10, 50 and 200 objects; BoT-SORT without
its motion estimate, OC-SORT and TrackTrack without appearance at 50 and 200; BoT-SORT and TrackTrack with appearance
(with_reid) at 50; detection time not included), the appearance embedding's own cost per frame (the detector's head
inputs kept and pooled at 50 detections, yolo11n at 640, against the same forward without), and the camera-motion
compensation (BoT-SORT's and TrackTrack's) per frame at 640x360 and 1920x1080 for each gmc_method, with the check
of an estimate against 50 tracks that the default tracker adds to it (gmc_check).

Usage: python benchmarks/bench_tracking.py [--repeats 5] [--frames 300] [--gmc-frames 30] [--embed-frames 20]
Each figure is the mean per frame of one run over the frames, as the min and median of --repeats runs, after a
warm-up run: wall time, and this process's CPU time (what the work costs when other programs share the cores; the
machine's load average is printed with the table). The objects move on straight lines with detector-like noise,
some of them weak (score below track_high_thresh), with a few false positives, so both association stages and
track births and deaths take part.
"""

import argparse
import dataclasses
import json
import os
import time

import numpy as np
import torch
from bench_common import _stats

from utils.torch_utils import cpu_name
from utils.track.bot_sort import create_tracker
from utils.track.config import load_tracker_config
from utils.track.gmc import CameraMotion
from utils.track.motion_check import checked_affine
from utils.track.synth import SceneOptions, SceneRenderer
from utils.track.tracks import xyxy_to_state


def _detections(n_objects: int, frames: int, seed: int = 0) -> list[np.ndarray]:
    """Per frame (n, 6) x1, y1, x2, y2, score, cls of n_objects moving boxes in a 1920x1080 frame, plus clutter."""
    rng = np.random.default_rng(seed)
    start = rng.uniform([0, 0], [1800, 1000], (n_objects, 2))
    velocity = rng.normal(0, 3, (n_objects, 2))
    size = rng.uniform(20, 80, (n_objects, 2))
    out = []
    for t in range(frames):
        xy = start + velocity * t + rng.normal(0, 1.5, (n_objects, 2))
        score = np.clip(rng.normal(0.7, 0.2, n_objects), 0.05, 0.99)  # some weak, a few dropped below 0.1
        boxes = np.c_[xy, xy + size, score, rng.integers(0, 5, n_objects)]
        clutter = np.c_[
            rng.uniform(0, 1800, (3, 2)), rng.uniform(0, 1800, (3, 2)), rng.uniform(0.1, 0.4, 3), np.zeros(3)
        ]
        clutter[:, 2:4] = clutter[:, :2] + 30
        out.append(np.r_[boxes, clutter])
    return out


def _embeddings(detections: list[np.ndarray], dim: int = 64, seed: int = 1) -> list[np.ndarray]:
    """Per frame an embedding per detection: each object its own direction plus noise (clutter: random ones)."""
    rng = np.random.default_rng(seed)
    looks = rng.normal(size=(len(detections[0]), dim))
    return [(looks + rng.normal(0, 0.3, looks.shape)).astype(np.float32)[: len(d)] for d in detections]


def _config(case: str):
    """A case's tracker config: 'botsort', or 'botsort+reid' for the same with with_reid."""
    kind, _, reid = case.partition("+")
    return dataclasses.replace(load_tracker_config(f"{kind}.yaml"), with_reid=bool(reid))


def bench_trackers(cases: list[tuple[str, int]], frames: int, repeats: int) -> list[dict]:
    """Each (tracker, objects) case's update, the cases run in turn within each repeat (so a change in the machine's
    load touches them all alike); no frame is passed: no camera-motion estimate, timed apart in bench_gmc."""
    detections = {n: _detections(n, frames) for _, n in cases}
    features = {n: _embeddings(detections[n]) for _, n in cases}
    configs = {kind: _config(kind) for kind, _ in cases}
    wall, cpu = {case: [] for case in cases}, {case: [] for case in cases}
    for run in range(repeats + 1):
        for kind, n in cases:
            tracker = create_tracker(configs[kind])
            t0, c0 = time.perf_counter(), time.process_time()
            for d, f in zip(detections[n], features[n]):
                tracker.update(d, None, None, f)
            if run:  # the first run warms up
                wall[kind, n].append(1e3 * (time.perf_counter() - t0) / frames)
                cpu[kind, n].append(1e3 * (time.process_time() - c0) / frames)
    return [
        {"tracker": kind, "objects": n, "ms_per_frame": _stats(wall[kind, n]), "cpu_ms": _stats(cpu[kind, n])}
        for kind, n in cases
    ]


def bench_gmc(width: int, height: int, method: str, frames: int, repeats: int) -> dict:
    renderer = SceneRenderer(SceneOptions(frames=frames, width=width, height=height, seed=0))
    images = [renderer.frame(t)[0] for t in range(frames)]
    wall, cpu = [], []
    for run in range(repeats + 1):
        motion = CameraMotion(method)
        t0, c0 = time.perf_counter(), time.process_time()
        for image in images:
            motion.estimate(image)
        if run:
            wall.append(1e3 * (time.perf_counter() - t0) / frames)
            cpu.append(1e3 * (time.process_time() - c0) / frames)
    return {"size": f"{width}x{height}", "gmc_method": method, "ms_per_frame": _stats(wall), "cpu_ms": _stats(cpu)}


def bench_motion_check(n_objects: int, frames: int, repeats: int) -> dict:
    """TrackTrack's gmc_check (default_tracker.yaml) per frame: an estimate checked against n_objects tracks and
    this frame's detections (what it adds to the motion estimate below)."""
    detections = _detections(n_objects, frames + 1)
    affine = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    states = [np.c_[xyxy_to_state(d[:n_objects, :4], False), np.zeros((n_objects, 4))] for d in detections]
    wall, cpu = [], []
    for run in range(repeats + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        for state, d in zip(states, detections[1:]):
            checked_affine(affine, state, d[:, :4])
        if run:
            wall.append(1e3 * (time.perf_counter() - t0) / frames)
            cpu.append(1e3 * (time.process_time() - c0) / frames)
    return {
        "tracker": "tracktrack gmc_check",
        "objects": n_objects,
        "ms_per_frame": _stats(wall),
        "cpu_ms": _stats(cpu),
    }


def bench_embedding(frames: int, repeats: int, n_detections: int = 50) -> dict:
    """The appearance embedding's cost per frame: yolo11n (random weights) at 640x640 on CPU with one thread, a
    forward inside the head tap, then 50 detections' features pooled from it (pooled_ms), against the same forward
    alone; tapped and plain forwards alternate frame by frame (extra_ms: their difference, pooling included)."""
    from models.nn.yolo import Model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: no OpenMP spinning to blur a difference of a fraction of a millisecond
    torch.manual_seed(0)
    model = Model("yolo11n.yaml").eval()
    x = torch.rand(1, 3, 640, 640)
    rows = torch.randperm(8400)[:n_detections]
    plain, tapped, pooled = [], [], []
    with torch.inference_mode():
        for run in range(repeats + 1):
            times = np.zeros(3)
            for _ in range(frames):
                t0 = time.process_time()
                model(x)
                t1 = time.process_time()
                with model.tap_head_inputs() as tap:
                    model(x)
                t2 = time.process_time()
                tap.rows(rows).numpy()
                times += [t1 - t0, time.process_time() - t1, time.process_time() - t2]
            if run:
                plain, tapped, pooled = (a + [1e3 * t / frames] for a, t in zip((plain, tapped, pooled), times))
    torch.set_num_threads(threads)
    extra = [b - a for a, b in zip(plain, tapped)]
    return {"what": "embedding", "forward_ms": _stats(plain), "extra_ms": _stats(extra), "pooled_ms": _stats(pooled)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frames", type=int, default=300, help="frames per tracker run")
    ap.add_argument("--gmc-frames", type=int, default=30, help="frames per motion-compensation run (0: none)")
    ap.add_argument("--embed-frames", type=int, default=20, help="forwards per embedding-cost run (0: none)")
    args = ap.parse_args()
    cases = [("bytetrack", 10), ("bytetrack", 50), ("bytetrack", 200)]
    cases += [(kind, n) for kind in ("botsort", "ocsort", "tracktrack") for n in (50, 200)]
    cases += [("botsort+reid", 50), ("tracktrack+reid", 50)]
    rows = bench_trackers(cases, args.frames, args.repeats) + [bench_motion_check(50, args.frames, args.repeats)]
    embedding = bench_embedding(args.embed_frames, args.repeats) if args.embed_frames > 0 else None
    for width, height in ((640, 360), (1920, 1080)) if args.gmc_frames > 0 else ():
        rows += [bench_gmc(width, height, m, args.gmc_frames, args.repeats) for m in ("sparseOptFlow", "orb", "ecc")]
    print(f"CPU: {cpu_name()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| what | wall ms/frame min | median | CPU ms/frame min | median |\n|---|---|---|---|---|")
    for row in rows:
        what = (
            f"{row['tracker']}, {row['objects']} objects"
            if "objects" in row
            else f"GMC {row['gmc_method']}, {row['size']}"
        )
        wall, cpu = row["ms_per_frame"], row["cpu_ms"]
        print(f"| {what} | {wall['min']} | {wall['median']} | {cpu['min']} | {cpu['median']} |")
    if embedding:
        forward, extra, pooled = (embedding[k] for k in ("forward_ms", "extra_ms", "pooled_ms"))
        print(
            f"| appearance embedding, 50 detections (yolo11n 640, 1 thread: forward {forward['min']} ms) | | | "
            f"{extra['min']} (pooling {pooled['min']}) | {extra['median']} (pooling {pooled['median']}) |"
        )
    print(json.dumps(rows + ([embedding] if embedding else [])))


if __name__ == "__main__":
    main()
