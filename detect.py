"""Run a YOLOv5 detector on images, folders, globs, .txt lists, videos, webcams and streams.

Usage (the flags of YOLOv5's detect.py):
    python detect.py --weights yolov5s.pt --source path/to/images          # folder, image, video, glob, list.txt
    python detect.py --weights yolov5n.pt --source 0                       # webcam
    python detect.py --weights yolov5n.pt --source rtsp://host/stream --view-img
    python detect.py --weights yolov5n.pt --source img.jpg --save-txt --save-conf --save-crop
    python detect.py --weights a.pt b.pt --source img.jpg --augment          # ensemble, test-time augmentation
"""

import argparse
import sys
from pathlib import Path

from models import load_detector
from utils.cli import Parser, run_cli
from utils.errors import DetectError
from utils.infer.outputs import OutputOptions, Outputs, make_save_dir
from utils.infer.predict import LIMITS, DetectRun, PredictOptions, Predictor, check_options
from utils.infer.sources import check_source
from utils.log import LOGGER
from utils.torch_utils import fit_threads_to_idle_cores, select_device

SWITCHES = {  # store_true flags: the output switches and NMS modes
    "--view-img": "show results",
    "--save-txt": "save results to labels/*.txt",
    "--save-conf": "save confidences in --save-txt labels",
    "--save-crop": "save cropped boxes to crops/<class>/",
    "--nosave": "do not save images or videos",
    "--agnostic-nms": "class-agnostic NMS",
    "--exist-ok": "reuse project/name instead of incrementing it",
    "--hide-labels": "hide labels",
    "--hide-conf": "hide confidences",
    "--bf16": "bfloat16 autocast on CPUs with AVX512-BF16 or AMX",
    "--augment": "test-time augmentation: the image, 0.83x flipped and 0.67x views, merged before NMS",
}


def run(
    weights: str | Path | list = "yolov5s.pt",
    source: str | Path = "data/images",
    imgsz: int | list[int] | tuple[int, ...] = (640, 640),
    conf_thres: float = 0.25,
    iou_thres: float = 0.45,
    max_det: int = 1000,
    device: str = "",
    view_img: bool = False,
    save_txt: bool = False,
    save_conf: bool = False,
    save_crop: bool = False,
    nosave: bool = False,
    classes: list[int] | None = None,
    agnostic_nms: bool = False,
    project: str | Path = "runs/detect",
    name: str = "exp",
    exist_ok: bool = False,
    line_thickness: int | None = None,
    hide_labels: bool = False,
    hide_conf: bool = False,
    half: bool | None = None,
    vid_stride: int = 1,
    bf16: bool = False,
    augment: bool = False,
) -> DetectRun:
    """Detect objects in every image or frame of source; save annotated media and labels as asked.

    Raises DetectError, CheckpointError, DownloadError, SourceError or DeviceError (one-line messages) on bad input.
    """
    limited = dict(imgsz=imgsz, conf_thres=conf_thres, iou_thres=iou_thres, max_det=max_det, classes=classes)
    check_options(**limited, line_thickness=line_thickness, vid_stride=vid_stride)
    device = select_device(device)
    checked = check_source(source)  # first, so a typo in --source fails at once rather than after a download
    model, precision = load_detector(weights, device, half, bf16, augment)
    options = PredictOptions(imgsz, conf_thres, iou_thres, classes, agnostic_nms, max_det, vid_stride)
    predictor = Predictor(model, device, options, precision)
    save_dir = make_save_dir(project, name, exist_ok)
    shown = (view_img, line_thickness, hide_labels, hide_conf)
    options = OutputOptions(not nosave, save_txt, save_conf, save_crop, *shown)
    inputs = [*checked.images, *checked.videos, checked.text]  # the text: a .txt list is an input too
    outputs = Outputs(save_dir, predictor.names, options, inputs=[] if checked.stream else inputs)
    out = DetectRun(save_dir=save_dir, names=predictor.names)
    try:
        for prediction in predictor.stream(checked):
            out.results.append(prediction.result)
            if not outputs.write(prediction):
                break
    finally:
        outputs.close()
    out.skipped = list(predictor.skipped)
    if out.results:
        out.speed_ms = predictor.speed_ms
        LOGGER.info(predictor.speed_line())
        if outputs.saved_line():
            LOGGER.info(outputs.saved_line())
    return out


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (YOLOv5 detect.py flags, plus --bf16)."""
    parser = Parser(prog="detect.py", description="YOLOv5 object detection on images, videos and streams")
    add, limit = parser.add_argument, {key: parse for key, (_, parse) in LIMITS.items()}
    weights_help = "model path(s), several = an ensemble; official names are downloaded to weights/"
    add("--weights", nargs="+", default=["yolov5s.pt"], help=weights_help)
    add("--source", default="data/images", help="file, dir, glob, .txt list, video, webcam (0), rtsp/rtmp/http(s)")
    size_help = "inference size: one value, or h w (1-8192, rounded up to the stride)"
    add("--img-size", "--img", "--imgsz", dest="imgsz", nargs="+", type=limit["imgsz"], default=[640], help=size_help)
    add("--conf-thres", type=limit["conf_thres"], default=0.25, help="confidence threshold [0, 1]")
    add("--iou-thres", type=limit["iou_thres"], default=0.45, help="NMS IoU threshold [0, 1]")
    add("--max-det", type=limit["max_det"], default=1000, help="maximum detections per image")
    add("--device", default="", help="'' (auto), cpu, 0, or 0,1")
    add("--classes", nargs="+", type=limit["classes"], help="keep only these class ids: --classes 0, or 0 2 3")
    add("--project", default="runs/detect", help="save results to project/name")
    add("--name", default="exp", help="save results to project/name")
    thickness_help = "box line width in pixels (1-100); None: 0.3%% of the mean image side, at least 2 (as YOLOv5)"
    add("--line-thickness", default=None, type=limit["line_thickness"], help=thickness_help)
    half_help = "FP16 inference on CUDA (default: on for GPUs with fast FP16; never on CPU)"
    add("--half", action=argparse.BooleanOptionalAction, default=None, help=half_help)
    add("--vid-stride", type=limit["vid_stride"], default=1, help="video frame-rate stride")
    for flag, text in SWITCHES.items():
        add(flag, action="store_true", help=text)
    opt = parser.parse_args(argv)
    if len(opt.imgsz) > 2:
        parser.error(f"--img-size takes one or two values, got {len(opt.imgsz)}")
    opt.imgsz = opt.imgsz * 2 if len(opt.imgsz) == 1 else opt.imgsz
    return opt


def main(argv: list[str] | None = None) -> int:
    """Run detection from the command line; 0 when at least one image or frame was processed."""
    opt = parse_opt(argv)
    return run_cli(lambda: _command(opt))


def _command(opt: argparse.Namespace) -> None:
    """Run detection; an error when no image or frame could be read."""
    if not run(**vars(opt)).results:
        raise DetectError(f"no image or frame of {opt.source} could be read")


if __name__ == "__main__":
    fit_threads_to_idle_cores()  # a command line only: the Python API leaves torch's threads to its caller
    sys.exit(main())
