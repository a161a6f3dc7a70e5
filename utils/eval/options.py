"""test.py's options, declared once: TestCommand's fields are its flags (same names and defaults;
tests/commands/test_options.py checks both ways) and the keywords of utils.eval.validate_weights.run. This module
imports neither torch nor models, so that test.py can parse its flags and score a results file without them."""

from dataclasses import dataclass
from pathlib import Path

TASKS = ("train", "val", "test", "speed")


@dataclass
class TestCommand:
    """What test.py is asked to do. None for the size or a threshold: the model's (its training size, else 640;
    its family's validation thresholds: YOLOv5 conf 0.001 / IoU 0.6, YOLOv8/YOLO11/YOLO26 0.001 / 0.7; an
    ensemble: its first model's; --task speed: the family's detect thresholds)."""

    __test__ = False  # not a pytest test class, whatever its name

    data: str | Path | dict = "coco128.yaml"
    weights: str | Path | list | None = None
    batch_size: int = 32
    imgsz: int | None = None
    conf_thres: float | None = None
    iou_thres: float | None = None
    max_det: int = 300
    task: str = "val"
    device: str = ""
    half: bool | None = None
    bf16: bool = False
    workers: int = 8
    augment: bool = False
    single_cls: bool = False
    verbose: bool = False
    save_txt: bool = False
    save_conf: bool = False
    save_json: bool = False
    project: str | Path = "runs/test"
    name: str = "exp"
    exist_ok: bool = False
    plots: bool = True
    ann_json: str | None = None
    pred_json: str | None = None  # with ann_json: score this COCO results file instead of running a model
