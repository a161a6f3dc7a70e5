"""Whole detect.py and test.py commands, a .pt against its INT8 export, side by side: rounds alternate which runs
first, each round's load average is printed with its wall times, and the ratio is taken per round and of the medians.
Each command's CPU seconds (its own and its data-loader workers') and its thread count are printed too: on a shared
CPU the wall time moves with the other jobs, the CPU time much less. Both sides of a round run on the same number of
threads: the cores idle at the round's start, as each command would fit them for itself (`--own-threads`: each
command fits its own, and on a busy CPU one side may take 1 thread and the other 2; `--threads N`: N throughout).
Each command runs once untimed with each weights first, so that every timed run finds its files in the page cache and
an export its compiled model in OpenVINO's model cache (`--cold`: no such run; a new export's first run compiles).

    python benchmarks/bench_int8_commands.py --pt yolov5n.pt --int8 yolov5n_int8_openvino_model --data coco128.yaml \
        --source ../datasets/coco128/images/train2017 --rounds 3
"""

import argparse
import os
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench_common import REPO, run_timed

from utils.torch_utils import idle_cpu_cores, threads_for_idle_cores


@dataclass
class Timed:
    """One command's wall and CPU seconds and the torch thread count it ran on."""

    wall: float
    cpu: float
    threads: str


def timed_command(args: list[str]) -> Timed:
    """Run `python args` in the repository; its wall time, the CPU time of it and its waited-for children (test.py's
    loader workers), and its thread count (from its "running N of M threads" line, else all or OMP_NUM_THREADS)."""
    wall, cpu, done = run_timed([sys.executable, *args], REPO, capture_output=True, text=True)
    done.check_returncode()
    fitted = re.search(r"running (\d+) of \d+ threads", done.stdout + done.stderr)
    threads = fitted.group(1) if fitted else os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    return Timed(wall, cpu, threads)


def commands(weights: Path, args: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    """detect.py and test.py on weights, writing into out (never into a user's runs/ folder)."""
    detect = ["detect.py", "--weights", str(weights), "--source", args.source, "--img", str(args.img)]
    test = ["test.py", "--weights", str(weights), "--data", args.data, "--img", str(args.img)]
    test += ["--batch-size", str(args.batch_size)]
    place = ["--project", str(out), "--name", weights.name, "--exist-ok"]
    return {"detect": detect + place, "test": test + place}


def rounds(args: argparse.Namespace, out: Path) -> dict[str, dict[str, list[float]]]:
    """Wall seconds of each command with each weights, per round, alternating which weights go first."""
    sides = {"pt": Path(args.pt), "int8": Path(args.int8)}
    times = {cmd: {side: [] for side in sides} for cmd in args.commands}
    for cmd in args.commands:
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            load = os.getloadavg()[0]
            if not args.threads and not args.own_threads:  # as utils.torch_utils.fit_threads_to_idle_cores
                threads = threads_for_idle_cores(os.cpu_count() or 1, idle_cpu_cores(1.0))
                os.environ["OMP_NUM_THREADS"] = str(threads)
            if r == 0 and not args.cold:  # untimed, on round 1's threads: files in the page cache, the model cached
                for side in sides.values():
                    timed_command(commands(side, args, out)[cmd])
            for side in order:
                times[cmd][side].append(timed_command(commands(sides[side], args, out)[cmd]))
            pt, int8 = times[cmd]["pt"][-1], times[cmd]["int8"][-1]
            print(
                f"{cmd} round {r + 1} (load {load:.2f}, {'/'.join(order)}): .pt {pt.wall:.2f} s "
                f"({pt.cpu:.1f} CPU s, {pt.threads} threads), INT8 {int8.wall:.2f} s ({int8.cpu:.1f} CPU s, "
                f"{int8.threads} threads), ratio {int8.wall / pt.wall:.2f} (CPU {int8.cpu / pt.cpu:.2f})",
                flush=True,
            )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pt", required=True, help=".pt weights")
    parser.add_argument("--int8", required=True, help="its INT8 export (an OpenVINO folder, an ONNX file, ...)")
    parser.add_argument("--data", required=True, help="data YAML for test.py")
    parser.add_argument("--source", required=True, help="images for detect.py")
    parser.add_argument("--img", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16, help="test.py's")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", nargs="+", default=["detect", "test"], choices=["detect", "test"])
    parser.add_argument("--threads", type=int, help="CPU threads of both sides (default: the idle cores per round)")
    parser.add_argument("--cold", action="store_true", help="no untimed first run of each command and weights")
    parser.add_argument("--own-threads", action="store_true", help="each command fits its threads to the idle cores")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        times = rounds(args, Path(tmp))
    for cmd, sides in times.items():
        pt, int8 = (statistics.median(t.wall for t in sides[side]) for side in ("pt", "int8"))
        pt_cpu, int8_cpu = (statistics.median(t.cpu for t in sides[side]) for side in ("pt", "int8"))
        print(
            f"{cmd}: median .pt {pt:.2f} s, INT8 {int8:.2f} s, ratio of medians {int8 / pt:.2f}; "
            f"CPU seconds {pt_cpu:.1f} / {int8_cpu:.1f}, ratio {int8_cpu / pt_cpu:.2f}"
        )


if __name__ == "__main__":
    main()
