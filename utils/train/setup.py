"""Training set-up: the model (from a config, from weights, or resumed), frozen layers, optimizer parameter groups,
the learning-rate schedule and early stopping. Each is usable on its own (tests, scripts/gpu_check.py, benchmarks).
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader

from models.nn.family import Family, family_of_checkpoint
from models.nn.yolo import Model
from models.weights.checkpoint import load_checkpoint
from utils.data.config import load_data_config
from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import HYP_SCHEMAS
from utils.data.loader import create_dataloader
from utils.downloads import attempt_download_weights
from utils.errors import DownloadError, TrainError
from utils.log import LOGGER, one_line
from utils.torch_utils import de_parallel
from utils.train.config import TrainConfig
from utils.train.distributed import LOCAL_RANK, WORLD_SIZE
from utils.train.loss import ComputeLoss
from utils.train.loss_anchor_free import AnchorFreeLoss, EndToEndLoss
from utils.train.loss_segment import AnchorSegmentLoss
from utils.train.loss_segment_anchor_free import AnchorFreeSegmentLoss, EndToEndSegmentLoss
from utils.train.step import NBS

# ---------------------------------------------------------------------------------------------------------------------
# Model, weights and image size


def intersect_state_dicts(src: dict, dst: dict, exclude: tuple[str, ...] = ()) -> dict:
    """Entries of src whose name and shape match dst, skipping names containing any exclude string."""
    return {k: v for k, v in src.items() if k in dst and not any(x in k for x in exclude) and v.shape == dst[k].shape}


def build_model(
    config: TrainConfig, nc: int, hyp: dict, device: torch.device, resume_ckpt: dict | None = None
) -> tuple[Model, bool]:
    """The model to train: from --cfg, from --weights with every matching tensor transferred, or resumed; and
    whether its detection head (output layers and anchors) came trained from the weights."""
    anchors = round(hyp.get("anchors") or 0) or None  # as YOLOv5: rounded, and 0 keeps the config's anchors
    if resume_ckpt is not None:  # the training weights (not the EMA) of the interrupted run
        saved_nc = resume_ckpt["yaml"].get("nc")
        if saved_nc != nc:
            raise TrainError(
                f"{config.weights} cannot be resumed: it was trained for {saved_nc} classes but {config.data} "
                f"now has {nc}; start a new run with --weights {config.weights}"
            )
        model = _make_model(resume_ckpt["yaml"], nc, None, family_of_checkpoint(resume_ckpt))
        load_resume_state(model, resume_ckpt["train_model"], f"{config.weights}: its training weights")
        return model.to(device), True
    if not config.weights:
        if not config.cfg:
            raise TrainError("give --cfg (e.g. yolov5s.yaml) to train from scratch, or --weights to fine-tune")
        return _make_model(config.cfg, nc, anchors).to(device), False
    try:
        path = attempt_download_weights(config.weights)
    except DownloadError as e:
        raise TrainError(str(e)) from None
    ckpt = load_checkpoint(path)
    model = _make_model(config.cfg or ckpt["yaml"], nc, anchors, None if config.cfg else family_of_checkpoint(ckpt))
    # Anchors come from the checkpoint unless the user chose a config or anchor count of their own.
    exclude = ("anchor",) if config.cfg or anchors else ()
    model_state = model.state_dict()
    matched = intersect_state_dicts(ckpt["model"], model_state, exclude)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in matched.items()}, strict=False)
    LOGGER.info(f"Transferred {len(matched)}/{len(model_state)} items from {path}")
    skipped = [k for k in model_state if k not in matched and not k.endswith("num_batches_tracked")]
    if skipped:
        LOGGER.info(
            f"Not transferred (another shape or name, e.g. a different class count): {len(skipped)} "
            f"tensors, e.g. {', '.join(skipped[:3])}"
        )
    return model.to(device), head_transferred(model, matched)


def head_transferred(model: Model, transferred: dict) -> bool:
    """Whether an anchor-based head's output layers (YOLOv5's Detect.m) came from the weights together with the
    anchors they were trained against: the same class count, and no --cfg or anchor count of the user's own. Then
    AutoAnchor keeps those anchors. Anchor-free heads have none: always False."""
    head = f"model.{len(model.model) - 1}."
    names = [k for k in transferred if k.startswith(head)]
    return any(".m." in k for k in names) and any(k == f"{head}anchors" for k in names)


def load_resume_state(module: nn.Module, state: dict, what: str) -> None:
    """module.load_state_dict(state) as float32, or TrainError naming a weight that belongs to another model."""
    own = module.state_dict()
    problem = next((f"{k} is missing" for k in own if k not in state), None)
    problem = problem or next((f"{k} is not in the model" for k in state if k not in own), None)
    problem = problem or next(
        (
            f"{k} is {tuple(v.shape)} in the file but {tuple(own[k].shape)} in the model"
            for k, v in state.items()
            if v.shape != own[k].shape
        ),
        None,
    )
    if problem:
        raise TrainError(f"{what} do not fit its model config (a checkpoint of another model?): {problem}")
    module.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, last: str) -> None:
    """optimizer.load_state_dict(state), or TrainError when the state was saved for another model."""
    try:
        optimizer.load_state_dict(state)
        problem = next(
            (
                f"group {j} lacks {k}"
                for j, g in enumerate(optimizer.param_groups)
                for k in ("initial_lr", "lr")
                if k not in g
            ),
            None,
        )  # both written by a real run
        problem = problem or next(
            (
                f"a {tuple(v.shape)} buffer for a {tuple(p.shape)} weight"
                for p, st in optimizer.state.items()
                for v in st.values()
                if isinstance(v, torch.Tensor) and v.dim() and v.shape != p.shape
            ),
            None,
        )
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        problem = one_line(e)
    if problem:
        raise TrainError(
            f"{last}: its optimizer state does not fit the model (a checkpoint of another model?): {problem}"
        )


def _make_model(cfg, nc: int, anchors: int | None, family: Family | None = None) -> Model:
    """Model(cfg) for nc classes (of the family a checkpoint recorded, else the config's), or TrainError naming what
    in the config is unusable."""
    try:
        model = Model(cfg, ch=3, nc=nc, anchors=anchors, family=family)
    except FileNotFoundError as e:
        raise TrainError(str(e)) from None
    except (KeyError, ValueError, TypeError, IndexError) as e:
        where = "" if isinstance(cfg, dict) else f" {cfg}"
        raise TrainError(f"unusable model config{where}: {one_line(e)}") from None
    if (key := model.task.loss_key(model.family)) not in LOSSES:  # a task whose loss is not written yet
        raise TrainError(f"training {model.task.title} models is not supported yet (no '{key}' loss)")
    return model


def freeze_layers(model: nn.Module, freeze: list[int]) -> None:
    """Freeze the first N layers (--freeze N) or the listed indices (--freeze 0 1 2); TrainError if none is left."""
    n_layers = len(model.model)
    indices = freeze if len(freeze) > 1 else range(freeze[0])
    beyond = [x for x in freeze if x < 0 or x > n_layers or (len(freeze) > 1 and x == n_layers)]
    if beyond:
        valid = f"0..{n_layers - 1}" if len(freeze) > 1 else f"0..{n_layers} (the first N layers)"
        raise TrainError(f"--freeze {beyond[0]}: the model has {n_layers} layers, valid values are {valid}")
    prefixes = [f"model.{x}." for x in indices]
    frozen = 0
    for name, p in model.named_parameters():
        listed = any(name.startswith(x) for x in prefixes)
        # A parameter the model holds fixed (the DFL's bin values 0..15) stays fixed: it gets no gradient, which
        # DistributedDataParallel would refuse as an unused parameter.
        p.requires_grad = p.requires_grad and not listed
        frozen += listed
    if not any(p.requires_grad for p in model.parameters()):
        raise TrainError(
            f"--freeze {' '.join(map(str, freeze))} freezes every layer of the {n_layers}-layer model: "
            f"nothing left to train"
        )
    if frozen:
        layers = _index_ranges(sorted(set(indices)))
        LOGGER.info(f"freeze: layers {layers} of 0-{n_layers - 1} frozen ({frozen} parameter tensors)")


def _index_ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


# ---------------------------------------------------------------------------------------------------------------------
# Loss


# The loss of each family's and task's key (models/nn/task.Task.loss_key); all are called as (training outputs,
# targets) -> (loss x batch size, loss items named by the class's LOSS_NAMES), a segment loss also with the masks. A
# new family's or task's loss is one entry here.
LOSSES = {
    "yolov5": ComputeLoss,
    "anchor_free": AnchorFreeLoss,
    "end2end": EndToEndLoss,
    "yolov5-segment": AnchorSegmentLoss,
    "anchor_free-segment": AnchorFreeSegmentLoss,
    "end2end-segment": EndToEndSegmentLoss,
}


def check_hyp_fits(family: Family, hyp: dict, hyp_file: str) -> None:
    """TrainError when the hyperparameters do not have the family's keys (another family's file)."""
    missing = [k for k in HYP_SCHEMAS[family.hyp_schema] if k not in hyp]
    if missing:
        raise TrainError(
            f"{hyp_file or 'the hyperparameters'} are not {family.title}'s (no {', '.join(missing[:3])}): "
            f"use --hyp {family.hyp_file} (the default for {family.title} models) or a copy of it"
        )


def build_loss(model: nn.Module, hyp: dict, epochs: int = 1):
    """The training loss of the model's family and task: YOLOv5's ComputeLoss, AnchorFreeLoss (YOLOv8, YOLO11) or
    EndToEndLoss (YOLO26's two branches; epochs paces its branch weights), or their segment losses."""
    bare = de_parallel(model)
    loss = LOSSES[bare.task.loss_key(bare.family)]
    return loss(model, hyp, epochs) if issubclass(loss, EndToEndLoss) else loss(model, hyp)


# ---------------------------------------------------------------------------------------------------------------------
# Optimiser, schedule, early stopping


AUTO_ADAMW_ITERATIONS = 10_000  # --optimizer auto: anchor-free runs up to this many nominal batches train with AdamW


def choose_optimizer(name: str, hyp: dict, family: Family, n_images: int, batch_size: int, epochs: int, nc: int):
    """(optimizer name, hyp) for --optimizer name. auto, the default: YOLOv5 models train with SGD at the hyp's lr0
    and momentum, as YOLOv5 does; the anchor-free family as Ultralytics' optimizer=auto: AdamW at lr0 0.002 * 5 /
    (4 + nc) for runs of at most 10,000 nominal batches, else SGD at lr0 0.01 (Ultralytics 8.4 picks its MuSGD
    there, which we do not have), both with momentum 0.9 and a bias warmup from 0; the hyp's values are ignored."""
    if name != "auto":
        return name, hyp
    if family.optimizer == "sgd":
        return "SGD", hyp
    iterations = math.ceil(n_images / max(batch_size, NBS)) * epochs
    name, lr0 = ("SGD", 0.01) if iterations > AUTO_ADAMW_ITERATIONS else ("AdamW", round(0.002 * 5 / (4 + nc), 6))
    LOGGER.info(
        f"optimizer: auto chose {name}(lr0={lr0}, momentum=0.9) for {iterations} nominal batches of {NBS} images "
        "(the hyp's lr0, momentum and warmup_bias_lr are not used; --optimizer SGD keeps them)"
    )
    return name, {**hyp, "lr0": lr0, "momentum": 0.9, "warmup_bias_lr": 0.0}


def smart_optimizer(
    model: nn.Module, name: str = "SGD", lr: float = 0.001, momentum: float = 0.9, decay: float = 1e-5
) -> torch.optim.Optimizer:
    """Optimizer with three parameter groups: 0 biases, 1 weights (with decay), 2 BatchNorm weights (no decay)."""
    biases, weights, bn_weights = [], [], []
    norm_types = tuple(v for k, v in nn.__dict__.items() if "Norm" in k and isinstance(v, type))
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            if pname == "bias":
                biases.append(p)
            elif pname == "weight" and isinstance(module, norm_types):
                bn_weights.append(p)
            else:
                weights.append(p)
    if name == "Adam":
        optimizer = torch.optim.Adam(biases, lr=lr, betas=(momentum, 0.999))
    elif name == "AdamW":
        optimizer = torch.optim.AdamW(biases, lr=lr, betas=(momentum, 0.999), weight_decay=0.0)
    elif name == "SGD":
        optimizer = torch.optim.SGD(biases, lr=lr, momentum=momentum, nesterov=True)
    else:
        raise TrainError(f"optimizer {name} not supported: use SGD, Adam or AdamW")
    optimizer.add_param_group({"params": weights, "weight_decay": decay})
    optimizer.add_param_group({"params": bn_weights, "weight_decay": 0.0})
    LOGGER.info(
        f"optimizer: {name}(lr={lr}) with parameter groups {len(bn_weights)} weight(decay=0.0), "
        f"{len(weights)} weight(decay={decay}), {len(biases)} bias"
    )
    return optimizer


def lr_lambda(epochs: int, lrf: float, cos: bool = False) -> Callable[[float], float]:
    """LR multiplier per epoch: linear from 1 to lrf, or a cosine (one-cycle) from 1 to lrf."""
    if cos:
        return lambda x: ((1 - math.cos(x * math.pi / epochs)) / 2) * (lrf - 1) + 1
    return lambda x: (1 - x / epochs) * (1.0 - lrf) + lrf


class EarlyStopping:
    """Stop when fitness has not improved for `patience` epochs (0 disables)."""

    def __init__(self, patience: int = 30, best_fitness: float = 0.0, best_epoch: int = 0):
        self.best_fitness, self.best_epoch = best_fitness, best_epoch
        self.patience = patience or float("inf")
        self.possible_stop = False  # the next epoch may be the last: validate it even with --noval

    def __call__(self, epoch: int, fi: float) -> bool:
        if fi >= self.best_fitness:  # >= so that zero fitness early in training still counts
            self.best_epoch, self.best_fitness = epoch, fi
        delta = epoch - self.best_epoch
        self.possible_stop = delta >= (self.patience - 1)
        stop = delta >= self.patience
        if stop:
            LOGGER.info(
                f"Stopping training early as no improvement observed in last {self.patience} epochs. "
                f"Best results observed at epoch {self.best_epoch}, best model saved as best.pt. "
                f"Use --patience 0 to disable early stopping."
            )
        return stop


def all_finite(model: nn.Module) -> bool:
    """True when every floating-point weight and buffer is finite."""
    return all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())


# ---------------------------------------------------------------------------------------------------------------------
# Loaders


def build_train_loader(
    config: TrainConfig,
    path,
    imgsz: int,
    batch_size: int,
    grid: int,
    hyp: dict,
    nc: int,
    seed: int,
    label_rows: str = "box",
) -> tuple[DataLoader, LoadImagesAndLabels]:
    """The augmented training loader (this process's share of the batch) and its dataset; label_rows: the model
    task's ('polygon': batches carry one mask per target row)."""
    return create_dataloader(
        path,
        imgsz,
        batch_size // WORLD_SIZE,
        grid,
        config.single_cls,
        hyp=dict(hyp),
        augment=True,
        cache=None if config.cache == "val" else config.cache,
        rect=config.rect,
        rank=LOCAL_RANK,
        workers=config.workers,
        shuffle=True,
        seed=seed,
        prefix="train: ",
        nc=nc,
        require_labels=True,
        image_weights=config.image_weights,
        quad=config.quad,
        label_rows=label_rows,
    )


def check_polygon_labels(dataset: LoadImagesAndLabels) -> None:
    """A segment model's training set whose rows are not all polygons (the loader refuses one with none): a warning
    counting the box rows, whose masks are empty, so that inside their boxes the mask loss teaches background."""
    if dataset.segments is None:
        return
    rows = sum(len(image) for image in dataset.segments)
    polygons = sum(len(polygon) > 0 for image in dataset.segments for polygon in image)
    if polygons < rows:
        LOGGER.warning(
            f"WARNING: {rows - polygons} of {rows} training label rows are boxes without a polygon: their masks are "
            "empty, so inside their boxes the mask loss teaches background"
        )


def build_val_loader(
    config: TrainConfig, path, imgsz: int, batch_size: int, grid: int, hyp: dict, nc: int, label_rows: str = "box"
) -> DataLoader:
    """The main process's validation loader: rectangular batches with half a stride of padding, as test.py's. Its
    workers start now, before training: forked later from a process whose memory training has grown, they would share
    every page of it copy-on-write, and each page the next forward pass writes would first be copied (on a CPU that
    made validation 2.5x slower: 37-41 ms per image against 14.5 at 320 with yolo11n)."""
    loader = create_dataloader(
        path,
        imgsz,
        batch_size,
        grid,
        config.single_cls,
        hyp=dict(hyp),
        cache=None if config.noval else config.cache,
        rect=True,
        rank=-1,
        workers=config.workers * 2,
        pad=0.5,
        prefix="val: ",
        nc=nc,
        label_rows=label_rows,
    )[0]
    if loader.persistent_workers:
        iter(loader)  # persistent workers: validation's first iteration resumes these
    return loader


def restarted_loader(loader: DataLoader) -> DataLoader:
    """A loader of the same dataset, sampler (so the same shuffling sequence goes on), batches and workers, whose
    workers start anew: persistent workers keep the copy of the dataset they started with."""
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=loader.sampler,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        collate_fn=loader.collate_fn,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
    )


def training_data(config: TrainConfig) -> tuple[dict, int, list[str]]:
    """The data YAML's config, class count and names for training (--single-cls: one class); TrainError without
    both a train and a val split."""
    data = load_data_config(config.data)
    if not data.get("train") or not data.get("val"):
        raise TrainError(f"{config.data} needs both 'train' and 'val' splits for training")
    names = data["names"]
    if config.single_cls:
        return data, 1, ["item"] if len(names) != 1 else names
    return data, int(data["nc"]), names


def close_mosaic(loader: DataLoader, dataset: LoadImagesAndLabels, epoch: int, epochs: int, log: bool) -> DataLoader:
    """The training loader without mosaic from this epoch on (close_mosaic), with new workers: the running ones hold
    their own copy of the dataset."""
    if log:
        LOGGER.info(f"close_mosaic: epochs {epoch}-{epochs - 1} train without mosaic")
    dataset.close_mosaic()
    return restarted_loader(loader)


def restore_optimizer(optimizer: torch.optim.Optimizer, ckpt: dict, last: str) -> tuple[int, float, int, dict | None]:
    """The interrupted run's optimizer state loaded into optimizer; (start epoch, best fitness, best epoch, GradScaler
    state) from its checkpoint."""
    load_optimizer_state(optimizer, ckpt["optimizer"], last)
    best_epoch = int(ckpt.get("best_epoch", max(ckpt["epoch"], 0)))
    return ckpt["epoch"] + 1, float(ckpt["best_fitness"]), best_epoch, ckpt.get("scaler")


def restore_ema(ema, ckpt: dict, last: str) -> None:
    """The interrupted run's EMA weights and update count into ema (a utils.torch_utils.ModelEMA)."""
    load_resume_state(ema.ema, ckpt["model"], f"{last}: its EMA weights")
    ema.updates = int(ckpt["ema_updates"])
