"""What detection writes and shows per image or frame: txt labels, crops, annotated images and videos, a window.

Each output is a small writer; Outputs runs the ones OutputOptions asks for, under a unique name per input.
"""

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from utils.files import increment_path
from utils.labels import write_yolo_labels
from utils.log import LOGGER
from utils.plots import Annotator, colors, imwrite, save_one_box
from utils.predict import DetectError, Prediction


@dataclass
class OutputOptions:
    """Which outputs to write or show, and how boxes are drawn (detect.py's flags of the same names)."""

    save_img: bool = True  # annotated images and videos (not --nosave)
    save_txt: bool = False
    save_conf: bool = False
    save_crop: bool = False
    view_img: bool = False
    line_thickness: int = 3
    hide_labels: bool = False
    hide_conf: bool = False

    @property
    def writes_files(self) -> bool:
        """Whether any file is written per input."""
        return self.save_img or self.save_txt or self.save_crop


def output_stem(stem: str, frame: int = 0) -> str:
    """Stem of the label, crop and image files of one image (frame 0) or one video frame ('clip_12')."""
    return stem if frame == 0 else f"{stem}_{frame}"


def crop_folder(name: str, cls: int) -> str:
    """A class name usable as one folder under crops/: path separators replaced, '', '.' and '..' named by id."""
    folder = str(name).replace("/", "_").replace("\\", "_").strip()
    return folder if folder.strip(".") else f"class{cls}"


def display_available() -> bool:
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


def make_save_dir(project: str | Path, name: str, exist_ok: bool) -> Path:
    """The run folder project/name (incremented unless exist_ok), created; DetectError when it cannot be."""
    if not str(name).strip():  # project/'' is project itself, which would be incremented to a sibling folder
        raise DetectError("--name is empty: give the run folder's name (default exp)")
    try:
        return increment_path(Path(project) / name, exist_ok=exist_ok, mkdir=True)
    except OSError as e:  # --project is a file, read-only, or the name is too long
        raise DetectError(f"cannot create the output folder {Path(project) / name}: {e.strerror or e}") from None


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


def write_image(file: Path, image: np.ndarray) -> None:
    """Save an annotated image in its input's format, or as .jpg where OpenCV cannot write that format."""
    if not imwrite(file, image) and not imwrite(file.with_suffix(".jpg"), image):
        LOGGER.warning("WARNING: could not write %s", file)


class VideoWriter:
    """Annotated frames into <stem>.mp4, one open video at a time."""

    def __init__(self):
        self.writer: cv2.VideoWriter | None = None
        self.path = ""

    def write(self, file: Path, image: np.ndarray, capture, fps: float) -> None:
        """Append a frame to file, opening it (and finishing the previous video) on its first frame."""
        if str(file) != self.path:
            self.close()
            fps = (capture.get(cv2.CAP_PROP_FPS) if capture is not None else fps) or 30.0
            h, w = image.shape[:2]
            self.writer = cv2.VideoWriter(str(file), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
            self.path = str(file)
            if not self.writer.isOpened():  # no mp4v encoder in this OpenCV build, or an unwritable folder
                LOGGER.warning("WARNING: cannot write video %s; its frames are not saved", file)
        self.writer.write(image)

    def close(self) -> None:
        """Finish the open video, if any."""
        if self.writer is not None:
            self.writer.release()
            self.writer, self.path = None, ""


class Outputs:
    """Everything detection writes or shows for each Prediction, configured by one OutputOptions."""

    def __init__(self, save_dir: Path, names: list[str], options: OutputOptions):
        self.save_dir, self.names, self.options = save_dir, names, options
        self.names_taken = OutputNames()
        self.stem = ""  # the output stem of the input being handled
        self.video = VideoWriter()
        self.view = options.view_img
        if options.save_txt:
            (save_dir / "labels").mkdir(parents=True, exist_ok=True)
        if self.view and not display_available():
            LOGGER.warning("WARNING: --view-img needs a display, none is available here; not showing images")
            self.view = False

    def _locate(self, prediction: Prediction) -> str:
        """The output stem of a prediction's input: claimed on an input's first image or frame."""
        if prediction.result.frame <= 1:  # an image, or the first frame of a video or stream
            # Names are claimed only when files are written: a --nosave run (a benchmark repeating one image,
            # say) has nothing to keep apart and nothing to warn about.
            path = prediction.result.path
            writes = self.options.writes_files
            self.stem = self.names_taken.claim(path, prediction.video) if writes else Path(path).stem
        return self.stem

    def write(self, prediction: Prediction) -> bool:
        """Write labels, crops and the annotated image or frame; False when the viewer asked to stop ('q')."""
        o, result = self.options, prediction.result
        stem = self._locate(prediction)
        name = output_stem(stem, result.frame)
        if o.save_txt and len(result.boxes):
            boxes = torch.from_numpy(result.boxes).flip(0)  # lowest confidence first, as YOLOv5 writes them
            write_yolo_labels(self.save_dir / "labels" / f"{name}.txt", boxes, result.shape, o.save_conf)
        if not (o.save_img or o.save_crop or self.view):
            return True
        annotated = self._draw(prediction.image, result.boxes, name)
        if o.save_img and result.frame == 0:
            write_image(self.save_dir / f"{name}{Path(result.path).suffix}", annotated)
        elif o.save_img:
            self.video.write(self.save_dir / f"{stem}.mp4", annotated, prediction.capture, prediction.fps)
        if self.view:
            cv2.imshow(str(Path(result.path)), annotated)
            return cv2.waitKey(1) != ord("q")
        return True

    def _draw(self, image: np.ndarray, boxes: np.ndarray, name: str) -> np.ndarray:
        """Boxes and labels drawn on image (in place); crops saved from an untouched copy first."""
        o = self.options
        crop_source = image.copy() if o.save_crop else None
        annotator = Annotator(image, line_width=o.line_thickness)
        for *xyxy, conf, cls in reversed(boxes.tolist()):
            c, cls_name = int(cls), self.names[int(cls)]
            if o.save_img or self.view:
                label = "" if o.hide_labels else (cls_name if o.hide_conf else f"{cls_name} {conf:.2f}")
                annotator.box_label(xyxy, label, color=colors(c, bgr=True))
            if o.save_crop:
                save_one_box(xyxy, crop_source, file=self.save_dir / "crops" / crop_folder(cls_name, c) / f"{name}.jpg")
        return annotator.result()

    def saved_line(self) -> str:
        """'Results saved to <folder>[, n label files in <folder>/labels]', or '' when nothing is written."""
        o = self.options
        if not (o.save_txt or o.save_img):
            return ""
        labels = ""
        if o.save_txt:
            n = len(list((self.save_dir / "labels").glob("*.txt")))
            labels = f", {n} label file{'s' * (n != 1)} in {self.save_dir / 'labels'}"
        return f"Results saved to {self.save_dir}{labels}"

    def close(self) -> None:
        """Finish the open video, if any."""
        self.video.close()
