"""Validate a YOLOv5 detector on a dataset split: COCO metrics, YOLOv5's table, speed and results.json.

Usage (the flags of YOLOv5's test.py / val.py):
    python test.py --data coco128.yaml --weights yolov5s.pt --img 640
    python test.py --data coco.yaml --weights yolov5n.pt --save-json        # also scored by pycocotools
    python test.py --data coco128.yaml --weights yolov5n.pt --task speed    # speed only (conf 0.25, IoU 0.45)
    python test.py --data coco128.yaml --weights a.pt b.pt --augment       # ensemble, test-time augmentation
    python test.py --ann-json instances_val2017.json --pred-json predictions.json   # score a results file

The numbers are the COCO protocol's (AP at IoU 0.50:0.95, 0.50, ...), computed in memory by utils/eval/validate.py
(evaluate), with the weights loaded and the loader built by utils/eval/validate_weights.py;
P and R are YOLOv5's, at the confidence of maximal mean F1.
"""

import argparse
import sys

from utils.cli import Parser, float_in, int_in, run_cli
from utils.errors import TestError
from utils.eval.validate_weights import TASKS, run, score_files
from utils.torch_utils import fit_threads_to_idle_cores

__all__ = ["main", "parse_opt", "run", "score_files"]


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options: YOLOv5 test.py flags (ensembles, --augment), --bf16, --no-plots (or train.py's
    --noplots), --ann-json, --pred-json"""
    parser = Parser(description="Validate a YOLOv5 detector (COCO metrics)")
    parser.add_argument("--data", type=str, default="coco128.yaml", help="data YAML")
    parser.add_argument(
        "--weights", nargs="+", type=str, default=None, help="model weights (.pt); several: an ensemble"
    )
    parser.add_argument("--batch-size", type=int_in(1), default=32, help="batch size")
    parser.add_argument(
        "--img-size", "--img", "--imgsz", dest="imgsz", type=int_in(32), default=640, help="inference size (pixels)"
    )
    parser.add_argument("--conf-thres", type=float_in(0, 1), default=0.001, help="confidence threshold")
    parser.add_argument("--iou-thres", type=float_in(0, 1), default=0.6, help="NMS IoU threshold")
    parser.add_argument("--max-det", type=int_in(1), default=300, help="maximum detections per image")
    parser.add_argument("--task", default="val", choices=TASKS, help="split to validate, or 'speed'")
    parser.add_argument("--device", default="", help="cuda device, i.e. 0 or 0,1,2,3 or cpu")
    half = parser.add_mutually_exclusive_group()
    half.add_argument("--half", dest="half", action="store_true", default=None, help="FP16 inference (CUDA)")
    half.add_argument("--no-half", dest="half", action="store_false", help="float32 even on fast-FP16 GPUs")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast on CPUs with AVX512-BF16 or AMX")
    parser.add_argument("--workers", type=int_in(0), default=8, help="max dataloader workers")
    augment_help = "test-time augmentation: the image, 0.83x flipped and 0.67x views, merged before NMS"
    parser.add_argument("--augment", action="store_true", help=augment_help)
    parser.add_argument("--single-cls", action="store_true", help="treat as a single-class dataset")
    parser.add_argument("--verbose", action="store_true", help="report mAP by class")
    parser.add_argument("--save-txt", action="store_true", help="save results to *.txt")
    parser.add_argument("--save-conf", action="store_true", help="save confidences in --save-txt labels")
    parser.add_argument(
        "--save-json", action="store_true", help="save a COCO results JSON and check it with pycocotools"
    )
    parser.add_argument("--project", default="runs/test", help="save to project/name")
    parser.add_argument("--name", default="exp", help="save to project/name")
    parser.add_argument("--exist-ok", action="store_true", help="existing project/name ok, do not increment")
    parser.add_argument("--no-plots", "--noplots", dest="plots", action="store_false", help="save no plots")
    parser.add_argument("--ann-json", default=None, help="COCO annotations JSON used as ground truth")
    parser.add_argument(
        "--pred-json", default=None, help="with --ann-json: score this COCO results JSON (no model is run)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Validate from the command line; 0 on success, 1 with a one-line error otherwise."""
    opt = parse_opt(argv)
    return run_cli(lambda: _command(opt))


def _command(opt: argparse.Namespace) -> None:
    """Score a results file (--pred-json) or validate the weights."""
    if opt.pred_json:
        if not opt.ann_json:
            raise TestError("--pred-json needs --ann-json, the COCO annotations to score it against")
        score_files(opt.ann_json, opt.pred_json, opt.project, opt.name, opt.exist_ok)
        return
    run(**{k: v for k, v in vars(opt).items() if k != "pred_json"})


if __name__ == "__main__":
    fit_threads_to_idle_cores()  # a command line only: the Python API leaves torch's threads to its caller
    sys.exit(main())
