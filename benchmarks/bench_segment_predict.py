"""Segment predict, whole commands side by side: our detect.py against Ultralytics' `yolo predict` on the same
segment .pt (a random-initialised one by default) and the same images, both saving the drawn images at their default
size and thresholds. Rounds alternate which command runs first; each round prints its load average, both wall
times and the ratio, then the medians. Each side's detection count comes from its own log (the per-image lines).

The ultralytics package is never imported here: its `yolo` command runs in its own environment (--yolo).

    python benchmarks/bench_segment_predict.py --yolo /path/to/ulvenv/bin/yolo --rounds 3 --threads 1
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import REPO, SHARED

DEFAULT_WEIGHTS = SHARED / "reference" / "seg" / "yolo11n-seg_random.pt"
DEFAULT_SOURCE = SHARED / "datasets" / "coco128" / "images" / "train2017"
# one per-image line of either log: "image 3/128 /path/x.jpg: 480x640 2 persons, 1 tie, 12.3ms"
IMAGE_LINE = re.compile(r"^image \d+/\d+ .*?: \d+x\d+ (.*?),? [\d.]+ms", re.MULTILINE)
COUNT = re.compile(r"(\d+) [^,]+")


def detections_in_log(log: str) -> tuple[int, int]:
    """(images, detections) of a predict log: the per-image lines and the counts they list ('(no detections)' and
    Ultralytics' empty list count as none)."""
    lines = IMAGE_LINE.findall(log)
    return len(lines), sum(int(n) for line in lines for n in COUNT.findall(line))


def commands(weights: Path, args: argparse.Namespace, out: Path, name: str) -> dict[str, list[str]]:
    """Both predict commands on weights, each writing its images into out/<side>/name."""
    ours = [sys.executable, "detect.py", "--weights", str(weights), "--source", args.source, "--img", str(args.img)]
    ours += ["--project", str(out / "ours"), "--name", name, "--exist-ok"]
    theirs = [args.yolo, "predict", f"model={weights}", f"source={args.source}", f"imgsz={args.img}", "save=True"]
    theirs += [f"project={out / 'ultralytics'}", f"name={name}", "exist_ok=True"]
    if args.conf is not None:  # below the defaults, random weights give detections and so masks to make and draw
        ours, theirs = ours + ["--conf-thres", str(args.conf)], theirs + [f"conf={args.conf}"]
    return {"ours": ours, "ultralytics": theirs}


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of command run in cwd and its output (stdout and stderr together)."""
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"ERROR: {command[1]} failed ({done.returncode}):\n{done.stdout[-2000:]}")
    return seconds, done.stdout


def rounds(args: argparse.Namespace, weights: Path, out: Path) -> dict[str, list[float]]:
    """Wall seconds of each side per round, alternating which goes first; counts printed per round."""
    times: dict[str, list[float]] = {"ours": [], "ultralytics": []}
    for r in range(args.rounds):
        order = list(times) if r % 2 == 0 else list(reversed(times))
        load = os.getloadavg()[0]
        counts = {}
        for side in order:
            seconds, log = timed(commands(weights, args, out, f"r{r}")[side], REPO if side == "ours" else out)
            times[side].append(seconds)
            counts[side] = detections_in_log(log)
        ours, theirs = times["ours"][-1], times["ultralytics"][-1]
        print(
            f"round {r + 1} (load {load:.2f}, threads {os.environ.get('OMP_NUM_THREADS', 'default')}, "
            f"{'/'.join(order)}): ours {ours:.2f} s, Ultralytics {theirs:.2f} s, ratio {ours / theirs:.2f}; "
            f"images/detections ours {counts['ours']}, Ultralytics {counts['ultralytics']}",
            flush=True,
        )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--yolo", required=True, help="Ultralytics' `yolo` command (in its own environment)")
    parser.add_argument("--weights", default=str(DEFAULT_WEIGHTS), help="a segment .pt both sides load")
    parser.add_argument("--source", default=str(DEFAULT_SOURCE), help="images for both")
    parser.add_argument("--img", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conf", type=float, help="confidence threshold of both (default: each its default)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of both sides (default: each its own)")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / Path(args.weights).name  # a copy: neither side writes beside the user's file
        shutil.copy(args.weights, weights)
        times = rounds(args, weights, Path(tmp))
    ours, theirs = statistics.median(times["ours"]), statistics.median(times["ultralytics"])
    print(f"median of {args.rounds}: ours {ours:.2f} s, Ultralytics {theirs:.2f} s, ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
