"""TrainConfig: everything one training run is asked to do, typed and frozen, built once from train.py's flags
(from_namespace) or in Python (TrainConfig(data=..., cfg=...)). The Trainer reads it and never changes it: what a
run resolves along the way (the AutoBatch size, its run folder) is the Trainer's own state, and saved_options()
records both in opt.yaml and in the checkpoints, which --resume reads back."""

import argparse
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from models.nn.config import load_cfg
from models.nn.family import YOLOV5, Family, family_of_checkpoint, family_of_config, family_of_weights_name
from models.weights.checkpoint import load_checkpoint
from utils import downloads
from utils.data.hyp import load_hyp
from utils.errors import YoloError
from utils.files import DATA_DIR, REPO_ROOT

DEFAULT_PROJECT = REPO_ROOT / "runs" / "train"


@dataclass(frozen=True)
class TrainConfig:
    """train.py's options (its flags, same names and defaults) plus the hyperparameter values themselves."""

    # What to train, on what
    weights: str = ""  # initial weights: '' (scratch), ours or official YOLOv5
    cfg: str = ""  # model YAML (from scratch, or a different head for --weights)
    data: str = "coco128.yaml"
    hyp: dict = field(default_factory=dict)  # the values; empty: read from hyp_file
    hyp_file: str = ""  # where they came from ('' : the model family's default file)
    single_cls: bool = False
    # How long, how big
    epochs: int = 100
    batch_size: int = 16  # total over all processes; -1: AutoBatch
    imgsz: int = 640
    rect: bool = False
    image_weights: bool = False
    quad: bool = False
    multi_scale: bool = False
    cache: str | None = None  # 'ram', 'disk' or None
    workers: int = 8
    # Optimisation
    optimizer: str = "auto"  # SGD for YOLOv5; Ultralytics' choice for the anchor-free family (setup.choose_optimizer)
    cos_lr: bool = False
    label_smoothing: float = 0.0
    patience: int = 100
    freeze: tuple[int, ...] = (0,)
    seed: int = 0
    amp: bool | None = None  # None: on for CUDA, off on the CPU
    sync_bn: bool = False
    noautoanchor: bool = False
    # Validation and saving
    noval: bool = False
    nosave: bool = False
    noplots: bool = False
    save_period: int = -1
    project: str = str(DEFAULT_PROJECT)
    name: str = "exp"
    exist_ok: bool = False
    save_dir: str | None = None  # a given run folder (a resumed run's own, an evolve generation's); None: a new one
    # Run mode and hardware
    resume: bool = False
    evolve: int | None = None
    device: str = ""

    def __post_init__(self):
        # Frozen: the two normalisations happen here, once, before anyone reads the config.
        if not self.hyp:  # the model family's default file (YOLOv5's when the model cannot be read yet)
            family = model_family(self.cfg, self.weights) or YOLOV5
            object.__setattr__(self, "hyp_file", self.hyp_file or str(DATA_DIR / family.hyp_file))
            object.__setattr__(self, "hyp", load_hyp(self.hyp_file))
        object.__setattr__(self, "freeze", tuple(self.freeze))

    @classmethod
    def from_namespace(cls, opt: argparse.Namespace, **values) -> "TrainConfig":
        """The config of train.py's parsed flags (unknown attributes ignored), with values given here overriding."""
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in vars(opt).items() if k in names}
        given["resume"] = bool(given.get("resume"))
        return cls(**{**given, **values})

    def saved_options(self, **resolved) -> dict:
        """The options as plain values (weights_only checkpoints and opt.yaml hold nothing else), with what the run
        resolved (batch_size, save_dir) in place of what was asked."""
        return _plain({**asdict(self), **resolved})


def _plain(value):
    """value with only plain types (str, numbers, bools, None, lists, dicts with str keys)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    if isinstance(value, dict):
        return {str(k): _plain(x) for k, x in value.items()}
    return str(value)


def model_family(cfg: str, weights: str) -> Family | None:
    """The family of the model train.py will build: from --cfg when given, else from the --weights file (or an
    official name not downloaded yet). None when neither can be read: the Trainer then reports why."""
    try:
        if cfg:
            return family_of_config(load_cfg(cfg))
        if not weights:
            return None
        path = Path(weights)
        local = path if path.is_file() or path.name != str(weights) else downloads.WEIGHTS_DIR / path
        if local.is_file():
            return family_of_checkpoint(load_checkpoint(local))
        return family_of_weights_name(path.name)
    except (YoloError, FileNotFoundError, OSError):
        return None
