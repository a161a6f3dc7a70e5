"""Results: the detections of one image from the Python API (models.api.detector.Detector), with drawing and export."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from utils.errors import DetectError
from utils.files import is_run_dir, reserve_run_dir
from utils.infer.masks import InstanceMasks, draw_masks
from utils.infer.outputs import crop_folder, file_ids, write_image, write_refusal
from utils.infer.predict import detections_text
from utils.plots import Annotator, colors, save_one_box


@dataclass
class Results:
    """Detections on one image, in its original pixels, highest confidence first.

    boxes is the (n, 6) tensor x1, y1, x2, y2, conf, class that detect.py computes; xyxy, xywhn, conf and cls are
    views of it. image is the original BGR image (kept for plot, save and crop); path names it ('image0' for
    arrays, PIL images and tensors). masks: a segment model's, one per box, at the original size inside each box
    (masks.full(i) the (h, w) mask, masks.polygon(i) / polygon_normalised(i) its largest outline); None for a
    detector (utils/infer/masks.py).
    """

    boxes: torch.Tensor
    names: list[str]
    orig_shape: tuple[int, int]  # (height, width)
    image: np.ndarray
    path: str = "image0"
    frame: int = 0  # 1-based frame index for video and stream frames, 0 for images
    id: torch.Tensor | None = None  # (n,) track identities when tracking (Detector.track), else None
    masks: InstanceMasks | None = None

    @property
    def xyxy(self) -> torch.Tensor:
        """(n, 4) corners x1, y1, x2, y2 in original pixels."""
        return self.boxes[:, :4]

    @property
    def xywhn(self) -> torch.Tensor:
        """(n, 4) centre x, centre y, width, height as fractions of the image width and height."""
        h, w = self.orig_shape
        x1, y1, x2, y2 = self.xyxy.unbind(1)
        return torch.stack(((x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h), 1)

    @property
    def conf(self) -> torch.Tensor:
        """(n,) confidences."""
        return self.boxes[:, 4]

    @property
    def cls(self) -> torch.Tensor:
        """(n,) class ids (as floats, like YOLOv5's)."""
        return self.boxes[:, 5]

    def __len__(self) -> int:
        return len(self.boxes)

    def __repr__(self) -> str:
        counts = detections_text(self.boxes.numpy(), self.names).removesuffix(", ")
        h, w = self.orig_shape
        return f"Results({Path(self.path).name} {w}x{h}: {counts})"

    def plot(self, line_width: int | None = None, labels: bool = True, conf: bool = True) -> np.ndarray:
        """A BGR copy of the image with the boxes (and 'class conf' labels) drawn, as detect.py draws them; the line
        width (None: scaled with the image, as detect.py's default) sets the label font's size too."""
        image = self.image.copy()
        ids = [None] * len(self.boxes) if self.id is None else self.id.tolist()
        if self.masks is not None:  # under the boxes, coloured as detect.py draws them: by class, or by identity
            keys = [c if i is None else i for c, i in zip(self.boxes[:, 5].tolist(), ids)]
            draw_masks(image, self.masks, [colors(int(k), bgr=True) for k in keys])
        annotator = Annotator(image, line_width=line_width)
        for (*xyxy, score, cls), track_id in zip(reversed(self.boxes.tolist()), reversed(ids)):
            name = self.names[int(cls)]
            label = (f"{name} {score:.2f}" if conf else name) if labels else ""
            if track_id is not None:  # an identity keeps its colour from frame to frame
                label = f"id:{int(track_id)} {label}".strip() if labels else ""
            annotator.box_label(xyxy, label, color=colors(int(cls if track_id is None else track_id), bgr=True))
        return annotator.result()

    def save(self, save_dir: str | Path = "runs/detect/api") -> Path:
        """Write the annotated image to save_dir/<name>.jpg (or the input's suffix) and return its path; a video or
        stream frame is saved as <video stem>_<frame>.jpg, so no frame overwrites another.

        A new or empty save_dir becomes a run folder (utils.files' marker), where later saves replace their
        earlier files; in any other existing folder only new files are written. The input image itself is
        never written over. Raises DetectError (one line) when the file may not be written."""
        name, folder = Path(self.path), Path(save_dir)
        if not folder.is_dir() or is_run_dir(folder) or not any(folder.iterdir()):
            reserve_run_dir(folder, exist_ok=True)
        if self.frame:
            file = folder / f"{name.stem}_{self.frame}.jpg"
        else:
            file = folder / (name.name if name.suffix else f"{name.name}.jpg")
        inputs, replace = file_ids([self.path]), is_run_dir(folder)

        def may_write(target: Path) -> bool:
            if reason := write_refusal(target, inputs, replace):
                raise DetectError(f"cannot save {target}: {reason}")
            return True

        return write_image(file, self.plot(), may_write) or file

    def crop(self, save_dir: str | Path = "runs/detect/api") -> list[np.ndarray]:
        """Save each box's crop to save_dir/crops/<class>/<name>.jpg (as detect.py --save-crop); the BGR crops."""
        crops = []
        stem = Path(self.path).stem
        for *xyxy, _, cls in reversed(self.boxes.tolist()):
            folder = Path(save_dir) / "crops" / crop_folder(self.names[int(cls)], int(cls))
            name = f"{stem}_{self.frame}" if self.frame else stem
            crops.append(save_one_box(xyxy, self.image, file=folder / f"{name}.jpg"))
        return crops

    def to_dict(self) -> dict:
        """Plain Python: path, shape and one dict per box (class id, name, confidence, xyxy in pixels)."""
        boxes = [
            {"class": int(c), "name": self.names[int(c)], "confidence": round(s, 5), "xyxy": [round(v, 2) for v in b]}
            for *b, s, c in self.boxes.tolist()
        ]
        if self.id is not None:
            for box, track_id in zip(boxes, self.id.tolist()):
                box["id"] = int(track_id)
        for i, box in enumerate(boxes if self.masks is not None else []):  # the largest outline, in pixels
            box["polygon"] = [[round(x, 2), round(y, 2)] for x, y in self.masks.polygon(i).tolist()]
        out = {"path": self.path, "height": self.orig_shape[0], "width": self.orig_shape[1], "boxes": boxes}
        return {**out, "frame": self.frame} if self.frame else out

    def to_json(self, indent: int | None = None) -> str:
        """to_dict() as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)
