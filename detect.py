"""Run a detector (YOLOv5, YOLOv8, YOLO11 or YOLO26 weights, or their exports) on images, folders, globs, .txt lists,
videos, webcams and streams.

Usage (YOLOv5's detect.py flags; --img and the thresholds default to the model's training size and family's):
    python detect.py --weights yolov5s.pt --source path/to/images          # folder, image, video, glob, list.txt
    python detect.py --weights yolov5n.pt --source 0                       # webcam
    python detect.py --weights yolov5n.pt --source rtsp://host/stream --view-img
    python detect.py --weights yolov5n.pt --source img.jpg --save-txt --save-conf --save-crop
    python detect.py --weights a.pt b.pt --source img.jpg --augment          # ensemble, test-time augmentation
    python detect.py --weights yolo11n.pt --source clip.mp4 --track bytetrack.yaml  # identities (alone: default)
"""

import argparse

from models import load_detector
from utils.cli import Parser, run_cli
from utils.errors import DetectError
from utils.infer.outputs import OutputOptions, Outputs, make_save_dir
from utils.infer.predict import (
    LIMITS,
    DetectCommand,
    DetectRun,
    PredictOptions,
    Predictor,
    check_options,
    detect_all,
    tracking_session,
)
from utils.infer.sources import check_source
from utils.torch_utils import fit_threads_to_idle_cores, select_device
from utils.track.config import DEFAULT_TRACKER

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


def run(**options) -> DetectRun:
    """Detect objects in every image or frame of source (keywords: DetectCommand's fields); save annotated media
    and labels as asked.

    Raises DetectError, CheckpointError, DownloadError, SourceError or DeviceError (one-line messages) on bad input.
    """
    o = DetectCommand(**options)
    limited = dict(imgsz=o.imgsz, conf_thres=o.conf_thres, iou_thres=o.iou_thres, max_det=o.max_det, classes=o.classes)
    check_options(**limited, line_thickness=o.line_thickness, vid_stride=o.vid_stride)
    if o.source is None:
        raise DetectError("give --source: an image, a folder, a glob, a .txt list, a video, a webcam (0) or a stream")
    device = select_device(o.device)
    checked = check_source(o.source)  # first, so a typo in --source fails at once rather than after a download
    session = tracking_session(o.track, checked)
    model, precision = load_detector(o.weights, device, o.half, o.bf16, o.augment)
    conf = session.config.track_low_thresh if session and o.conf_thres is None else o.conf_thres  # for 2nd stage
    predict = PredictOptions(
        img_size=o.imgsz,
        conf_thres=conf,
        iou_thres=o.iou_thres,
        classes=o.classes,
        agnostic=o.agnostic_nms,
        max_det=o.max_det,
        vid_stride=o.vid_stride,
    )
    predictor = Predictor(model, device, predict, precision)
    save_dir = make_save_dir(o.project, o.name, o.exist_ok)
    inputs = [*checked.images, *checked.videos, checked.text]  # the text: a .txt list is an input too
    outputs = Outputs(save_dir, predictor.names, output_options(o), inputs=[] if checked.stream else inputs)
    return detect_all(predictor, checked, outputs, save_dir, session)


def output_options(o: DetectCommand) -> OutputOptions:
    """What detect.py writes and shows."""
    return OutputOptions(
        save_img=not o.nosave,
        save_txt=o.save_txt,
        save_conf=o.save_conf,
        save_crop=o.save_crop,
        view_img=o.view_img,
        line_thickness=o.line_thickness,
        hide_labels=o.hide_labels,
        hide_conf=o.hide_conf,
    )


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (YOLOv5 detect.py flags, plus --bf16)."""
    parser = Parser(
        prog="detect.py",
        description="Object detection on images, videos and streams with YOLOv5, YOLOv8, YOLO11 or YOLO26 weights "
        "(ours, official, or their exports). Sizes and thresholds not given are the model's: its training size "
        "and its family's thresholds (an ensemble: its first model's).",
    )
    add, limit = parser.add_argument, {key: parse for key, (_, parse) in LIMITS.items()}
    weights_help = "model path(s): .pt or an export; several .pt = an ensemble; official names are downloaded"
    add("--weights", nargs="+", default="yolov5s.pt", help=weights_help)
    add("--source", default=None, help="file, dir, glob, .txt list, video, webcam (0), rtsp/rtmp/http(s) (required)")
    size_help = "inference size: one value, or h w (1-8192, rounded up to the stride; default: the training size)"
    add("--img-size", "--img", "--imgsz", dest="imgsz", nargs="+", type=limit["imgsz"], default=None, help=size_help)
    conf_help = "confidence threshold [0, 1] (default: the family's, 0.25)"
    add("--conf-thres", type=limit["conf_thres"], default=None, help=conf_help)
    iou_help = "NMS IoU threshold [0, 1] (default: the family's, YOLOv5 0.45, YOLOv8/YOLO11/YOLO26 0.7)"
    add("--iou-thres", type=limit["iou_thres"], default=None, help=iou_help)
    max_det_help = "maximum detections per image (default: the family's, 1000; YOLO26 gives at most 300)"
    add("--max-det", type=limit["max_det"], default=None, help=max_det_help)
    add("--device", default="", help="'' (auto), cpu, 0, or 0,1")
    add("--classes", nargs="+", type=limit["classes"], help="keep only these class ids: --classes 0, or 0 2 3")
    add("--project", default="runs/detect", help="save results to project/name")
    add("--name", default="exp", help="save results to project/name")
    thickness_help = "box line width in pixels (1-100); None: 0.3%% of the mean image side, at least 2 (as YOLOv5)"
    add("--line-thickness", default=None, type=limit["line_thickness"], help=thickness_help)
    half_help = "FP16 inference on CUDA (default: on for GPUs with fast FP16; never on CPU)"
    add("--half", action=argparse.BooleanOptionalAction, default=None, help=half_help)
    add("--vid-stride", type=limit["vid_stride"], default=1, help="video frame-rate stride")
    add("--track", nargs="?", const=DEFAULT_TRACKER, metavar="TRACKER", help="bytetrack/botsort/ocsort/tracktrack.yaml")
    for flag, text in SWITCHES.items():
        add(flag, action="store_true", help=text)
    opt = parser.parse_args(argv)
    if opt.imgsz is not None:
        if len(opt.imgsz) > 2:
            parser.error(f"--img-size takes one or two values, got {len(opt.imgsz)}")
        opt.imgsz = opt.imgsz * 2 if len(opt.imgsz) == 1 else opt.imgsz
    return opt


def main(argv: list[str] | None = None, fit_threads: bool = False) -> int:
    """The command line: 0 when an image or frame was processed; fit_threads fits torch's threads to idle cores."""
    opt = parse_opt(argv)
    return run_cli(lambda: _command(opt, fit_threads))


def _command(opt: argparse.Namespace, fit_threads: bool) -> None:
    """Run detection; an error when no image or frame could be read."""
    if fit_threads:
        fit_threads_to_idle_cores()
    if not run(**vars(opt)).frames:
        raise DetectError(f"no image or frame of {opt.source} could be read")


if __name__ == "__main__":
    raise SystemExit(main(fit_threads=True))
