"""The Python API: Detector(weights)(images) -> one Results per image, through detect.py's own Predictor.

load_detector() is the one place weights become an inference model (download, ensemble, test-time augmentation,
precision policy); detect.py and the Detector both call it, and both run utils.infer.predict.Predictor.predict, so the
boxes of the two cannot drift apart. Inputs are processed one by one (each letterboxed to its own shape, as
detect.py does), not stacked into one batch.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image
from torch import nn

from models.api.ensemble import load_models
from models.api.results import Results
from models.api.tta import TTAModel
from models.export.backends import load_exported
from models.export.formats import is_backend_path
from utils.downloads import attempt_download_weights, cached_download, is_url
from utils.errors import DetectorError, SourceError
from utils.images import VID_FORMATS, read_image_checked, suffix, to_bgr_uint8
from utils.infer.predict import Precision, PredictOptions, Predictor, check_options
from utils.infer.sources import check_source, is_stream, not_regular, prepare, too_thin
from utils.infer.track_inputs import track_with_masks, tracked_masks
from utils.log import LOGGER
from utils.torch_utils import prepare_for_inference, select_device
from utils.track.config import DEFAULT_TRACKER
from utils.track.session import TrackingSession

Weights = str | Path | list[str | Path] | tuple[str | Path, ...] | nn.Module


def load_detector(
    weights: Weights, device: torch.device, half: bool | None = None, bf16: bool = False, augment: bool = False
) -> tuple[nn.Module, Precision]:
    """(model, Precision) for inference: one weights file, several (an Ensemble) or a built model; TTA on augment."""
    if isinstance(weights, nn.Module):
        model, label = weights.to(device).eval(), type(weights).__name__
    else:
        paths = [weights] if isinstance(weights, (str, Path)) else list(weights)
        if any(is_backend_path(p) for p in paths):
            return load_exported(paths, device, half, bf16, augment), Precision()
        paths = [attempt_download_weights(p) for p in paths]  # bare names from weights/, official ones downloaded
        model, label = load_models(paths, device, fuse=True), " + ".join(map(str, paths))
    if augment:
        model = TTAModel(model)
    model, half, autocast, channels_last = prepare_for_inference(model, device, half, bf16)
    dtype = "float16" if half else "float32" if isinstance(autocast, contextlib.nullcontext) else "bfloat16 autocast"
    parameters = sum(p.numel() for p in model.parameters())
    tta = ", test-time augmentation" if augment else ""
    LOGGER.info("Model %s: %d parameters, %d classes, %s %s%s", label, parameters, len(model.names), device, dtype, tta)
    return model, Precision(half, autocast, channels_last)


def _read_path(source: str | Path) -> np.ndarray:
    """The BGR image of a file path or an http(s) URL (downloaded to the temp folder, as detect.py does)."""
    source = str(source)
    if is_url(source):
        source = str(cached_download(source))
    # A device or FIFO is refused before it is opened: /dev/zero would be read until memory runs out.
    reason = not_regular(source)
    image, reason = read_image_checked(source) if not reason else (None, reason)
    if image is None:
        raise DetectorError(f"cannot read image {source}: {reason}")
    return image


def _from_array(array: np.ndarray, rgb: bool) -> np.ndarray:
    """A (H, W, 3) uint8 array as a contiguous BGR image."""
    if array.dtype != np.uint8:
        raise DetectorError(f"image arrays must be uint8 (H, W, 3), got dtype {array.dtype}")
    if array.ndim != 3 or array.shape[2] != 3 or 0 in array.shape:
        raise DetectorError(f"image arrays must have shape (H, W, 3), got {tuple(array.shape)}")
    return np.ascontiguousarray(array[..., ::-1] if rgb else array)


PIL_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # 16- and 32-bit grey: convert("RGB") would clip


def _from_pil(image: Image.Image) -> np.ndarray:
    """A PIL image as BGR uint8. 16-bit and 32-bit integer modes are scaled from 0-65535 to 0-255, float ones
    as float image files are (values in [0, 1] times 255), so a PIL image gives the pixels its file gives."""
    if image.mode not in PIL_WIDE_MODES:
        return _from_array(np.asarray(image.convert("RGB")), True)
    array = np.asarray(image)
    if image.mode != "F":  # 'I' holds 16-bit PNGs opened by older Pillows
        array = array.clip(0, 65535).astype(np.uint16)  # native byte order, whatever the mode's
    if 0 in array.shape:
        raise DetectorError(f"image has no pixels: {image.size[0]}x{image.size[1]}")
    return to_bgr_uint8(array)


def _from_tensor(tensor: torch.Tensor) -> list[np.ndarray]:
    """BGR uint8 images of a (3, H, W) or (B, 3, H, W) RGB tensor, uint8 or float in [0, 1]."""
    batch = tensor[None] if tensor.ndim == 3 else tensor
    if batch.ndim != 4 or batch.shape[1] != 3 or 0 in batch.shape:
        raise DetectorError(f"image tensors must have shape (3, H, W) or (B, 3, H, W), got {tuple(tensor.shape)}")
    batch = batch.detach().cpu()
    if batch.is_floating_point():
        if batch.min() < 0 or batch.max() > 1:
            raise DetectorError("float image tensors must hold values in [0, 1]")
        batch = (batch.float() * 255).round().to(torch.uint8)  # undoes detect.py's /255 exactly for 8-bit images
    elif batch.dtype != torch.uint8:
        raise DetectorError(f"image tensors must be uint8 or float in [0, 1], got {batch.dtype}")
    return [np.ascontiguousarray(im.permute(1, 2, 0).numpy()[..., ::-1]) for im in batch]


def to_images(inputs, rgb: bool = False, first: int = 0) -> list[tuple[str, np.ndarray]]:
    """(name, BGR uint8 image) per input: paths, URLs, arrays, PIL images, tensors, or a list of them. Unnamed
    inputs are named image<first>, image<first + 1>, ..."""
    items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not items:
        raise DetectorError("no inputs: give an image, a path, or a non-empty list of them")
    images = []
    for item in items:
        name = f"image{first + len(images)}"
        if isinstance(item, (str, Path)):
            images.append((str(item), _read_path(item)))
        elif isinstance(item, np.ndarray):
            images.append((name, _from_array(item, rgb)))
        elif isinstance(item, Image.Image):
            images.append((getattr(item, "filename", "") or name, _from_pil(item)))
        elif isinstance(item, torch.Tensor):
            images.extend((f"image{first + len(images) + i}", im) for i, im in enumerate(_from_tensor(item)))
        else:
            kinds = "a path, URL, numpy array, PIL image or torch tensor"
            raise DetectorError(f"cannot detect on a {type(item).__name__}: give {kinds}")
    return images


class Tracking:
    """A Detector's tracking state: the TrackingSession and a predictor of its own that feeds it what the tracker
    needs (recovered boxes, embeddings), with conf_thres at the tracker's track_low_thresh when the Detector was made
    without conf_thres."""

    def __init__(self, detector: "Detector", tracker: str | Path):
        self.tracker = str(tracker)
        self.session = TrackingSession(tracker)
        options = detector.predictor.options
        if not detector.conf_given:
            options = replace(options, conf_thres=self.session.config.track_low_thresh)
        self.predictor = Predictor(detector.model, detector.device, options, detector.predictor.precision, log=False)
        self.predictor.serve(self.session.needs)


def ids_tensor(ids: np.ndarray | None) -> torch.Tensor | None:
    return None if ids is None else torch.from_numpy(np.asarray(ids, np.int64))


def _results(result, image: np.ndarray, names: list[str]) -> Results:
    """The API's Results of one of the Predictor's ImageResults."""
    boxes = torch.from_numpy(np.ascontiguousarray(result.boxes))
    # tracking, each tracked box's mask is the one of the detection it was matched to (track_with_masks)
    return Results(boxes, names, result.shape, image, result.path, result.frame, ids_tensor(result.ids), result.masks)


def _kind_of(value) -> str:
    """What a value is, in a few words, for one-line messages (an array's repr would be many lines of numbers)."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple | torch.Size):
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return f"a {type(value).__name__}"


def _is_sequence(source) -> bool:
    """Whether a track() source is a sequence (video, folder, glob, list, webcam, stream) rather than frames."""
    if not isinstance(source, (str, Path)):
        return False
    text = str(source)
    return (
        is_stream(text)
        or suffix(text) in VID_FORMATS + ("txt",)
        or Path(text).is_dir()
        or any(c in text for c in "*?[")
    )


class Detector:
    """A detector for Python code: `Detector('yolov5n.pt')(['bus.jpg', frame])` -> [Results, Results].

    weights is a .pt file (official names are downloaded into weights/), a list of them (an ensemble, predictions
    merged before NMS) or a built model. The thresholds, classes, max_det and img_size mean what detect.py's flags
    of the same names mean, with the same defaults: None takes the model's (img_size: the size it was trained at;
    the thresholds: its family's, YOLOv5 0.25 / 0.45, YOLOv8/YOLO11/YOLO26 0.25 / 0.7; an ensemble: its first
    model's). half=None applies detect.py's precision policy; augment=True runs test-time augmentation. Calling it
    runs detect.py's Predictor on each input, so the boxes are detect.py's boxes.
    """

    def __init__(
        self,
        weights: Weights,
        device: str = "",
        conf_thres: float | None = None,
        iou_thres: float | None = None,
        classes: list[int] | None = None,
        agnostic: bool = False,
        max_det: int | None = None,
        img_size: int | tuple[int, int] | None = None,
        half: bool | None = None,
        augment: bool = False,
    ):
        check_options(imgsz=img_size, conf_thres=conf_thres, iou_thres=iou_thres, max_det=max_det, classes=classes)
        self.conf_given = conf_thres is not None
        self.device = select_device(device)
        self.model, precision = load_detector(weights, self.device, half, augment=augment)
        options = PredictOptions(
            img_size=img_size,
            conf_thres=conf_thres,
            iou_thres=iou_thres,
            classes=classes,
            agnostic=agnostic,
            max_det=max_det,
        )
        self.predictor = Predictor(self.model, self.device, options, precision)
        self.names = self.predictor.names
        self.unnamed = 0  # arrays, PIL images and tensors seen: each call names them on (image0, image1, ...)
        self.tracking: Tracking | None = None

    def __call__(self, inputs, rgb: bool = False) -> list[Results]:
        """One Results per image of inputs (a path, URL, BGR array, RGB array with rgb=True, PIL image, tensor, or a
        list of them; a (B, 3, H, W) tensor counts as B images). Raises DetectorError on an input it cannot use."""
        return [self._detect(name, image) for name, image in self._images(inputs, rgb)]

    def _images(self, inputs, rgb: bool) -> list[tuple[str, np.ndarray]]:
        images = to_images(inputs, rgb, first=self.unnamed)
        self.unnamed += sum(name.startswith("image") and not Path(name).suffix for name, _ in images)
        return images

    def _detect(self, name: str, image: np.ndarray, predictor: Predictor | None = None) -> Results:
        boxes, masks, _, _ = (predictor or self.predictor).predict_masks(self._letterbox(name, image), image)
        return Results(torch.from_numpy(boxes), self.names, image.shape[:2], image, name, masks=masks)

    def stream(self, source, verbose: bool = False) -> Iterator[Results]:
        """One Results per image or frame of any source detect.py takes (a file, folder, glob, .txt list, video,
        webcam index or stream URL), made when asked for: nothing is kept, so memory stays flat on an endless
        stream. Raises SourceError for a source that cannot be read, or that is an image rather than a source."""
        if isinstance(source, bool) or not isinstance(source, (str, Path, int)):
            raise SourceError(
                f"Detector.stream reads a source detect.py takes (a path, glob, URL or webcam index), not "
                f"{_kind_of(source)}: call the Detector on images and arrays (detector(image)), or track() them"
            )
        for prediction in self.predictor.stream(check_source(source), verbose=verbose):
            yield _results(prediction.result, prediction.image, self.names)

    def track(self, source, tracker: str | Path = DEFAULT_TRACKER, persist: bool = True, stream: bool = False):
        """Detections with identities (Results.id), by ByteTrack, BoT-SORT, OC-SORT or TrackTrack (tracker:
        bytetrack.yaml, botsort.yaml, ocsort.yaml, tracktrack.yaml or a tracker YAML's path).

        source is either frames (an image, array, PIL image or tensor, or a list of them), tracked as the next frames
        of one sequence, or a video, a folder of frames, a webcam or a stream, each video a sequence of its own.
        persist=True keeps the tracker's state from one call to the next (a frame loop); False starts afresh.
        Returns a list of Results, or with stream=True a generator of them (for long videos and streams). Unless
        conf_thres was given, detections down to the tracker's track_low_thresh feed it (its second stage)."""
        if self.tracking is None or not persist or self.tracking.tracker != str(tracker):
            self.tracking = Tracking(self, tracker)
        results = self._track_source(source) if _is_sequence(source) else self._track_frames(source)
        return results if stream else list(results)

    def _track_source(self, source) -> Iterator[Results]:
        session, predictor = self.tracking.session, self.tracking.predictor
        frames = predictor.stream(check_source(source), verbose=False, frames=True)
        for prediction, _ in track_with_masks(frames, session, str(source)):
            yield _results(prediction.result, prediction.image, self.names)

    def _track_frames(self, inputs) -> Iterator[Results]:
        session, predictor = self.tracking.session, self.tracking.predictor
        for name, image in self._images(inputs, rgb=False):
            result = self._detect(name, image, predictor)
            extras = predictor.extras
            boxes, ids = session.update("frames", result.boxes.numpy(), image, extras.recovered, extras.features)
            masks = None if result.masks is None else tracked_masks(result.masks, session.detections)
            yield Results(
                torch.from_numpy(boxes), self.names, image.shape[:2], image, name, session.frame, ids_tensor(ids), masks
            )

    def _letterbox(self, name: str, image: np.ndarray) -> np.ndarray:
        """The letterboxed CHW RGB input of one image; DetectorError when it is too thin to resize."""
        size = self.predictor.img_size
        thin = too_thin(image.shape, size, option="img_size")
        if not thin:
            try:
                return prepare(image, size, self.predictor.stride, auto=self.predictor.auto)
            except cv2.error as e:  # any other shape OpenCV cannot resize: one line, not its multi-line trace
                thin = f"cannot letterbox {image.shape[0]}x{image.shape[1]} pixels: {str(e).strip().splitlines()[-1]}"
        raise DetectorError(f"{name}: {thin}")

    def __repr__(self) -> str:
        o = self.predictor.options
        return (
            f"Detector({type(self.model).__name__}, {len(self.names)} classes, img_size={self.predictor.img_size}, "
            f"conf_thres={o.conf_thres}, iou_thres={o.iou_thres}, device={self.device})"
        )
