"""The Predictor: source -> letterbox -> model -> NMS -> one result per image or frame, with honest timings.

detect.py is a command line over it and models.api.detector.Detector (the Python API) calls the same predict(), so the
two cannot drift apart; any model that maps a (1, 3, H, W) tensor to raw predictions can be the backend. Loading
weights is models.api.detector.load_detector's concern, so this module imports nothing from models.
Outputs (files, windows) are utils.infer.outputs' concern, not this module's.
"""

import argparse
import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from utils.boxes import end2end_detections, non_max_suppression, scale_boxes
from utils.cli import float_in, int_in
from utils.data.augment import check_img_size
from utils.errors import DetectError
from utils.infer.masks import InstanceMasks, instance_masks
from utils.infer.sources import Source, load_sources, read_ahead
from utils.infer.track_inputs import FrameExtras, TrackerFeed, track_with_masks
from utils.log import LOGGER, speed_line
from utils.torch_utils import model_inputs, takes_uint8, time_sync
from utils.track.session import TrackingSession

# Results of video and stream frames kept in DetectRun beyond this are only counted: a long video or an endless
# stream runs in constant memory (every frame is still written and logged)
MAX_FRAME_RESULTS = 1000

# Valid range of each numeric detection option: one table for detect.py's argparse types and for check_options,
# so the command line and run() refuse the same values with the same words.
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
        for v in value if isinstance(value, (list, tuple)) else [] if value is None else [value]:
            try:
                if isinstance(v, bool):  # True would pass as the integer 1
                    raise argparse.ArgumentTypeError(f"must be a number, got {v!r}")
                parse(str(int(v) if isinstance(v, float) and v.is_integer() else v))
            except argparse.ArgumentTypeError as e:
                raise DetectError(f"{flag} ({key}=): {e}") from None


DEFAULT_SIZE = 640  # the inference size for weights that do not record the size they were trained at


@dataclass
class PredictOptions:
    """What the Predictor is asked for: input size, NMS settings and the video frame stride. None (the default) for
    the size or a threshold takes the model's: its training size (model.imgsz), its family's predict thresholds
    (model.family: YOLOv5 conf 0.25 / IoU 0.45, YOLOv8/YOLO11/YOLO26 0.25 / 0.7); a given value always wins."""

    img_size: int | list[int] | tuple[int, ...] | None = None  # one value or (h, w); rounded up to the model's stride
    conf_thres: float | None = None
    iou_thres: float | None = None
    classes: list[int] | None = None  # keep only these class ids
    agnostic: bool = False  # class-agnostic NMS
    max_det: int | None = None  # None: the family's (1000; YOLO26's end-to-end head gives at most 300)
    vid_stride: int = 1


@dataclass
class Precision:
    """How inputs are fed to a prepared model: FP16 inputs, an autocast context, channels-last layout."""

    half: bool = False
    autocast: contextlib.AbstractContextManager = field(default_factory=contextlib.nullcontext)
    channels_last: bool = False


@dataclass
class ImageResult:
    """Detections on one image or video frame, in original-image pixels."""

    path: str
    frame: int  # 0 for images, 1-based frame index for videos and streams
    shape: tuple[int, int]  # original (height, width)
    boxes: np.ndarray  # (n, 6): x1, y1, x2, y2, conf, class; highest confidence first
    inference_ms: float
    ids: np.ndarray | None = None  # (n,) track identities when tracking (then boxes are the tracked boxes)
    masks: InstanceMasks | None = None  # a segment model's, one per box (utils/infer/masks.py)


@dataclass
class Prediction:
    """One image or frame through the Predictor: its result plus what writers need (the image, the video)."""

    result: ImageResult
    image: np.ndarray  # the original BGR image
    video: bool  # a frame of a video file or stream
    capture: object  # the cv2.VideoCapture of a video file (its fps names the output's rate), else None
    fps: float  # a stream's frame rate
    input_shape: tuple[int, ...]  # the letterboxed (1, 3, H, W) tensor's shape
    times: tuple[float, float, float]  # seconds: pre-process, inference, NMS
    extras: FrameExtras | None = None  # what the tracker asked for besides the boxes (Predictor.serve)


@dataclass
class DetectRun:
    """What detect.run did: where it saved, per-image detections, mean times and the inputs it skipped."""

    save_dir: Path
    names: list[str]
    results: list[ImageResult] = field(default_factory=list)  # images' and the first MAX_FRAME_RESULTS frames'
    frames: int = 0  # images and video or stream frames processed
    speed_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # pre-process, inference, NMS per image
    skipped: list[str] = field(default_factory=list)


@dataclass
class DetectCommand:
    """detect.py's options: its flags, the same names and defaults (tests/commands/test_options.py checks both
    ways), and run()'s keywords. None for the size or a threshold: the model's (its training size; its family's
    thresholds, YOLOv5 conf 0.25 / IoU 0.45, YOLOv8/YOLO11/YOLO26 0.25 / 0.7; an ensemble: its first model's)."""

    weights: str | Path | list = "yolov5s.pt"
    source: str | Path | None = None
    imgsz: int | list[int] | tuple[int, ...] | None = None
    conf_thres: float | None = None
    iou_thres: float | None = None
    max_det: int | None = None  # None: the family's (1000; YOLO26's end-to-end head gives at most 300)
    device: str = ""
    view_img: bool = False
    save_txt: bool = False
    save_conf: bool = False
    save_crop: bool = False
    nosave: bool = False
    classes: list[int] | None = None
    agnostic_nms: bool = False
    project: str | Path = "runs/detect"
    name: str = "exp"
    exist_ok: bool = False
    line_thickness: int | None = None
    hide_labels: bool = False
    hide_conf: bool = False
    half: bool | None = None
    vid_stride: int = 1
    bf16: bool = False
    augment: bool = False
    # a tracker YAML (bytetrack.yaml, botsort.yaml, ocsort.yaml, tracktrack.yaml or a path): identities on frames
    track: str | Path | None = None


def inference_size(imgsz: int | list[int] | tuple[int, ...], stride: int = 32) -> list[int]:
    """[h, w] image size rounded up to multiples of stride (with a warning when it changes)."""
    size = [int(imgsz)] * 2 if isinstance(imgsz, (int, float)) else [int(v) for v in imgsz]
    return check_img_size(size * 2 if len(size) == 1 else size, stride)


def plural(name: str) -> str:
    """A class name's plural for the summary line: 'person' -> 'persons', 'cross' -> 'crosses', 'bus' -> 'buses',
    'box' -> 'boxes', 'sandwich' -> 'sandwiches', 'butterfly' -> 'butterflies'. Other names ending in 's' are
    taken as plural already ('skis', 'scissors') and kept; names not ending in a letter get 's' ('class7s')."""
    word = str(name)
    last = word[-1:].lower()
    if not last.isalpha():
        return f"{word}s"
    end = word[-2:].lower()
    if end in ("ss", "us", "sh", "ch") or last in "xz":
        ending = "es"
    elif last == "s":
        return word
    elif last == "y" and len(word) > 1 and word[-2].lower() not in "aeiou":
        word, ending = word[:-1], "ies"
    else:
        ending = "s"
    return word + (ending.upper() if word.isupper() and len(word) > 1 else ending)


def detections_text(boxes: np.ndarray, names: list[str]) -> str:
    """'4 persons, 1 bus, ' in class order, or '(no detections), '."""
    counts = Counter(int(c) for c in boxes[:, 5].tolist())
    if not counts:
        return "(no detections), "
    return "".join(f"{n} {plural(names[c]) if n > 1 else names[c]}, " for c, n in sorted(counts.items()))


def shapes_text(shapes: list[tuple[int, ...]]) -> str:
    """'shape (1, 3, 480, 640)', 'shapes (1, 3, 640, 480), (1, 3, 384, 640)', or the count and the last one."""
    if len(shapes) == 1:
        return f"shape {shapes[0]}"
    if len(shapes) <= 3:
        return f"shapes {', '.join(map(str, shapes))}"
    return f"{len(shapes)} letterboxed shapes (last {shapes[-1]})"


def recorded_size(model, stride: int) -> tuple[int | None, str]:
    """The size a model was trained at (model.imgsz; None when its weights do not say) rounded up to a multiple of
    stride, as inference and validation use it, and the words that say where it came from (a size 100 runs at 128)."""
    recorded = getattr(model, "imgsz", None)
    if not recorded:
        return None, "the default"
    size = -(-int(recorded) // stride) * stride
    rounded = f", {recorded}, rounded up to a multiple of stride {stride}" if size != recorded else ""
    return size, f"the size the weights record{rounded}"


def model_defaults(options: PredictOptions, model, log: bool = True) -> PredictOptions:
    """options with the size and thresholds left at None taken from the model (its training size, else 640; its
    family's predict thresholds), and one log line saying which were used and why."""
    family = model.family
    trained, recorded_said = recorded_size(model, int(model.stride.max()))
    size = options.img_size if options.img_size is not None else trained or DEFAULT_SIZE
    conf = options.conf_thres if options.conf_thres is not None else family.predict_conf
    iou = options.iou_thres if options.iou_thres is not None else family.predict_iou
    max_det = options.max_det if options.max_det is not None else family.max_det
    if family.end2end and max_det > family.max_det:
        LOGGER.warning(
            f"WARNING: --max-det {max_det}: {family.title} models give at most {family.max_det} detections per image "
            f"(their end-to-end head's top {family.max_det}); using {family.max_det}"
        )
        max_det = family.max_det
    if log:
        said = "--img" if options.img_size is not None else recorded_said if trained else "the default"
        LOGGER.info(
            f"{family.title} model: image size {size_text(size)} ({said}), conf {conf:g}, IoU {iou:g}"
            + ("" if options.conf_thres is not None and options.iou_thres is not None else " (the family's defaults)")
        )
    return replace(options, img_size=size, conf_thres=conf, iou_thres=iou, max_det=max_det)


def size_text(size) -> str:
    """160, or 480x640 for an (h, w) pair of two sides."""
    sides = [size] if isinstance(size, (int, float)) else list(size)
    return str(int(sides[0])) if len(set(sides)) == 1 else "x".join(str(int(v)) for v in sides)


class Predictor:
    """A loaded model and PredictOptions; stream(source) yields one Prediction per image or frame. The model is any
    module that maps (B, 3, H, W) to raw predictions and has names, stride, family (its family's declaration:
    thresholds, end2end, pixel_boxes) and optionally imgsz (the size it was trained at)."""

    def __init__(
        self, model, device: torch.device, options: PredictOptions, precision: Precision | None = None, log: bool = True
    ):
        self.model, self.device, self.options = model, device, model_defaults(options, model, log)
        self.precision = precision or Precision()
        self.names = list(model.names)
        self.stride = int(model.stride.max())
        # What the model's family (models/nn/family.py) decides: final detections without NMS (YOLO26's end-to-end
        # head), boxes rounded to whole pixels (YOLOv5's detect rounds them)
        self.family = model.family
        # What the model's task (models/nn/task.py) decides: a segment model's outputs carry mask coefficients and
        # prototypes. A backend that records no task (an export, an ensemble, a stand-in) is a detector.
        task = getattr(model, "task", None)
        self.masks = task is not None and task.masks
        options = self.options
        self.classes = self._checked_classes(options.classes)
        self.img_size, self.auto = inference_size(options.img_size, self.stride), True
        fixed = getattr(model, "fixed_shape", None)  # a static-shape export accepts one input size only
        if fixed:
            if list(fixed) != self.img_size:
                LOGGER.info(f"static-shape export: input letterboxed to {fixed[0]}x{fixed[1]} (not --img-size)")
            self.img_size, self.auto = list(fixed), False
        self.totals = [0.0, 0.0, 0.0]  # seconds: pre-process, inference, NMS, over `count` images
        self.count = 0
        # Runtimes with their own threads (ONNX Runtime, OpenVINO) get NumPy-prepared inputs: torch's OpenMP
        # threads stay busy-waiting for a while after a torch op and would compete with them (yolov5n, OpenVINO
        # bf16, 2 cores: 19.5 ms after a torch pre-process, 16.0 ms after a NumPy one).
        self.numpy_input = getattr(model, "own_threads", False) and device.type == "cpu"
        self.shapes: list[tuple[int, ...]] = []  # distinct input tensor shapes, for the speed line
        self.skipped: list[str] = []  # inputs of the last stream that could not be read
        self.feed: TrackerFeed | None = None  # what a tracker asks for besides the boxes (serve)
        self.extras: FrameExtras | None = None  # the last image's, when serving a tracker
        self.started: dict[int, tuple] = {}  # id(image) -> (image, its input tensor) of start()

    def serve(self, needs) -> None:
        """From now on compute, as self.extras, what a tracker needs besides the boxes (a TrackerNeeds or None)."""
        self.feed = TrackerFeed(self.model, needs, self.family.end2end) if needs else None

    def _checked_classes(self, classes) -> list[int] | None:
        """Class ids as a list (one id may be a plain int, as YOLOv5 allows); DetectError for ids the model lacks."""
        if classes is None:
            return None
        classes = [int(c) for c in (classes if isinstance(classes, (list, tuple)) else [classes])]
        unknown = sorted({c for c in classes if c >= len(self.names)})
        if unknown:
            limit = len(self.names)
            raise DetectError(f"--classes {' '.join(map(str, unknown))}: this model's class ids are in [0, {limit})")
        return classes

    @property
    def speed_ms(self) -> tuple[float, float, float]:
        """Mean pre-process, inference and NMS milliseconds per image so far."""
        return tuple(t / self.count * 1e3 for t in self.totals) if self.count else (0.0, 0.0, 0.0)

    def speed_line(self) -> str:
        """The speed line, at the real input shapes."""
        return speed_line(self.speed_ms, shapes_text(self.shapes))

    def preprocess(self, im: np.ndarray) -> torch.Tensor:
        """CHW RGB uint8 array -> (1, 3, H, W) tensor in [0, 1] on the device, in the model's precision and layout
        (the uint8 itself for a model that takes uint8: model_inputs)."""
        if self.numpy_input and not takes_uint8(self.model):
            return torch.from_numpy(np.divide(im[None], 255, dtype=np.float32))  # one pass, no uint8->float copy
        dtype = torch.float16 if self.precision.half else torch.float32
        return model_inputs(torch.from_numpy(im).to(self.device)[None], self.model, dtype, self.precision.channels_last)

    def nms(self, pred: torch.Tensor, extra: int = 0) -> torch.Tensor:
        """(n, 6) detections of one image's raw predictions, highest confidence first; the last `extra` columns of
        a prediction (mask coefficients) follow their boxes, as (n, 6 + extra)."""
        o = self.options
        if self.family.end2end:
            return end2end_detections(pred, o.conf_thres, self.classes, o.max_det)[0]
        return non_max_suppression(
            pred, o.conf_thres, o.iou_thres, self.classes, o.agnostic, max_det=o.max_det, extra=extra
        )[0]

    def to_original(self, boxes: torch.Tensor, input_hw, original_shape) -> torch.Tensor:
        """xyxy boxes of the letterboxed input in the original image's pixels (whole pixels for a family that
        rounds them)."""
        boxes = scale_boxes(input_hw, boxes, original_shape)
        return boxes.round() if self.family.pixel_boxes else boxes

    def _raw(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model's predictions of x (a segment model's rows with their mask coefficients appended) and its
        prototypes (None when the task has no masks)."""
        out = self.feed.forward(self.model, x) if self.feed else self.model(x)
        pred = out[0].float() if not self.masks else torch.cat((out[0].float(), out.coefficients.float()), 2)
        return (self.feed.mark_rows(pred) if self.feed else pred), out.protos if self.masks else None

    def _timed(self, im: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[float]]:
        """(input tensor, detections, prototypes or None, [pre-process, inference, NMS] seconds) for one
        letterboxed image; serving a tracker, each detection row ends with its prediction row's index."""
        t0 = time_sync(self.device)
        started = self.started.pop(id(im), None)
        x = started[1] if started and started[0] is im else self.preprocess(im)
        t1 = time_sync(self.device)
        pred, protos = self._raw(x)
        t2 = time_sync(self.device)
        extra = (0 if protos is None else protos.shape[1]) + (self.feed.row_columns if self.feed else 0)
        det = self.nms(pred, extra=extra)
        t3 = time_sync(self.device)
        return x, det, protos, [t1 - t0, t2 - t1, t3 - t2]

    def warm_up(self, im: np.ndarray) -> None:
        """One untimed pass (pre-process, forward, NMS) on zeros of im's shape. Speed honesty: it pays the one-off
        costs (kernel selection, first allocations, grid caches) so that they are not counted in any image's time."""
        with torch.inference_mode(), self.precision.autocast:
            self.nms(self.model(self.preprocess(np.zeros_like(im)))[0].float())
        self.warmed = True

    def start(self, im: np.ndarray) -> None:
        """Start the model on a letterboxed image ahead of its predict_masks() (utils.infer.sources.read_ahead, for a
        runtime that runs several inputs at once), whose inference time is then the time it still waits for it."""
        self.warmed or self.warm_up(im)
        self.started[id(im)] = (im, self.preprocess(im))
        self.model.start(self.started[id(im)][1])

    def predict(self, im: np.ndarray, original: np.ndarray) -> tuple[np.ndarray, tuple[int, ...], tuple]:
        """(boxes (n, 6) in original pixels, input shape, times) for one letterboxed image; counted in the totals."""
        boxes, _, input_shape, times = self.predict_masks(im, original)
        return boxes, input_shape, times

    def predict_masks(self, im: np.ndarray, original: np.ndarray) -> tuple:
        """predict()'s boxes, with a segment model's masks at the original resolution (None for detection): (boxes,
        masks, input shape, times); the masks' time is counted with NMS (post-processing)."""
        with torch.inference_mode(), self.precision.autocast:
            x, det, protos, times = self._timed(im)
            det[:, :4] = self.to_original(det[:, :4], x.shape[2:], original.shape)
            if self.feed:  # the tracker's extras: post-processing time
                t0 = time_sync(self.device)
                det, self.extras = self.feed.split(det, self, x.shape[2:], original.shape)
                times[2] += time_sync(self.device) - t0
            masks = None
            if protos is not None:
                t0 = time_sync(self.device)
                masks = instance_masks(protos[0], det[:, 6:], det[:, :4].cpu().numpy(), x.shape[2:], original.shape[:2])
                times[2] += time_sync(self.device) - t0
        boxes, times = det[:, :6].cpu().numpy(), tuple(times)
        self.totals = [t + dt for t, dt in zip(self.totals, times)]
        self.count += 1
        if tuple(x.shape) not in self.shapes:
            self.shapes.append(tuple(x.shape))
        return boxes, masks, tuple(x.shape), times

    def stream(self, source: str | Path | Source, verbose: bool = True, frames: bool = False) -> Iterator[Prediction]:
        """One Prediction per readable image or frame of source (logged as it goes when verbose); frames=True reads
        a folder of images as one sequence of frames, in frame order (for tracking)."""
        vid_stride = self.options.vid_stride
        loader = load_sources(source, self.img_size, self.stride, auto=self.auto, vid_stride=vid_stride, frames=frames)
        self.skipped = loader.skipped if hasattr(loader, "skipped") else []  # filled as the loader goes
        last_input, frame, self.warmed = None, 0, False  # warmed: whether this stream's warm-up pass ran
        tapping = self.feed is not None and self.feed.tapping  # the head tap reads the model within its own forward
        start = self.start if getattr(self.model, "parallel_runs", 1) > 1 and not tapping else None
        for (path, im, original, capture, log), video, index in read_ahead(loader, start):
            self.warmed or self.warm_up(im)
            frame = frame + 1 if video and index == last_input else int(video)  # images are frame 0
            last_input = index
            boxes, masks, input_shape, times = self.predict_masks(im, original)
            if verbose:
                text = detections_text(boxes, self.names)
                LOGGER.info("%s%dx%d %s%.1fms", log, *input_shape[2:], text, times[1] * 1e3)
            result = ImageResult(path, frame, original.shape[:2], boxes, times[1] * 1e3, masks=masks)
            fps = getattr(loader, "fps", 30.0)
            yield Prediction(result, original, video, capture, fps, input_shape, times, self.extras)


def tracking_session(tracker: str | Path | None, checked: Source) -> TrackingSession | None:
    """The tracking session for detect.py's --track, or None: not tracking, or a single image (a warning: tracking
    needs frames). An unusable tracker name or YAML is a TrackerError, before any model is loaded."""
    if tracker is None:
        return None
    session = TrackingSession(tracker)
    if not checked.stream and not checked.videos and len(checked.images) == 1:
        LOGGER.warning(
            "WARNING: --track on a single image: tracking needs frames (a video, a stream or a folder of frames); "
            "detecting without identities"
        )
        return None
    return session


def detect_all(predictor: "Predictor", checked: Source, outputs, save_dir: Path, tracker=None) -> DetectRun:
    """detect.py's loop: every prediction of the checked source through outputs (a utils.infer.outputs.Outputs),
    tracked when a TrackingSession is given; what was done."""
    out = DetectRun(save_dir=save_dir, names=predictor.names)
    predictor.serve(tracker.needs if tracker else None)
    stream = predictor.stream(checked, frames=tracker is not None)
    pairs = track_with_masks(stream, tracker, checked.text) if tracker else ((p, None) for p in stream)
    stride = 1 if checked.stream else predictor.options.vid_stride  # a live stream's dropped frames are not counted
    try:
        for prediction, tracked in pairs:
            if tracked is not None and prediction.video:  # the MOT file numbers the video's frames: k-th read is k*s
                tracked = replace(tracked, frame=tracked.frame * stride)
            out.frames += 1
            if not prediction.video or len(out.results) < MAX_FRAME_RESULTS:
                out.results.append(prediction.result)
            if not outputs.write(prediction, tracked):
                break
    finally:
        outputs.close()
    out.skipped = list(predictor.skipped)
    if out.frames:
        out.speed_ms = predictor.speed_ms
        LOGGER.info(predictor.speed_line())
        if outputs.saved_line():
            LOGGER.info(outputs.saved_line())
    return out
