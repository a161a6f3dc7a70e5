"""What the benchmarks share: the repository on sys.path, ../shared, min/median statistics, random weights, timed
commands."""

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks import the project they measure

SHARED = REPO.parent / "shared"


def _stats(values: list[float]) -> dict:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "runs": len(values)}


def _random_weights(cfg: str, folder: Path) -> Path:
    """A checkpoint of a randomly initialised model: same speed as trained weights, nothing to download."""
    from models.nn.yolo import Model
    from models.weights.checkpoint import checkpoint_dict, save_checkpoint

    path = folder / f"{Path(cfg).stem}-random.pt"
    save_checkpoint(checkpoint_dict(Model(cfg).eval()), path)
    return path


def _timed_command(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def run_timed(command: list[str], cwd: Path, **run_options) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds, the finished process) of command run in cwd (subprocess.run's run_options, no
    check): CPU is user + sys of the command and the children it waited for (loader workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, check=False, **run_options)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done
