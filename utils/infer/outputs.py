"""What detection writes and shows per image or frame: txt labels, crops, annotated images and videos, a window.

Each output is a small writer; Outputs runs the ones OutputOptions asks for, under a unique name per input.
Nothing is written over an input, and nothing over a file this run did not write except an earlier run's
outputs in a run folder (one with utils.files' marker): the second guard behind reserve_run_dir.
"""

import errno
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from utils.errors import DetectError, RunFolderError
from utils.files import increment_path, is_run_dir
from utils.infer.masks import InstanceMasks, draw_masks, polygon_rows
from utils.infer.predict import Prediction
from utils.labels import write_yolo_labels
from utils.log import LOGGER
from utils.plots import Annotator, colors, imwrite, save_one_box
from utils.track.session import Tracked


@dataclass
class OutputOptions:
    """Which outputs to write or show, and how boxes are drawn (detect.py's flags of the same names)."""

    save_img: bool = True  # annotated images and videos (not --nosave)
    save_txt: bool = False
    save_conf: bool = False
    save_crop: bool = False
    view_img: bool = False
    line_thickness: int | None = None  # None: scaled with each image (utils.plots.default_line_width)
    hide_labels: bool = False
    hide_conf: bool = False

    @property
    def writes_files(self) -> bool:
        """Whether any file is written per input."""
        return self.save_img or self.save_txt or self.save_crop


def mot_rows(frame: int, boxes: np.ndarray, ids: np.ndarray) -> str:
    """MOTChallenge rows `frame,id,x,y,w,h,conf,-1,-1,-1` (pixels, top-left corner) of tracked (n, 6) xyxy boxes.
    Widths and heights are taken in the boxes' own precision (float32 from a tracker), as Ultralytics writes them."""
    wh = boxes[:, 2:4] - boxes[:, :2]
    return "".join(
        f"{frame},{int(i)},{x1:.2f},{y1:.2f},{w:.2f},{h:.2f},{conf:.4f},-1,-1,-1\n"
        for (x1, y1, _, _, conf, _), (w, h), i in zip(boxes.tolist(), wh.tolist(), ids.tolist())
    )


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
    if Path(project).exists() and not Path(project).is_dir():
        folder = (Path(project) / name).absolute()
        raise DetectError(f"cannot create the output folder {folder}: {os.strerror(errno.ENOTDIR)}")
    try:
        return increment_path(Path(project) / name, exist_ok=exist_ok, mkdir=True)
    except RunFolderError as e:  # --project is a file or read-only, or --exist-ok names a folder no run made
        raise DetectError(str(e)) from None
    except OSError as e:  # e.g. a name too long for the file system
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


def file_ids(paths) -> set[tuple[int, int]]:
    """(device, inode) of each existing path: what os.path.samefile compares, so hard links and symlinks to an
    input are recognised, with one stat per input rather than one comparison per input and output."""
    ids = set()
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids


def write_refusal(file: Path, inputs: set[tuple[int, int]], replace: bool) -> str:
    """Why file must not be written, or '': it is an input (its id in inputs) or a symbolic link (writing would go
    to wherever it points), or it exists and replace is False (it is not an earlier run's output)."""
    if os.path.islink(file):
        return "it is a symbolic link, not a file a run wrote"
    try:
        st = os.stat(file)
    except FileNotFoundError:
        return ""
    except OSError as e:
        return f"cannot check it: {e.strerror or e}"
    if (st.st_dev, st.st_ino) in inputs:
        return "it is one of the inputs"
    return "" if replace else "it exists and was not written by a run"


def write_image(file: Path, image: np.ndarray, may_write=lambda f: True) -> Path | None:
    """Save an annotated image in its input's format, or as .jpg where OpenCV cannot write that format; the path
    written, or None. may_write(path) is asked before each file is written."""
    for target in (file, file.with_suffix(".jpg")):
        if not may_write(target):
            return None
        if imwrite(target, image):
            return target
        if target.suffix.lower() == ".jpg":
            break
    LOGGER.warning("WARNING: could not write %s", file)
    return None


def clear_stale_labels(folder: Path, inputs: set[tuple[int, int]], kind: str = "label") -> int:
    """Remove the *.txt files an earlier run left in a run folder's labels/ (or tracks/; never an input), so the
    folder holds this run's files only; the number removed. Only a real folder inside a run folder is cleared."""
    if not is_run_dir(folder.parent) or folder.is_symlink() or not folder.is_dir():
        return 0
    removed = 0
    for file in folder.glob("*.txt"):
        if write_refusal(file, inputs, replace=True) == "it is one of the inputs":
            continue
        if file.is_symlink() or file.is_file():
            file.unlink()
            removed += 1
    if removed:
        LOGGER.info(f"Removed {removed} {kind} file{'s' * (removed != 1)} of an earlier run from {folder}")
    return removed


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


class MotFiles:
    """One MOTChallenge file per tracked sequence, tracks/<sequence stem>.txt, appended to frame by frame (one file
    open at a time: a run reads its sequences one after another). Sequences with the same stem get _2, _3 ...
    The first write clears the *.txt an earlier run left there (an --exist-ok rerun), as labels/ is cleared."""

    def __init__(self, folder: Path, inputs: set[tuple[int, int]] = frozenset()):
        self.folder, self.inputs = folder, inputs
        self.files: dict[str, Path] = {}
        self.handle = None
        self.open_sequence = ""

    def path(self, sequence: str) -> Path:
        if sequence not in self.files:
            stem, n = Path(sequence).stem or "stream", 1
            taken = {p.name for p in self.files.values()}
            while (name := f"{stem}{'_' + str(n) if n > 1 else ''}.txt") in taken:
                n += 1
            self.files[sequence] = self.folder / name
        return self.files[sequence]

    def write(self, tracked: Tracked, boxes: np.ndarray, may_write) -> None:
        if tracked.sequence != self.open_sequence:
            self.close()
            file = self.path(tracked.sequence)
            self.folder.mkdir(parents=True, exist_ok=True)
            if len(self.files) == 1:  # this run's first sequence: what is there is an earlier run's
                clear_stale_labels(self.folder, self.inputs, "track")
            if not may_write(file):
                return
            self.handle, self.open_sequence = open(file, "w", encoding="utf-8"), tracked.sequence
        if self.handle is not None:
            self.handle.write(mot_rows(tracked.frame, boxes, tracked.ids))

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        self.handle, self.open_sequence = None, ""


class Outputs:
    """Everything detection writes or shows for each Prediction, configured by one OutputOptions.

    inputs are the files being read (images, videos, the .txt list): no output is ever written over one of them.
    A file that exists and that this run did not write is replaced only in a run folder (an earlier run's output);
    an earlier run's labels/*.txt there are removed first, so labels/ holds exactly this run's labels."""

    def __init__(self, save_dir: Path, names: list[str], options: OutputOptions, inputs=()):
        self.save_dir, self.names, self.options = save_dir, names, options
        self.names_taken = OutputNames()
        self.stem = ""  # the output stem of the input being handled
        self.video = VideoWriter()
        self.view = options.view_img
        self.inputs = file_ids(inputs)
        self.replace = is_run_dir(save_dir)  # files there were written by a run: they may be replaced
        self.written: set[Path] = set()  # files this run wrote (or may write: a video being written)
        self.refused: set[Path] = set()  # files it was refused to write, warned about once
        self.labels: set[Path] = set()  # the label files this run wrote
        self.tracks = MotFiles(save_dir / "tracks", self.inputs)
        if options.save_txt:
            (save_dir / "labels").mkdir(parents=True, exist_ok=True)
            clear_stale_labels(save_dir / "labels", self.inputs)
        if self.view and not display_available():
            LOGGER.warning("WARNING: --view-img needs a display, none is available here; not showing images")
            self.view = False

    def may_write(self, file: Path) -> bool:
        """Whether this run may write file (see write_refusal); a refusal is a warning, once per file."""
        if file in self.written:
            return True
        if file in self.refused:
            return False
        reason = write_refusal(file, self.inputs, self.replace)
        if not reason and not file.parent.resolve().is_relative_to(self.save_dir.resolve()):
            reason = f"its folder leads out of {self.save_dir} (a symbolic link)"
        if reason:
            self.refused.add(file)
            LOGGER.warning("WARNING: not writing %s: %s", file, reason)
            return False
        self.written.add(file)
        return True

    def _locate(self, prediction: Prediction) -> str:
        """The output stem of a prediction's input: claimed on an input's first image or frame."""
        if prediction.result.frame <= 1:  # an image, or the first frame of a video or stream
            # Names are claimed only when files are written: a --nosave run (a benchmark repeating one image,
            # say) has nothing to keep apart and nothing to warn about.
            path = prediction.result.path
            writes = self.options.writes_files
            self.stem = self.names_taken.claim(path, prediction.video) if writes else Path(path).stem
        return self.stem

    def write(self, prediction: Prediction, tracked: Tracked | None = None) -> bool:
        """Write labels, crops and the annotated image or frame; False when the viewer asked to stop ('q'). With
        tracked, boxes are labelled with their identities, which also end each --save-txt row and go to the
        sequence's MOTChallenge file tracks/<sequence>.txt."""
        o, result = self.options, prediction.result
        stem = self._locate(prediction)
        name = output_stem(stem, result.frame)
        label_file = self.save_dir / "labels" / f"{name}.txt"
        if o.save_txt and len(result.boxes) and self.may_write(label_file):
            self._write_labels(label_file, result, tracked)
        if tracked is not None:  # written with --nosave too: it is the tracking's result, not an image
            self.tracks.write(tracked, result.boxes, self.may_write)
        if not (o.save_img or o.save_crop or self.view):
            return True
        ids = None if tracked is None else tracked.ids  # a tracked box's mask is its detection's (track_inputs)
        annotated = self._draw(prediction.image, result.boxes, name, ids, result.masks)
        video_file = self.save_dir / f"{stem}.mp4"
        if o.save_img and result.frame == 0:
            write_image(self.save_dir / f"{name}{Path(result.path).suffix}", annotated, self.may_write)
        elif o.save_img and self.may_write(video_file):
            self.video.write(video_file, annotated, prediction.capture, prediction.fps)
        if self.view:
            cv2.imshow(str(Path(result.path)), annotated)
            return cv2.waitKey(1) != ord("q")
        return True

    def _write_labels(self, file: Path, result, tracked: Tracked | None) -> None:
        if result.masks is not None:  # a segment model's: polygon rows (utils/infer/masks.py), a track's id last
            rows = polygon_rows(result.masks, result.boxes, self.options.save_conf, lowest_first=True)
            if tracked is not None:  # row by row: a mask with no outline writes no row, and must not shift the ids
                rows = [f"{row} {int(i)}" for i, row in self._tracked_polygon_rows(result, tracked.ids)]
            file.write_text("".join(f"{row}\n" for row in rows))
        else:  # lowest confidence first, as YOLOv5 writes them; a new file each time, not appended
            boxes = torch.from_numpy(result.boxes).flip(0)
            write_yolo_labels(file, boxes, result.shape, self.options.save_conf)
        if tracked is not None and result.masks is None:  # the track id as the last column of each row (in order)
            lines = file.read_text().splitlines()
            ids = tracked.ids[::-1].tolist()
            file.write_text("".join(f"{line} {int(i)}\n" for line, i in zip(lines, ids)))
        self.labels.add(file)

    def _tracked_polygon_rows(self, result, ids: np.ndarray) -> list[tuple[int, str]]:
        """(track id, polygon row) per tracked box with an outline, lowest confidence first."""
        rows, masks = [], result.masks
        for i in range(len(masks) - 1, -1, -1):
            one = InstanceMasks(masks.shape, masks.origins[i : i + 1], masks.crops[i : i + 1])
            rows += [(ids[i], row) for row in polygon_rows(one, result.boxes[i : i + 1], self.options.save_conf)]
        return rows

    def _draw(self, image: np.ndarray, boxes: np.ndarray, name: str, ids: np.ndarray | None = None, masks=None):
        """Boxes and labels drawn on image (in place); crops saved from an untouched copy first. With ids, each box
        is labelled 'id:<n>' first and coloured by its identity, so one object keeps its colour from frame to frame."""
        o = self.options
        crop_source = image.copy() if o.save_crop else None
        if masks is not None and (o.save_img or self.view):  # under the boxes, coloured as they are
            keys = boxes[:, 5] if ids is None else ids  # a tracked box's colour is its identity's: its mask's too
            draw_masks(image, masks, [colors(int(k), bgr=True) for k in keys])
        annotator = Annotator(image, line_width=o.line_thickness)
        id_list = [None] * len(boxes) if ids is None else ids.tolist()
        for (*xyxy, conf, cls), track_id in zip(reversed(boxes.tolist()), reversed(id_list)):
            c, cls_name = int(cls), self.names[int(cls)]
            if o.save_img or self.view:
                label = "" if o.hide_labels else (cls_name if o.hide_conf else f"{cls_name} {conf:.2f}")
                if track_id is not None:
                    label = f"id:{int(track_id)} {label}".strip()
                annotator.box_label(xyxy, label, color=colors(c if track_id is None else int(track_id), bgr=True))
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
            n = len(self.labels)  # this run's files only
            labels = f", {n} label file{'s' * (n != 1)} in {self.save_dir / 'labels'}"
        return f"Results saved to {self.save_dir}{labels}"

    def close(self) -> None:
        """Finish the open video and MOTChallenge file, if any."""
        self.video.close()
        self.tracks.close()
