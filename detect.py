"""Run a YOLOv5 detector on images, folders, globs, .txt lists, videos, webcams and streams.

Usage (the flags of YOLOv5's detect.py):
    python detect.py --weights yolov5s.pt --source path/to/images          # folder, image, video, glob, list.txt
    python detect.py --weights yolov5n.pt --source 0                       # webcam
    python detect.py --weights yolov5n.pt --source rtsp://host/stream --view-img
    python detect.py --weights yolov5n.pt --source img.jpg --save-txt --save-conf --save-crop
"""

import argparse
import contextlib
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch

from models import load_model
from models.checkpoint import CheckpointError
from utils.augment import check_img_size as _check_img_size
from utils.boxes import non_max_suppression, scale_boxes, xyxy2xywh
from utils.cli import Parser, float_in, int_in, run_cli
from utils.downloads import attempt_download_weights
from utils.errors import YoloError
from utils.files import increment_path
from utils.log import LOGGER
from utils.plots import Annotator, colors, imwrite, save_one_box
from utils.sources import load_sources
from utils.torch_utils import prepare_for_inference, select_device, time_sync


class DetectError(YoloError):
    """An option detect cannot run with (out of range, a class the model lacks, no output folder); one line."""


# Valid range of each numeric option, shared by the command line (argparse types) and run() (check_options).
LIMITS = {
    "imgsz": ("--img-size", int_in(1, 8192)),  # rounded up to the model's stride; larger would exhaust memory
    "conf_thres": ("--conf-thres", float_in(0, 1)),
    "iou_thres": ("--iou-thres", float_in(0, 1)),
    "max_det": ("--max-det", int_in(1)),
    "classes": ("--classes", int_in(0)),
    "line_thickness": ("--line-thickness", int_in(1, 100)),  # OpenCV crashes on negative or huge thicknesses
    "vid_stride": ("--vid-stride", int_in(1)),
}


def check_options(**options) -> None:
    """Raise DetectError naming the option and its valid range when a value of run() is outside LIMITS."""
    imgsz = options.get("imgsz")
    if isinstance(imgsz, (list, tuple)) and len(imgsz) not in (1, 2):
        raise DetectError(f"--img-size (imgsz=) takes one or two values, got {len(imgsz)}")
    for key, value in options.items():
        flag, parse = LIMITS[key]
        values = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
        for v in values:
            try:
                if isinstance(v, bool):  # True would pass as the integer 1
                    raise argparse.ArgumentTypeError(f"must be a number, got {v!r}")
                parse(str(int(v) if isinstance(v, float) and v.is_integer() else v))
            except argparse.ArgumentTypeError as e:
                raise DetectError(f"{flag} ({key}=): {e}") from None


@dataclass
class ImageResult:
    """Detections on one image or video frame, in original-image pixels."""

    path: str
    frame: int  # 0 for images, 1-based frame index for videos and streams
    shape: tuple[int, int]  # original (height, width)
    boxes: np.ndarray  # (n, 6): x1, y1, x2, y2, conf, class
    inference_ms: float


@dataclass
class DetectRun:
    """What run() did: where it saved, per-image detections, mean times and the inputs it skipped."""

    save_dir: Path
    names: list[str]
    results: list[ImageResult] = field(default_factory=list)
    speed_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # pre-process, inference, NMS per image
    skipped: list[str] = field(default_factory=list)


def check_img_size(imgsz: int | list[int] | tuple[int, ...], stride: int = 32) -> list[int]:
    """[h, w] image size rounded up to multiples of stride (with a warning when it changes)."""
    size = [int(imgsz)] * 2 if isinstance(imgsz, (int, float)) else [int(v) for v in imgsz]
    return _check_img_size(size * 2 if len(size) == 1 else size, stride)


def _display_available() -> bool:
    """Whether cv2.imshow can open a window (OpenCV aborts rather than raising without a display on Linux)."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        cv2.imshow("test", np.zeros((8, 8, 3), dtype=np.uint8))
        cv2.waitKey(1)
        cv2.destroyWindow("test")
        return True
    except cv2.error:
        return False


def _resolve_weights(weights: str | Path | list | tuple) -> Path:
    """One weights path, downloading an official release file into weights/ when it is missing."""
    if isinstance(weights, (list, tuple)):
        if len(weights) != 1:
            raise CheckpointError(f"give one --weights file ({len(weights)} given; ensembles are not supported)")
        weights = weights[0]
    return attempt_download_weights(weights)


def _summary(counts: Counter, names: list[str]) -> str:
    """'4 persons, 1 bus, ' in class order, or '(no detections), '."""
    if not counts:
        return "(no detections), "
    return "".join(f"{n} {names[c]}{'s' * (n > 1)}, " for c, n in sorted(counts.items()))


def _write_labels(file: Path, det: torch.Tensor, shape: tuple[int, int], save_conf: bool) -> None:
    """Write 'cls cx cy w h [conf]' lines normalised to the original image size."""
    gain = torch.tensor(shape)[[1, 0, 1, 0]]  # w, h, w, h
    lines = []
    for *xyxy, conf, cls in reversed(det.tolist()):  # lowest confidence first, as YOLOv5 writes them
        xywh = (xyxy2xywh(torch.tensor(xyxy).view(1, 4)) / gain).view(-1).tolist()
        values = (cls, *xywh, conf) if save_conf else (cls, *xywh)
        lines.append(("%g " * len(values)).rstrip() % values)
    file.write_text("\n".join(lines) + "\n")


def output_stem(stem: str, frame: int = 0) -> str:
    """Stem of the label, crop and image files of one image (frame 0) or one video frame ('clip_12')."""
    return stem if frame == 0 else f"{stem}_{frame}"


def crop_folder(name: str, cls: int) -> str:
    """A class name usable as one folder under crops/: path separators replaced, '', '.' and '..' named by id."""
    folder = str(name).replace("/", "_").replace("\\", "_").strip()
    return folder if folder.strip(".") else f"class{cls}"


class OutputNames:
    """A unique output stem per input, so inputs with the same stem never overwrite each other's outputs.

    The first input keeps its own stem (labels/<stem>.txt, as YOLOv5 users expect); later ones get <stem>_2, _3 ...
    with a warning. A video's stem also must not make frame names (<stem>_<n>) that equal another input's stem."""

    MAX_BYTES = 200  # room for '_<n>', '_<frame>' and the extension within the usual 255-byte file name limit

    def __init__(self):
        self.images: set[str] = set()  # casefolded stems, so names stay unique on case-insensitive file systems
        self.videos: set[str] = set()
        self.tried: dict[str, int] = {}  # last suffix tried per stem: thousands of '0001.jpg' stay linear

    def _free(self, stem: str, video: bool) -> bool:
        key = stem.casefold()
        if key in self.images or key in self.videos:
            return False
        if video:  # its frames would be named like an image already seen
            frame_name = re.compile(re.escape(key) + r"_\d+")
            return not any(frame_name.fullmatch(s) for s in self.images)
        return not any(re.fullmatch(re.escape(v) + r"_\d+", key) for v in self.videos)

    def claim(self, path: str, video: bool = False) -> str:
        """The stem under which the outputs of the input at path are saved (call once per input)."""
        wanted = Path(path).stem.encode()[: self.MAX_BYTES].decode(errors="ignore") or "input"
        stem, n = wanted, self.tried.get(wanted.casefold(), 1)
        if n > 1:
            stem = f"{wanted}_{n}"
        while not self._free(stem, video):
            n += 1
            stem = f"{wanted}_{n}"
        self.tried[wanted.casefold()] = n
        (self.videos if video else self.images).add(stem.casefold())
        if stem != Path(path).stem:
            why = "an earlier input has the same name" if stem != wanted else "its name is too long"
            LOGGER.warning("WARNING: outputs of %s are saved as %s.* (%s)", path, stem, why)
        return stem


class _Outputs:
    """Everything run() writes or shows for one image or frame: labels, crops, annotated images, videos, windows."""

    def __init__(
        self,
        save_dir: Path,
        names: list[str],
        save_img: bool,
        save_txt: bool,
        save_conf: bool,
        save_crop: bool,
        view_img: bool,
        line_thickness: int,
        hide_labels: bool,
        hide_conf: bool,
    ):
        self.save_dir, self.names = save_dir, names
        self.save_img, self.save_txt, self.save_conf, self.save_crop = save_img, save_txt, save_conf, save_crop
        self.view_img, self.line_thickness = view_img, line_thickness
        self.hide_labels, self.hide_conf = hide_labels, hide_conf
        self.writes = save_img or save_txt or save_crop  # whether any file is written per input
        self.names_taken = OutputNames()
        self.input_index, self.stem, self.frame = -1, "", 0  # the input being handled
        self.writer: cv2.VideoWriter | None = None
        self.writer_path = ""
        if save_txt:
            (save_dir / "labels").mkdir(parents=True, exist_ok=True)
        if view_img and not _display_available():
            LOGGER.warning("WARNING: --view-img needs a display, none is available here; not showing images")
            self.view_img = False

    def locate(self, path: str, index: int, mode: str) -> tuple[str, int]:
        """(output stem, frame number) of the next image or frame: a new stem per input, frames counted from 1."""
        video = mode != "image"
        if index != self.input_index or not video:  # a new input (the same file may come again, under a new name)
            # Names are claimed only when files are written: a --nosave run (a benchmark repeating one image,
            # say) has nothing to keep apart and nothing to warn about.
            self.stem = self.names_taken.claim(path, video) if self.writes else Path(path).stem
            self.input_index, self.frame = index, 0
        self.frame = self.frame + 1 if video else 0  # images are frame 0
        return self.stem, self.frame

    def handle(self, stem: str, path: str, frame: int, im0: np.ndarray, det: torch.Tensor, cap, fps: float) -> bool:
        """Write labels, crops and the annotated image or frame under the input's unique stem (OutputNames);
        False when the viewer asked to stop ('q')."""
        p, name = Path(path), output_stem(stem, frame)
        if self.save_txt and len(det):
            _write_labels(self.save_dir / "labels" / f"{name}.txt", det, im0.shape[:2], self.save_conf)
        if not (self.save_img or self.save_crop or self.view_img):
            return True
        crop_source = im0.copy() if self.save_crop else None
        annotator = Annotator(im0, line_width=self.line_thickness)
        for *xyxy, conf, cls in reversed(det.tolist()):
            c, cls_name = int(cls), self.names[int(cls)]
            if self.save_img or self.view_img:
                label = "" if self.hide_labels else (cls_name if self.hide_conf else f"{cls_name} {conf:.2f}")
                annotator.box_label(xyxy, label, color=colors(c, bgr=True))
            if self.save_crop:
                save_one_box(xyxy, crop_source, file=self.save_dir / "crops" / crop_folder(cls_name, c) / f"{name}.jpg")
        annotated = annotator.result()
        if self.save_img:
            if frame == 0:
                self._write_image(self.save_dir / f"{name}{p.suffix}", annotated)
            else:
                self._write_frame(self.save_dir / f"{stem}.mp4", annotated, cap, fps)
        if self.view_img:
            cv2.imshow(str(p), annotated)
            return cv2.waitKey(1) != ord("q")
        return True

    @staticmethod
    def _write_image(file: Path, image: np.ndarray) -> None:
        """Save an annotated image in its input's format, or as .jpg where OpenCV cannot write that format."""
        if not imwrite(file, image) and not imwrite(file.with_suffix(".jpg"), image):
            LOGGER.warning("WARNING: could not write %s", file)

    def _write_frame(self, save_path: Path, image: np.ndarray, cap, fps: float) -> None:
        """Append a frame to the .mp4 of its video or stream (one open video at a time)."""
        if str(save_path) != self.writer_path:
            self.close()
            fps = (cap.get(cv2.CAP_PROP_FPS) if cap is not None else fps) or 30.0
            h, w = image.shape[:2]
            self.writer = cv2.VideoWriter(str(save_path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
            self.writer_path = str(save_path)
            if not self.writer.isOpened():  # no mp4v encoder in this OpenCV build, or an unwritable folder
                LOGGER.warning("WARNING: cannot write video %s; its frames are not saved", save_path)
        self.writer.write(image)

    def close(self) -> None:
        """Finish the open video, if any."""
        if self.writer is not None:
            self.writer.release()
            self.writer, self.writer_path = None, ""


def _shapes_text(shapes: list[tuple[int, ...]]) -> str:
    """'shape (1, 3, 480, 640)', 'shapes (1, 3, 640, 480), (1, 3, 384, 640)', or the count and the last one."""
    if len(shapes) == 1:
        return f"shape {shapes[0]}"
    if len(shapes) <= 3:
        return f"shapes {', '.join(map(str, shapes))}"
    return f"{len(shapes)} letterboxed shapes (last {shapes[-1]})"


def _make_save_dir(project: str | Path, name: str, exist_ok: bool) -> Path:
    """The run folder project/name (incremented unless exist_ok), created; DetectError when it cannot be."""
    if not str(name).strip():  # project/'' is project itself, which would be incremented to a sibling folder
        raise DetectError("--name is empty: give the run folder's name (default exp)")
    path = Path(project) / name
    try:
        return increment_path(path, exist_ok=exist_ok, mkdir=True)
    except OSError as e:  # --project is a file, read-only, or the name is too long
        raise DetectError(f"cannot create the output folder {path}: {e.strerror or e}") from None


def _prepare_model(weights, device: torch.device, half: bool | None, bf16: bool):
    """Load the model and apply the precision policy; returns (model, half, autocast context, channels_last)."""
    weights_path = _resolve_weights(weights)
    model, half, autocast, channels_last = prepare_for_inference(load_model(weights_path, device), device, half, bf16)
    dtype = "float16" if half else "float32" if isinstance(autocast, contextlib.nullcontext) else "bfloat16 autocast"
    LOGGER.info(
        "Model %s: %d parameters, %d classes, %s %s",
        weights_path,
        sum(p.numel() for p in model.parameters()),
        len(model.names),
        device,
        dtype,
    )
    return model, half, autocast, channels_last


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
    line_thickness: int = 3,
    hide_labels: bool = False,
    hide_conf: bool = False,
    half: bool | None = None,
    vid_stride: int = 1,
    bf16: bool = False,
) -> DetectRun:
    """Detect objects in every image or frame of source; save annotated media and labels as asked.

    Raises DetectError, CheckpointError, DownloadError, SourceError or DeviceError (one-line messages) on bad input.
    """
    check_options(
        imgsz=imgsz,
        conf_thres=conf_thres,
        iou_thres=iou_thres,
        max_det=max_det,
        classes=classes,
        line_thickness=line_thickness,
        vid_stride=vid_stride,
    )
    device = select_device(device)
    # The source is checked first, so a typo in it fails at once rather than after a weights download.
    dataset = load_sources(source, imgsz, stride=32, auto=True, vid_stride=vid_stride)
    model, half, autocast, channels_last = _prepare_model(weights, device, half, bf16)
    names, stride = list(model.names), int(model.stride.max())
    if classes is not None:  # one id may be given as a plain int, as YOLOv5 allows
        classes = [int(c) for c in (classes if isinstance(classes, (list, tuple)) else [classes])]
    unknown = sorted({c for c in classes or [] if c >= len(names)})
    if unknown:
        raise DetectError(f"--classes {' '.join(map(str, unknown))}: this model's class ids are in [0, {len(names)})")
    imgsz = check_img_size(imgsz, stride)
    dataset.img_size, dataset.stride = imgsz, stride  # loaders letterbox lazily, with these

    save_dir = _make_save_dir(project, name, exist_ok)
    outputs = _Outputs(
        save_dir, names, not nosave, save_txt, save_conf, save_crop, view_img, line_thickness, hide_labels, hide_conf
    )
    out = DetectRun(save_dir=save_dir, names=names)

    def preprocess(im: np.ndarray) -> torch.Tensor:
        return _preprocess(im, device, half, channels_last)

    def nms(pred: torch.Tensor) -> torch.Tensor:
        return non_max_suppression(pred, conf_thres, iou_thres, classes, agnostic_nms, max_det=max_det)[0]

    totals = [0.0, 0.0, 0.0]  # seconds: pre-process, inference, NMS
    shapes: list[tuple[int, ...]] = []  # distinct input tensor shapes, for the speed line
    try:
        with torch.inference_mode(), autocast:
            for path, im, im0, cap, log in dataset:
                if not out.results:
                    # Speed honesty: one untimed pass (pre-process, forward, NMS) on zeros of the first image's
                    # shape pays the one-off costs (kernel selection, first allocations, grid caches) so that
                    # they are not counted; every real image is then timed.
                    nms(model(preprocess(np.zeros_like(im)))[0].float())
                x, det, times = _timed_inference(model, preprocess, nms, im, device)
                totals = [t + dt for t, dt in zip(totals, times)]
                det[:, :4] = scale_boxes(x.shape[2:], det[:, :4], im0.shape).round()
                det = det.cpu()
                if tuple(x.shape) not in shapes:
                    shapes.append(tuple(x.shape))
                stem, frame = outputs.locate(path, getattr(dataset, "index", 0), getattr(dataset, "mode", "image"))
                counts = Counter(int(c) for c in det[:, 5].tolist())
                LOGGER.info("%s%dx%d %s%.1fms", log, *x.shape[2:], _summary(counts, names), times[1] * 1e3)
                out.results.append(ImageResult(path, frame, im0.shape[:2], det.numpy(), times[1] * 1e3))
                if not outputs.handle(stem, path, frame, im0, det, cap, getattr(dataset, "fps", 30.0)):
                    break
    finally:
        outputs.close()

    out.skipped = list(getattr(dataset, "skipped", []))
    if out.results:
        out.speed_ms = tuple(t / len(out.results) * 1e3 for t in totals)
        _log_summary(out, shapes, save_txt, not nosave)
    return out


def _timed_inference(model, preprocess, nms, im: np.ndarray, device: torch.device):
    """(input tensor, detections, [pre-process, inference, NMS] seconds) for one letterboxed image."""
    t0 = time_sync(device)
    x = preprocess(im)
    t1 = time_sync(device)
    pred = model(x)[0].float()
    t2 = time_sync(device)
    det = nms(pred)
    t3 = time_sync(device)
    return x, det, [t1 - t0, t2 - t1, t3 - t2]


def _preprocess(im: np.ndarray, device: torch.device, half: bool, channels_last: bool) -> torch.Tensor:
    """CHW RGB uint8 array -> (1, 3, H, W) tensor in [0, 1] on device, in the model's precision and layout."""
    x = torch.from_numpy(im).to(device)
    x = (x.half() if half else x.float()) / 255
    x = x[None]
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _log_summary(out: DetectRun, shapes: list[tuple[int, ...]], save_txt: bool, save_img: bool) -> None:
    """The speed line (at the real input shapes) and where the results went."""
    LOGGER.info(
        "Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at %s", *out.speed_ms, _shapes_text(shapes)
    )
    if save_txt or save_img:
        labels = ""
        if save_txt:
            n = len(list((out.save_dir / "labels").glob("*.txt")))
            labels = f", {n} label file{'s' * (n != 1)} in {out.save_dir / 'labels'}"
        LOGGER.info("Results saved to %s%s", out.save_dir, labels)


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (YOLOv5 detect.py flags, plus --bf16)."""
    parser = Parser(prog="detect.py", description="YOLOv5 object detection on images, videos and streams")
    parser.add_argument(
        "--weights",
        nargs="+",
        type=str,
        default=["yolov5s.pt"],
        help="model path; official names (yolov5s.pt ...) are downloaded into weights/",
    )
    parser.add_argument(
        "--source",
        type=str,
        default="data/images",
        help="file, dir, glob, .txt list, video, webcam index (0), rtsp/rtmp/http(s) stream",
    )
    parser.add_argument(
        "--img-size",
        "--img",
        "--imgsz",
        dest="imgsz",
        nargs="+",
        type=LIMITS["imgsz"][1],
        default=[640],
        help="inference size: one value, or h w (1-8192, rounded up to the stride)",
    )
    parser.add_argument("--conf-thres", type=LIMITS["conf_thres"][1], default=0.25, help="confidence threshold [0, 1]")
    parser.add_argument("--iou-thres", type=LIMITS["iou_thres"][1], default=0.45, help="NMS IoU threshold [0, 1]")
    parser.add_argument("--max-det", type=LIMITS["max_det"][1], default=1000, help="maximum detections per image")
    parser.add_argument("--device", default="", help="'' (auto), cpu, 0, or 0,1")
    parser.add_argument("--view-img", action="store_true", help="show results")
    parser.add_argument("--save-txt", action="store_true", help="save results to labels/*.txt")
    parser.add_argument("--save-conf", action="store_true", help="save confidences in --save-txt labels")
    parser.add_argument("--save-crop", action="store_true", help="save cropped boxes to crops/<class>/")
    parser.add_argument("--nosave", action="store_true", help="do not save images or videos")
    parser.add_argument(
        "--classes", nargs="+", type=LIMITS["classes"][1], help="keep only these class ids: --classes 0, or 0 2 3"
    )
    parser.add_argument("--agnostic-nms", action="store_true", help="class-agnostic NMS")
    parser.add_argument("--project", default="runs/detect", help="save results to project/name")
    parser.add_argument("--name", default="exp", help="save results to project/name")
    parser.add_argument("--exist-ok", action="store_true", help="reuse project/name instead of incrementing it")
    parser.add_argument(
        "--line-thickness", default=3, type=LIMITS["line_thickness"][1], help="bounding box thickness in pixels (1-100)"
    )
    parser.add_argument("--hide-labels", action="store_true", help="hide labels")
    parser.add_argument("--hide-conf", action="store_true", help="hide confidences")
    parser.add_argument(
        "--half",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="FP16 inference on CUDA (default: on for GPUs with fast FP16; never on CPU)",
    )
    parser.add_argument("--vid-stride", type=LIMITS["vid_stride"][1], default=1, help="video frame-rate stride")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast on CPUs with AVX512-BF16 or AMX")
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
    sys.exit(main())
