"""The tasks a model can do, each declared once: detect (boxes) and segment (boxes and instance masks). A task is
decided once, when a model is built from a YAML (by its head entry) or loaded from a checkpoint or an export (the
task it records; files written before tasks were recorded are read as detect), and travels with the model as
``model.task``; checkpoints and export metadata record its name. Every engine reads what it needs from that object
(the head's outputs, the loss, the metrics, the label rows, what detect writes) and never tests for a task itself:
tests/test_architecture.py refuses head-class, attribute, key and file-name tests outside this module and the head
modules.

Adding a task (pose, oriented boxes) is one declaration here, its heads (models/nn) and its loss."""

from dataclasses import dataclass

from models.nn.family import Family
from utils.errors import ModelConfigError


@dataclass(frozen=True)
class Task:
    """What one task needs from every engine."""

    name: str  # recorded in checkpoints and export metadata; Ultralytics' task names ('detect', 'segment')
    title: str  # for people
    yaml_heads: tuple[str, ...]  # the layer names a model YAML's last entry uses for this task's head
    head_field: str  # the Family field naming the head class it builds ('head', 'segment_head')
    masks: bool  # eval outputs carry mask coefficients (B, N, nm) and prototypes (B, nm, H/4, W/4) besides boxes
    loss: str  # added to the family's loss key in the training layer ('' for the family's detection loss)
    metrics: tuple[str, ...]  # what validation scores: COCO iouTypes, 'bbox' first
    label_rows: str  # a label row: 'box' (cls cx cy w h) or 'polygon' (cls x1 y1 x2 y2 ..., normalised)
    txt_rows: str  # what detect.py --save-txt writes per object: 'box' or 'polygon' (its largest piece)
    outputs: str  # the head's eval outputs, for people (docs/models.md has the full contract)

    def head(self, family: Family) -> str:
        """The head class (models/nn) a YAML's head entry builds for a model of family."""
        return getattr(family, self.head_field)

    def loss_key(self, family: Family) -> str:
        """The key of this task's loss for a model of family in the training layer (utils.train.setup.LOSSES)."""
        return f"{family.loss}-{self.loss}" if self.loss else family.loss


DETECT = Task(
    name="detect",
    title="detection",
    yaml_heads=("Detect",),
    head_field="head",
    masks=False,
    loss="",
    metrics=("bbox",),
    label_rows="box",
    txt_rows="box",
    outputs="(B, N, 5 + nc) predictions for NMS, or an end-to-end head's final (B, k, 6) detections",
)
SEGMENT = Task(
    name="segment",
    title="instance segmentation",
    yaml_heads=("Segment", "Segment26"),  # Segment26: how Ultralytics' YOLO26 files name theirs
    head_field="segment_head",
    masks=True,
    loss="segment",
    metrics=("bbox", "segm"),
    label_rows="polygon",
    txt_rows="polygon",
    outputs="detection's predictions, with per-prediction mask coefficients (B, N, nm) and prototypes "
    "(B, nm, H/4, W/4) (models.nn.segment.MaskOutputs)",
)

TASKS = {t.name: t for t in (DETECT, SEGMENT)}
DEFAULT = DETECT  # checkpoints and exports written before tasks were recorded


def task_named(name) -> Task:
    """The task a checkpoint or an export records; ModelConfigError for a name we do not know."""
    if name not in TASKS:
        raise ModelConfigError(f"unknown model task {str(name)[:40]!r} (known: {', '.join(TASKS)})")
    return TASKS[name]


def task_of_config(cfg: dict) -> Task:
    """The task a model YAML describes, by its last (head) entry's layer name; detect for anything else (the config
    checks say what is wrong with a head that is neither). The one place a config's task is told apart."""
    backbone, head = cfg.get("backbone"), cfg.get("head")
    layers = backbone + head if isinstance(backbone, list) and isinstance(head, list) else []
    name = layers[-1][2] if layers and isinstance(layers[-1], list) and len(layers[-1]) == 4 else None
    return next((t for t in TASKS.values() if name in t.yaml_heads), DEFAULT)


def task_of_checkpoint(ckpt: dict) -> Task:
    """The task a checkpoint records, or for files that do not record one (ours before tasks were, official YOLOv5
    and Ultralytics files), the one its model config describes. ModelConfigError when the recorded task is not the
    config's: the head built from the config would not be the task's."""
    described = task_of_config(ckpt["yaml"]) if isinstance(ckpt.get("yaml"), dict) else DEFAULT
    name = ckpt.get("task")
    if name is None:
        return described
    recorded = task_named(name)
    if recorded is not described:
        raise ModelConfigError(
            f"it records the task {recorded.name!r} but its model config has a {described.name} head"
        )
    return recorded


def task_of_export(meta: dict) -> Task:
    """The task an export's metadata records; exports written before they recorded it are detection exports."""
    name = meta.get("task")
    return DEFAULT if name is None else task_named(name)
