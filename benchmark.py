"""Benchmark weights in every export format that runs here: size, mAP50-95 and mAP50, forward pass and detect.py time.

Usage (the flags of YOLOv5's benchmarks.py and of Ultralytics' `yolo benchmark`):
    python benchmark.py --weights yolov5n.pt --data coco128.yaml --img 640          # every format that runs here
    python benchmark.py --weights yolov5n.pt --data coco128.yaml --include onnx openvino   # or --format onnx ...
    python benchmark.py --weights yolov5n.pt --data coco128.yaml --int8             # INT8 exports, calibrated on --data
    python benchmark.py --weights yolov5n.pt --data coco128.yaml --half --device 0  # FP16 exports on a GPU

Each format (the .pt itself first) is exported into the run folder (runs/benchmark/exp: the weights are copied there
first, so nothing is written beside them), then measured on the data YAML's val images: the export's size, test.py's
mAP50-95 and mAP50, the median forward pass per image (batch 1, letterboxed as detect.py does) and the wall time of
the whole `detect.py --nosave` command on the same images. A format that cannot run here (TensorRT without CUDA,
CoreML off macOS) is skipped with its reason; one that fails is marked with its one-line reason and the run goes on
(--hard-fail: exit 1 afterwards). The table is printed and written as benchmark.csv and benchmark.md. The engine is
utils/eval/benchmark.py.
"""

import argparse
import sys

from models.export.formats import FORMATS
from utils.cli import Parser, int_in, run_cli
from utils.eval.benchmark import PYTORCH, BenchmarkCommand, run
from utils.torch_utils import fit_threads_to_idle_cores

__all__ = ["BenchmarkCommand", "main", "parse_opt", "run"]


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (YOLOv5 benchmarks.py flags; --include or --format as Ultralytics' format filter)."""
    parser = Parser(
        prog="benchmark.py",
        description="Export weights to every format that runs here and measure each on a data YAML's val images: "
        "size, mAP50-95, mAP50, median forward pass, detect.py's wall time",
    )
    add = parser.add_argument
    add("--weights", default="yolov5s.pt", help="weights to benchmark: ours, or official YOLOv5/YOLOv8/YOLO11/YOLO26")
    add("--data", default="coco128.yaml", help="data YAML whose val images every format is measured on")
    size_help = "image size (default: the weights' training size; static exports keep the size they hold)"
    add("--img-size", "--img", "--imgsz", dest="imgsz", type=int_in(32, 8192), default=None, help=size_help)
    add("--batch-size", type=int_in(1, 1024), default=16, help="test.py's batch size for the mAP")
    add("--device", default="cpu", help="cpu, or a CUDA device: 0")
    add("--half", action="store_true", help="FP16 exports (CUDA; NCNN, LiteRT and CoreML on any device)")
    add("--int8", action="store_true", help="INT8 exports, calibrated on --data (formats without INT8 say so)")
    choices = [PYTORCH, *FORMATS]
    add("--include", "--format", nargs="+", choices=choices, default=None, help=f"only these: {', '.join(choices)}")
    add("--workers", type=int_in(0, 64), default=8, help="test.py's data-loader workers")
    add("--project", default="runs/benchmark", help="save to project/name")
    add("--name", default="exp", help="save to project/name")
    add("--exist-ok", action="store_true", help="reuse project/name (a run folder) instead of incrementing it")
    add("--hard-fail", action="store_true", help="exit with an error when any format failed")
    opt = parser.parse_args(argv)
    if opt.half and opt.int8:
        parser.error("--half and --int8 are exclusive: pick one precision")
    return opt


def main(argv: list[str] | None = None, fit_threads: bool = False) -> int:
    """Benchmark from the command line; 0 on success, 1 with one ERROR line on a bad input (a format's failure is
    its row's reason, not an error, unless --hard-fail)."""
    opt = parse_opt(argv)
    if fit_threads:
        fit_threads_to_idle_cores()
    return run_cli(lambda: run(**vars(opt)) and None)


if __name__ == "__main__":
    sys.exit(main(fit_threads=True))
