"""Segment training from scratch, whole commands side by side: our train.py against Ultralytics' `yolo segment train`
(or, with --peer yolov5, official YOLOv5's segment/train.py) on the same synthetic shapes set with polygon labels,
generated here. Both run their default command: data, model, epochs, size and batch, nothing else. Rounds alternate
which side runs first, each side trains on its own copy of the set (no label cache is shared), and every best.pt is
then scored by our test.py, so that both sides' box and mask mAP50-95 come from the same evaluation. Each round prints
its load, the wall and CPU seconds (user + sys, the command and its children) of each side, their ratios and the
scores; then the medians. With --seeds, round r trains both sides at seed r (each side's own --seed / seed=), and the
summary adds each side's mean and standard deviation of box and mask mAP50-95 and the standard error of each mean
difference: a 20-epoch run from scratch moves several tenths of mask mAP from one seed to the next.

Neither peer is imported here: each runs in its own environment (--peer-cmd).

    python benchmarks/bench_segment_training.py --peer-cmd /path/to/venv/bin/yolo --rounds 1
    python benchmarks/bench_segment_training.py --peer yolov5 --peer-cmd /path/to/venv/bin/python \\
        --yolov5-repo /path/to/yolov5
    python benchmarks/bench_segment_training.py --peer-cmd /path/to/venv/bin/yolo --rounds 10 --seeds
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import REPO, run_timed
from bench_inference import cpu_isa_flags

from utils.torch_utils import cpu_name

MODEL = {"ultralytics": "yolo11n-seg", "yolov5": "yolov5n-seg"}  # the pair each peer trains


def make_sets(root: Path, names: list[str]) -> dict[str, Path]:
    """One shapes set (3 classes, 160 train / 40 val images of 256 px, polygon rows), copied once per name; the data
    YAML of each copy."""
    source = root / "shapes"
    generate = [sys.executable, "-m", "utils.data.shapes", "--polygons", "--classes", "3", "--root", str(source)]
    subprocess.run(generate + ["--n-train", "160", "--n-val", "40"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    yamls = {}
    for name in names:
        shutil.copytree(source, root / name)
        yamls[name] = root / f"{name}.yaml"
        yamls[name].write_text(
            f"path: {root / name}\ntrain: images/train\nval: images/val\nnc: 3\nnames: [circle, square, triangle]\n"
        )
    return yamls


def train_command(
    side: str, args: argparse.Namespace, data: Path, run: Path, seed: int | None
) -> tuple[list[str], Path, Path]:
    """(command, working folder, the best.pt it writes) of one side's default training command into run; seed: the
    side's seed flag, None for none (every side's default is seed 0)."""
    model, size = MODEL[args.peer], [str(args.epochs), str(args.img), str(args.batch)]
    if side == "ultralytics":
        command = [args.peer_cmd, "segment", "train", f"model={model}.yaml", f"data={data}", f"epochs={size[0]}"]
        command += [f"imgsz={size[1]}", f"batch={size[2]}", f"project={run.parent}", f"name={run.name}"]
        command += ["exist_ok=True"] + ([] if seed is None else [f"seed={seed}"])
        return command, run.parent, run / "weights" / "best.pt"
    if side == "ours":
        command, cwd = [sys.executable, "train.py", "--data", str(data), "--cfg", f"{model}.yaml"], REPO
    else:
        command = [args.peer_cmd, "segment/train.py", "--data", str(data), "--cfg", f"models/segment/{model}.yaml"]
        cwd = Path(args.yolov5_repo)
    command += ["--weights", "", "--epochs", size[0], "--img", size[1], "--batch-size", size[2]]
    command += ["--project", str(run.parent), "--name", run.name, "--exist-ok"]
    return command + ([] if seed is None else ["--seed", str(seed)]), cwd, run / "weights" / "best.pt"


def timed(command: list[str], cwd: Path, log: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of command in cwd, its output into log; CPU is user + sys of it and its children."""
    with log.open("w") as out:
        wall, cpu, done = run_timed(command, cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"ERROR: {command[1]} failed ({done.returncode}), see {log}")
    return wall, cpu


def score(best: Path, data: Path, args: argparse.Namespace, out: Path) -> tuple[float, float]:
    """(box, mask) mAP50-95 of best.pt under our test.py at the training size."""
    command = [sys.executable, "test.py", "--weights", str(best), "--data", str(data), "--img", str(args.img)]
    command += ["--project", str(out.parent), "--name", out.name, "--exist-ok"]
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = json.loads((out / "results.json").read_text())
    return results["metrics"]["mAP50-95"], results["mask_metrics"]["mAP50-95"]


def one_round(r: int, args: argparse.Namespace, yamls: dict[str, Path], out: Path) -> dict[str, dict]:
    """Both sides' training, in this round's order, then both best.pt scored."""
    sides = ["ours", args.peer] if r % 2 == 0 else [args.peer, "ours"]
    seed = r if args.seeds else None
    rows = {}
    for side in sides:
        load = os.getloadavg()[0]
        run = out / side / f"r{r}"
        run.parent.mkdir(parents=True, exist_ok=True)  # Ultralytics' command runs in it
        command, cwd, best = train_command(side, args, yamls[side], run, seed)
        wall, cpu = timed(command, cwd, out / f"{side}_r{r}.log")
        box, mask = score(best, yamls[side], args, out / "score" / f"{side}_r{r}")
        rows[side] = {"load": load, "wall": wall, "cpu": cpu, "box": box, "mask": mask}
        print(f"  {side}: load {load:.2f}, {wall:.1f} s wall, {cpu:.1f} CPU s, box {box:.3f}, mask {mask:.3f}")
    ours, peer = rows["ours"], rows[args.peer]
    label = "/".join(sides) + ("" if seed is None else f", seed {seed}")
    print(
        f"round {r + 1} ({label}): wall ratio {ours['wall'] / peer['wall']:.3f}, CPU ratio "
        f"{ours['cpu'] / peer['cpu']:.3f}, mask ours - {args.peer} {ours['mask'] - peer['mask']:+.3f}",
        flush=True,
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", choices=sorted(MODEL), default="ultralytics")
    parser.add_argument("--peer-cmd", required=True, help="the peer's `yolo` command, or the python of YOLOv5's env")
    parser.add_argument("--yolov5-repo", help="a checkout of official YOLOv5 (--peer yolov5)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--img", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seeds", action="store_true", help="round r trains both sides at seed r")
    parser.add_argument("--keep", help="an absent folder to keep the sets, runs and logs in (default: a temporary one)")
    args = parser.parse_args()
    if args.peer == "yolov5" and not args.yolov5_repo:
        parser.error("--peer yolov5 needs --yolov5-repo")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, {cpu_isa_flags()}; model {MODEL[args.peer]}", flush=True)
    with contextlib.ExitStack() as stack:
        out = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=not args.keep)  # --keep: absent, so nothing of the user's is written into
        yamls = make_sets(out / "data", ["ours", args.peer])
        rounds = [one_round(r, args, yamls, out) for r in range(args.rounds)]
    for key in ("wall", "cpu", "mask", "box"):
        ours, peer = (statistics.median(r[s][key] for r in rounds) for s in ("ours", args.peer))
        print(f"median {key}: ours {ours:.3f}, {args.peer} {peer:.3f}, ratio {ours / peer:.3f}")
    if args.seeds and len(rounds) > 1:
        print_seed_spread(rounds, args.peer)


def print_seed_spread(rounds: list[dict], peer: str) -> None:
    """Each side's mean (standard deviation) of box and mask mAP50-95 over the seeds, and the mean difference
    with its standard error (the seeds are independent draws on each side: a seed number does not pair runs)."""
    for key in ("mask", "box"):
        values = {side: [r[side][key] for r in rounds] for side in ("ours", peer)}
        spread = {side: (statistics.mean(v), statistics.stdev(v)) for side, v in values.items()}
        error = sum(sd**2 / len(rounds) for _, sd in spread.values()) ** 0.5
        sides = ", ".join(f"{side} {mean:.3f} (sd {sd:.3f})" for side, (mean, sd) in spread.items())
        difference = spread["ours"][0] - spread[peer][0]
        error_text = f"{difference:+.3f} (standard error {error:.3f})"
        print(f"mean {key} over {len(rounds)} seeds: {sides}; ours - {peer} {error_text}")


if __name__ == "__main__":
    main()
