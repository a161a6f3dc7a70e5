"""benchmark.py's engine: export weights to every format that runs here, then measure each on the same images of a
data YAML's val split, side by side: the export's size, test.py's mAP50-95 and mAP50, the median forward pass per
image (the Predictor at batch 1, as detect.py runs it) and the wall time of the whole detect.py command on those
images (a new process: start-up, loading, decoding, pre-processing and NMS included; --nosave).

A format that cannot run here (its ExportFormat's runs_on: TensorRT without CUDA, CoreML off macOS) is skipped with
that reason, and a format that fails anywhere is marked with its one-line reason, keeping what it measured before;
the run goes on. Everything goes into the run folder (runs/benchmark/exp): the weights are copied there first, so the
exports land beside the copy and nothing beside the user's weights is written or replaced. Every row runs on the same
number of threads (detect.py's process gets OMP_NUM_THREADS), so the rows compare.
"""

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.api.detector import load_detector
from models.export.exporter import ExportOptions, export, resolve_weights
from models.export.formats import FORMATS
from models.export.metadata import error_line, parse_metadata, read_metadata
from models.weights.checkpoint import load_model
from utils.cli import is_out_of_memory
from utils.data.config import load_data_config
from utils.data.verify import list_image_files
from utils.errors import BenchmarkError, YoloError
from utils.eval.benchmark_report import BenchmarkRow, write_report
from utils.eval.validate_weights import run as validate_weights
from utils.files import REPO_ROOT, reserve_run_dir
from utils.infer.predict import PredictOptions, Predictor
from utils.log import LOGGER
from utils.torch_utils import cpu_name, select_device

PYTORCH = "pytorch"  # the row of the weights themselves
DETECT_TIMEOUT_S = 3600


@dataclass
class BenchmarkCommand:
    """benchmark.py's options: its flags (same names and defaults) and run()'s keywords."""

    weights: str = "yolov5s.pt"
    data: str = "coco128.yaml"
    imgsz: int | None = None  # None: the size the weights were trained at (static exports: the one they hold)
    batch_size: int = 16  # test.py's batch
    device: str = "cpu"
    half: bool = False  # FP16 exports (CUDA; NCNN, LiteRT and CoreML convert on any device)
    int8: bool = False  # INT8 exports, calibrated on --data (formats without INT8 fail with that reason)
    include: list[str] | tuple[str, ...] | None = None  # None: every format
    workers: int = 8
    project: str = "runs/benchmark"
    name: str = "exp"
    exist_ok: bool = False
    hard_fail: bool = False  # exit with an error when a format failed (YOLOv5's benchmarks.py --hard-fail)


@dataclass
class BenchmarkRun:
    """What a benchmark did: the run folder, the images measured on and one row per format."""

    save_dir: Path
    images: int
    rows: list[BenchmarkRow] = field(default_factory=list)


@dataclass
class _Bench:
    """What every row is measured with: the options, the device, the data, the weights' copy in the run folder, the
    list of val images and the thread count."""

    options: BenchmarkCommand
    device: torch.device
    data: dict
    weights: Path
    image_list: Path
    save_dir: Path
    threads: int


def run(**options) -> BenchmarkRun:
    """Benchmark weights on a data YAML (keywords: BenchmarkCommand's fields); writes benchmark.csv and
    benchmark.md into the run folder and returns the rows. Bad weights, data or flags: one-line YoloErrors before
    any export; a format's failure: its row's reason."""
    o = BenchmarkCommand(**options)
    every = [PYTORCH, *FORMATS]
    unknown = [f for f in o.include or [] if f not in every]
    if unknown:
        raise BenchmarkError(f"--include {unknown[0]}: unknown format, choose from {', '.join(every)}")
    include = [f for f in every if f in (o.include or every)]  # the weights first, then the formats' own order
    bench = _set_up(o)
    result = BenchmarkRun(bench.save_dir, len(bench.image_list.read_text(encoding="utf-8").splitlines()))
    for name in include:
        LOGGER.info(f"\nBenchmark: {name}")
        result.rows.append(_benchmark(name, bench))
    write_report(result.rows, bench.save_dir, _context(bench, result.images))
    failed = [row.format for row in result.rows if row.status == "failed"]
    if o.hard_fail and failed:
        raise BenchmarkError(f"--hard-fail: {', '.join(failed)} failed (see {bench.save_dir / 'benchmark.md'})")
    return result


def _set_up(o: BenchmarkCommand) -> _Bench:
    """The data, the weights and the device checked (one line each, before any folder is made), then the run
    folder with a copy of the weights and the list of val images."""
    device = select_device(o.device)
    data = load_data_config(o.data)
    if not data.get("val"):
        raise BenchmarkError(f"--data {o.data} has no val split to measure on")
    images = list_image_files(data["val"], prefix="val: ")
    weights = resolve_weights(o.weights)
    load_model(weights, torch.device("cpu"))  # a damaged checkpoint is one line now, not one failed row per format
    save_dir = reserve_run_dir(Path(o.project) / o.name, o.exist_ok)
    copy = save_dir / "weights" / weights.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copy2(weights, copy)
    image_list = save_dir / "images.txt"
    image_list.write_text("".join(f"{Path(f).resolve()}\n" for f in images), encoding="utf-8")
    return _Bench(o, device, data, copy, image_list, save_dir, torch.get_num_threads())


def _benchmark(name: str, bench: _Bench) -> BenchmarkRow:
    """One format's row: exported (unless the weights' own row), then measured; a failure ends the row with its
    reason and keeps what was measured before it."""
    o = bench.options
    row = BenchmarkRow(name, precision="fp16" if o.half and bench.device.type == "cuda" else "fp32")
    if name == PYTORCH:
        row.path, row.size_mb = bench.weights, bench.weights.stat().st_size / 1e6
    else:
        reason = FORMATS[name].cannot_run_here(bench.device)
        if reason:
            row.skip(reason)
            return row
        if not _step(row, "export", _export, bench):
            return row
    steps = (("test.py", _accuracy), ("forward pass", _forward), ("detect.py", _detect_command))
    for what, step in steps:
        if not _step(row, what, step, bench):
            break
    return row


def _half(row: BenchmarkRow, bench: _Bench) -> bool | None:
    """--half for the weights' own row; an export runs in the precision it was exported in."""
    return bench.options.half if row.format == PYTORCH else None


def _step(row: BenchmarkRow, what: str, step, bench: _Bench) -> bool:
    """step(row, bench), which fills row, or the row marked failed with the one-line reason; whether it succeeded."""
    try:
        step(row, bench)
        return True
    except YoloError as e:
        row.fail(f"{what}: {e}")
    except Exception as e:  # a converter's or runtime's own exception: this format fails, the others still run
        row.fail(f"{what}: out of memory" if is_out_of_memory(e) else f"{what}: {type(e).__name__}: {error_line(e)}")
    LOGGER.warning(f"WARNING: {row.format} failed: {row.reason}")
    return False


def _export(row: BenchmarkRow, bench: _Bench) -> None:
    o = bench.options
    imgsz = (o.imgsz, o.imgsz) if o.imgsz else None
    options = ExportOptions(imgsz=imgsz, half=o.half, int8=o.int8, data=o.data if o.int8 else None)
    [exported] = export(bench.weights, [row.format], options, bench.device)
    row.path, row.size_mb, row.export_s = exported.path, exported.size_mb, exported.seconds
    row.precision = parse_metadata(read_metadata(exported.path), exported.path)["precision"]


def _accuracy(row: BenchmarkRow, bench: _Bench) -> None:
    """test.py's engine on the val split: mAP50-95 and mAP50."""
    o = bench.options
    result = validate_weights(
        bench.data,
        weights=str(row.path),
        batch_size=o.batch_size,
        imgsz=o.imgsz,
        device=o.device,
        half=_half(row, bench),
        workers=o.workers,
        project=bench.save_dir / "test",
        name=row.format,
        plots=False,
    )
    row.map50_95, row.map50 = result.metrics.map, result.metrics.map50


def _forward(row: BenchmarkRow, bench: _Bench) -> None:
    """The median forward pass over the images, one image per call, letterboxed as detect.py letterboxes them
    (after the Predictor's untimed warm-up)."""
    model, precision = load_detector(str(row.path), bench.device, _half(row, bench))
    predictor = Predictor(model, bench.device, PredictOptions(img_size=bench.options.imgsz), precision, log=False)
    times = [prediction.times[1] for prediction in predictor.stream(str(bench.image_list), verbose=False)]
    if not times:
        raise BenchmarkError(f"no image of {bench.image_list} could be read")
    row.forward_ms = 1000 * float(np.median(times))


def _detect_command(row: BenchmarkRow, bench: _Bench) -> None:
    """The wall time of `python detect.py --weights <export> --source <the images> --nosave` in a new process."""
    o = bench.options
    command = [sys.executable, str(REPO_ROOT / "detect.py"), "--weights", str(row.path)]
    command += ["--source", str(bench.image_list), "--nosave", "--project", str(bench.save_dir / "detect")]
    command += ["--name", row.format, "--device", o.device] + (["--img", str(o.imgsz)] if o.imgsz else [])
    command += ["--half"] if _half(row, bench) else []
    env = {**os.environ, "OMP_NUM_THREADS": str(bench.threads)}  # the threads of the in-process measurements
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=DETECT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"did not finish in {DETECT_TIMEOUT_S} s") from None
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()] or ["no output"]
        errors = [line for line in lines if line.startswith("ERROR")]
        raise BenchmarkError(f"exit {done.returncode}: {(errors or lines)[-1][:200]}")
    row.detect_s = seconds


def _context(bench: _Bench, images: int) -> list[str]:
    """What the numbers were measured on, for the report's head: weights, data, images, machine, load."""
    o = bench.options
    size = o.imgsz or "the weights' own"
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return [
        f"weights {bench.weights.name}, data {o.data} ({images} val images), image size {size}, batch {o.batch_size}",
        f"device {bench.device}, {bench.threads} torch threads, CPU {cpu_name()}, load average {load} at the end",
    ]
