"""Validate a detector (YOLOv5, YOLOv8, YOLO11 or YOLO26 weights, or their exports) on a dataset split: COCO
metrics, YOLOv5's table, speed and results.json.

Usage (the flags of YOLOv5's test.py / val.py):
    python test.py --data coco128.yaml --weights yolov5s.pt --img 640
    python test.py --data coco.yaml --weights yolov5n.pt --save-json        # also scored by pycocotools
    python test.py --data coco128.yaml --weights yolov5n.pt --task speed    # speed only (conf 0.25, IoU 0.45)
    python test.py --data coco128.yaml --weights a.pt b.pt --augment       # ensemble, test-time augmentation
    python test.py --ann-json instances_val2017.json --pred-json predictions.json   # score a results file

The numbers are the COCO protocol's (AP at IoU 0.50:0.95, 0.50, ...), computed in memory by utils/eval/validate.py
(evaluate), with the weights loaded and the loader built by utils/eval/validate_weights.py;
P and R are YOLOv5's, at the confidence of maximal mean F1. A segment model (yolov5n-seg, yolo11n-seg, ...) is also
scored on its masks at the original resolution (COCO 'segm': results.json mask_metrics, predictions.json RLEs).
"""

import argparse
import sys

from utils.cli import Parser, float_in, int_in, run_cli
from utils.errors import TestError
from utils.eval.options import TASKS, TestCommand

__all__ = ["TestCommand", "main", "parse_opt", "run", "score_files"]


def run(data="coco128.yaml", **options):
    """utils.eval.validate_weights.run (imported when called: scoring a results file needs no torch)."""
    from utils.eval.validate_weights import run as validate_weights

    return validate_weights(data, **options)


def score_files(ann_json, pred_json, project="runs/test", name="exp", exist_ok=False):
    """utils.eval.scoring.score_files: a COCO results file against a COCO annotations file."""
    from utils.eval.scoring import score_files as score

    return score(ann_json, pred_json, project, name, exist_ok)


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options: YOLOv5 test.py flags (ensembles, --augment), --bf16, --no-plots (or train.py's
    --noplots), --ann-json, --pred-json"""
    parser = Parser(
        prog="test.py",
        description="Validate YOLOv5, YOLOv8, YOLO11 or YOLO26 weights (or their exports) on a dataset split: COCO "
        "metrics. The image size and thresholds not given are the model's: its training size and its family's "
        "validation thresholds (an ensemble: its first model's). Or score a COCO results file (--pred-json).",
    )
    add = parser.add_argument
    add("--data", type=str, default="coco128.yaml", help="data YAML")
    weights_help = (
        "model weights: .pt or an export (.torchscript, .onnx, *_openvino_model, .engine); several .pt: an ensemble"
    )
    add("--weights", nargs="+", type=str, default=None, help=weights_help)
    add("--batch-size", type=int_in(1), default=32, help="batch size")
    size_help = "inference size (pixels; default: the size the weights were trained at, else 640)"
    add("--img-size", "--img", "--imgsz", dest="imgsz", type=int_in(32), default=None, help=size_help)
    conf_help = "confidence threshold (default: the family's, 0.001)"
    add("--conf-thres", type=float_in(0, 1), default=None, help=conf_help)
    iou_help = "NMS IoU threshold (default: the family's, YOLOv5 0.6, YOLOv8/YOLO11/YOLO26 0.7)"
    add("--iou-thres", type=float_in(0, 1), default=None, help=iou_help)
    add("--max-det", type=int_in(1), default=300, help="maximum detections per image")
    add("--task", default="val", choices=TASKS, help="split to validate, or 'speed' (the family's detect thresholds)")
    add("--device", default="", help="cuda device, i.e. 0 or 0,1,2,3 or cpu")
    half = parser.add_mutually_exclusive_group()
    half.add_argument("--half", dest="half", action="store_true", default=None, help="FP16 inference (CUDA)")
    half.add_argument("--no-half", dest="half", action="store_false", help="float32 even on fast-FP16 GPUs")
    add("--bf16", action="store_true", help="bfloat16 autocast on CPUs with AVX512-BF16 or AMX")
    add("--workers", type=int_in(0), default=8, help="max dataloader workers")
    augment_help = "test-time augmentation: the image, 0.83x flipped and 0.67x views, merged before NMS"
    add("--augment", action="store_true", help=augment_help)
    add("--single-cls", action="store_true", help="treat as a single-class dataset")
    add("--verbose", action="store_true", help="report mAP by class")
    add("--save-txt", action="store_true", help="save results to *.txt")
    add("--save-conf", action="store_true", help="save confidences in --save-txt labels")
    json_help = "save a COCO results JSON (a segment model's with RLE masks) and check it with pycocotools"
    add("--save-json", action="store_true", help=json_help)
    add("--project", default="runs/test", help="save to project/name")
    add("--name", default="exp", help="save to project/name")
    add("--exist-ok", action="store_true", help="existing project/name ok, do not increment")
    add("--no-plots", "--noplots", dest="plots", action="store_false", help="save no plots")
    add("--ann-json", default=None, help="COCO annotations JSON used as ground truth")
    add("--pred-json", default=None, help="with --ann-json: score this COCO results JSON (no model is run)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, fit_threads: bool = False) -> int:
    """Validate from the command line; 0 on success, 1 with a one-line error otherwise. fit_threads: fit torch's
    threads to the idle cores (the command line; the Python API leaves torch's threads to its caller)."""
    opt = parse_opt(argv)
    return run_cli(lambda: _command(TestCommand(**vars(opt)), fit_threads))


def _command(o: TestCommand, fit_threads: bool) -> None:
    """Score a results file (--pred-json) or validate the weights."""
    if o.pred_json:
        if not o.ann_json:
            raise TestError("--pred-json needs --ann-json, the COCO annotations to score it against")
        score_files(o.ann_json, o.pred_json, o.project, o.name, o.exist_ok)
        return
    from utils.torch_utils import fit_threads_to_idle_cores

    if fit_threads:
        fit_threads_to_idle_cores()
    run(**{k: v for k, v in vars(o).items() if k != "pred_json"})


if __name__ == "__main__":
    sys.exit(main(fit_threads=True))
