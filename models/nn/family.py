"""The model families, each declared once: YOLOv5 (anchor-based), YOLOv8/YOLO11 (anchor-free, DFL boxes) and YOLO26
(anchor-free, end-to-end). A family is decided once, when a model is built from a YAML or loaded from a checkpoint
or an export, and travels with it as ``model.family``; checkpoints and export metadata record its name. Every engine
reads what it needs from that object (thresholds, box rounding, AutoAnchor, the loss and hyperparameter keys) and
never tests for a family itself: tests/test_architecture.py refuses class, attribute, hyp-key and file-name tests
outside this module.

Adding a family is one declaration here, its layers (models/nn) and its loss (utils/train/setup.LOSSES)."""

import re
from dataclasses import dataclass, replace

from utils.errors import ModelConfigError


@dataclass(frozen=True)
class Family:
    """What one model family needs from every engine."""

    name: str  # recorded in checkpoints and export metadata
    title: str  # for people: "YOLOv5", "YOLOv8/YOLO11", "YOLO26"
    head: str  # the layer class a YAML's Detect entry builds (models/nn/head.py)
    segment_head: str  # the layer class a YAML's Segment entry builds (models/nn/segment.py)
    anchors: bool  # anchor-based head: the YAML lists anchors and AutoAnchor fits them before training
    end2end: bool  # eval output is final (B, k, 6) detections, thresholded without NMS
    pixel_boxes: bool  # detections rounded to whole pixels, as the family's own detect does
    hyp_file: str  # data/<hyp_file> when train.py gets no --hyp
    hyp_schema: str  # its hyperparameter keys (utils.data.hyp.HYP_SCHEMAS) and evolve search space
    loss: str  # the key of its loss in the training layer (utils.train.setup.LOSSES)
    optimizer: str  # --optimizer auto's rule: "sgd" (YOLOv5's) or "ultralytics" (AdamW or SGD by run length)
    predict_conf: float  # detect.py, the Detector, torch.hub
    predict_iou: float
    val_conf: float  # test.py and the Trainer's validation
    val_iou: float
    max_det: int  # detect.py's default --max-det; for an end-to-end head also the most it gives (its top k)
    official_weights: str  # regex of its official weights' file names (train.py's --hyp default before download)

    def merged(self) -> "Family":
        """This family as an ensemble or test-time augmentation sees it: predictions merged before NMS, so an
        end-to-end head gives its one-to-many (NMS) predictions."""
        return replace(self, end2end=False)


YOLOV5 = Family(
    name="yolov5",
    title="YOLOv5",
    head="Detect",
    segment_head="Segment",
    anchors=True,
    end2end=False,
    pixel_boxes=True,
    hyp_file="hyp.scratch.yaml",
    hyp_schema="yolov5",
    loss="yolov5",
    optimizer="sgd",
    predict_conf=0.25,
    predict_iou=0.45,
    val_conf=0.001,
    val_iou=0.6,
    max_det=1000,
    official_weights=r"yolov5[nsmlx]6?u?\.pt",
)
YOLOV8 = Family(
    name="yolov8",
    title="YOLOv8/YOLO11",
    head="AnchorFreeDetect",
    segment_head="AnchorFreeSegment",
    anchors=False,
    end2end=False,
    pixel_boxes=False,
    hyp_file="hyp.anchor_free.yaml",
    hyp_schema="anchor_free",
    loss="anchor_free",
    optimizer="ultralytics",
    predict_conf=0.25,
    predict_iou=0.7,
    val_conf=0.001,
    val_iou=0.7,
    max_det=1000,
    official_weights=r"yolo(v8|11)[nsmlx]\.pt",
)
YOLO26 = replace(  # its head outputs its top 300 (models/nn/head.py AnchorFreeDetect.max_det; an export's graph too)
    YOLOV8,
    name="yolo26",
    title="YOLO26",
    segment_head="AnchorFreeSegment26",  # its prototypes are made from all three levels (and a training-only branch)
    end2end=True,
    loss="end2end",
    max_det=300,
    official_weights=r"yolo26[nsmlx]\.pt",
)

FAMILIES = {f.name: f for f in (YOLOV5, YOLOV8, YOLO26)}
DEFAULT = YOLOV5  # an export written before exports recorded their family, and not end-to-end


def family_named(name) -> Family:
    """The family a checkpoint or an export records; ModelConfigError for a name we do not know."""
    if not isinstance(name, str) or name not in FAMILIES:  # a list or mapping from a file is no name either
        raise ModelConfigError(f"unknown model family {str(name)[:40]!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[name]


def family_of_config(cfg: dict) -> Family:
    """The family a model YAML describes: YOLOv5's lists anchors; Ultralytics' layouts have none, and YOLO26's sets
    end2end. The one place a config is told apart (checkpoints without a recorded family are read through it)."""
    if "anchors" in cfg:
        return YOLOV5
    return YOLO26 if cfg.get("end2end") is True else YOLOV8


def family_of_checkpoint(ckpt: dict) -> Family:
    """The family a checkpoint records, or for files written before checkpoints recorded it (ours, official YOLOv5
    and Ultralytics files), the one its model config describes."""
    name = ckpt.get("family")
    return family_named(name) if name is not None else family_of_config(ckpt["yaml"])


def family_of_export(meta: dict) -> Family:
    """The family an export's metadata records; exports written before they recorded it are read as YOLO26 when
    end-to-end, else as YOLOv5 (whose thresholds they were run with then)."""
    name = meta.get("family")
    if name is not None:
        family = family_named(name)
    else:
        family = YOLO26 if meta.get("end2end") else DEFAULT
    return family if meta.get("end2end", family.end2end) == family.end2end else family.merged()


def family_of_weights_name(name: str) -> Family | None:
    """The family of an official weights file by its name (yolov5s.pt, yolo11n.pt), for train.py's --hyp default
    before the file is downloaded; None for any other name."""
    return next((f for f in FAMILIES.values() if re.fullmatch(f.official_weights, name)), None)


def mixed_rule(families: list[Family]) -> Family:
    """An ensemble's family: the first model's, merged before NMS (its thresholds are the ensemble's defaults)."""
    return families[0].merged()
