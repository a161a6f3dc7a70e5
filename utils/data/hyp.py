"""Hyperparameter YAMLs (data/hyp.*.yaml): found like a data YAML, read as bounded data, and checked key by key."""

import math
from pathlib import Path

from utils.data.config import read_yaml_mapping, resolve_yaml
from utils.errors import DatasetError

HYP_KEYS = (
    "lr0",
    "lrf",
    "momentum",
    "weight_decay",
    "warmup_epochs",
    "warmup_momentum",
    "warmup_bias_lr",
    "box",
    "cls",
    "cls_pw",
    "obj",
    "obj_pw",
    "iou_t",
    "anchor_t",
    "fl_gamma",
    "hsv_h",
    "hsv_s",
    "hsv_v",
    "degrees",
    "translate",
    "scale",
    "shear",
    "perspective",
    "flipud",
    "fliplr",
    "mosaic",
    "mixup",
    "copy_paste",
)

# The anchor-free models' (YOLOv8, YOLO11, YOLO26; Ultralytics' default.yaml): no objectness or anchor keys, a
# distance (DFL) gain instead.
ANCHOR_FREE_HYP_KEYS = tuple(
    k for k in HYP_KEYS if k not in ("cls_pw", "obj", "obj_pw", "iou_t", "anchor_t", "fl_gamma")
) + ("dfl",)

# The key sets a hyperparameter file may have, by the name a model family gives as its hyp_schema
# (models/nn/family.py). A file is held to the set it is closest to.
HYP_SCHEMAS = {"yolov5": HYP_KEYS, "anchor_free": ANCHOR_FREE_HYP_KEYS}

HYP_AT_MOST_1 = ("momentum", "warmup_momentum", "flipud", "fliplr", "mosaic", "mixup", "copy_paste")  # probabilities
# anchors: YOLOv5 allows anchors-per-layer here to override the model's anchors; close_mosaic: train the last N
# epochs without mosaic (Ultralytics' close_mosaic; 0 or absent: never)
HYP_OPTIONAL = ("anchors", "close_mosaic")


def hyp_schema(hyp) -> str:
    """The name of the key set (HYP_SCHEMAS) a hyperparameter set is closest to: fewest keys missing or unknown,
    the first on a tie."""

    def distance(keys: tuple[str, ...]) -> int:
        return len(set(keys) ^ (set(hyp) - set(HYP_OPTIONAL)))

    return min(HYP_SCHEMAS, key=lambda name: distance(HYP_SCHEMAS[name]))


def required_hyp_keys(hyp) -> tuple[str, ...]:
    """The keys a hyperparameter set must have: those of the key set it is closest to."""
    return HYP_SCHEMAS[hyp_schema(hyp)]


def load_hyp(path: str | Path) -> dict:
    """Read a hyperparameter YAML (YOLOv5's keys, or the anchor-free models' with 'dfl': HYP_SCHEMAS); unknown,
    missing or non-numeric values are errors."""
    file = resolve_yaml(path, "hyperparameter")
    hyp = read_yaml_mapping(file, "hyperparameter")
    required = required_hyp_keys(hyp)
    unknown = sorted(set(hyp) - set(required) - set(HYP_OPTIONAL))
    if unknown:
        raise DatasetError(
            f"{file}: unknown hyperparameter(s) {', '.join(unknown)} for the {hyp_schema(hyp)} key set "
            f"(valid: {', '.join(required)})"
        )
    missing = [k for k in required if k not in hyp]
    if missing:
        raise DatasetError(f"{file}: missing hyperparameter(s) {', '.join(missing)}")
    for k, v in hyp.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise DatasetError(f"{file}: hyperparameter {k} must be a finite number, got {v!r}")
        hi = 1 if k in HYP_AT_MOST_1 else math.inf
        if not 0 <= v <= hi:  # anchors (per output layer, rounded; 0 to ignore) too: YOLOv5's evolved hyps have 3.63
            valid = "in [0, 1]" if hi == 1 else ">= 0"
            raise DatasetError(f"{file}: hyperparameter {k} must be {valid}, got {v!r}")
    if "close_mosaic" in hyp and hyp["close_mosaic"] != int(hyp["close_mosaic"]):
        raise DatasetError(
            f"{file}: hyperparameter close_mosaic must be a whole number of epochs, got {hyp['close_mosaic']!r}"
        )
    return {k: float(v) if k != "anchors" else v for k, v in hyp.items()}
