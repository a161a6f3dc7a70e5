"""Checkpoints as data: save our own (tensors and plain containers) and import official files safely.

Our files load with ``torch.load(path, weights_only=True)``. Official YOLOv5 files pickle whole
``models.nn.yolo.Model`` modules, and those of the `ultralytics` package (YOLOv8, YOLO11, YOLO26) whole
``ultralytics.nn.tasks.DetectionModel`` modules; we read both with torch's weights-only unpickler, mapping each
class the file names to an inert record, so nothing named in the file is imported or executed. Our modules carry
the same names as theirs, so a recorded module's state dict is ours key for key; the model is rebuilt from the
file's 'yaml' (Ultralytics' layout, with its scale) by our own config code.

safe_pickle.py reads the file within bounds; this module then checks what it holds (class names and count,
a state dict of finite tensors, a model config priced in parameters without building it, against the weights the
file holds). Each refusal is one CheckpointError line.
"""

import os
import tempfile
from pathlib import Path

import torch
from torch import nn

from models.nn.config import MAX_CLASSES, config_parameters, short_repr
from models.nn.family import Family, family_named, family_of_checkpoint, family_of_config
from models.nn.task import task_of_checkpoint, task_of_config
from models.nn.yolo import Model
from models.weights.safe_pickle import Record, check_tensor_bytes, read_bounded, scan_tree
from models.weights.tensor_checks import check_file_tensors, check_probe_outputs, check_weights, probe_image
from utils.downloads import attempt_download_weights
from utils.errors import CheckpointError, ModelConfigError, YoloError
from utils.log import one_line
from utils.text import class_names

FORMAT = "yolo-checkpoint-v1"


def _entries(record: Record, key: str, where: str) -> dict:
    """A recorded module's _parameters, _buffers or _modules: a dict, or CheckpointError."""
    entries = record.__dict__.get(key) or {}
    if not isinstance(entries, dict):
        raise CheckpointError(f"{where}: a module's {key} is a {type(entries).__name__}, not a mapping")
    return entries


def _record_state_dict(record: Record, where: str, prefix: str = "") -> dict[str, torch.Tensor]:
    """Rebuild a state_dict from a recorded nn.Module's _parameters, _buffers and _modules (nesting is bounded by
    scan_tree); CheckpointError for an entry that is not a tensor."""
    out = {}
    transient = record.__dict__.get("_non_persistent_buffers_set") or set()
    transient = transient if isinstance(transient, (set, frozenset, list, tuple)) else set()
    for kind in ("_parameters", "_buffers"):
        for key, value in _entries(record, kind, where).items():
            if value is None or (kind == "_buffers" and key in transient):
                continue
            if not isinstance(key, str) or not isinstance(value, torch.Tensor):
                name = prefix + (key if isinstance(key, str) else short_repr(key))
                raise CheckpointError(f"{where}: its weight {name} is a {type(value).__name__}, not a tensor")
            out[prefix + key] = value.detach()
    for key, child in _entries(record, "_modules", where).items():
        if isinstance(child, Record):
            out.update(_record_state_dict(child, where, f"{prefix}{key}."))
    return out


def _names_list(names, nc: int, where: str) -> list[str]:
    """The class names as a list of nc short strings (YOLOv5 v7.0 stores a {index: name} dict), or CheckpointError.

    The count is checked before anything is built from the names, and each must be a string (or a whole number)
    of at most utils.text.MAX_NAME_CHARS: a nested list would print as an ever larger string."""
    if names is None:
        raise CheckpointError(f"{where} has no class names ('names')")
    if not isinstance(names, (dict, list, tuple)):
        raise CheckpointError(f"{where}: its class names are a {type(names).__name__}, not a list")
    if len(names) != nc:
        raise CheckpointError(f"{where} has {len(names)} class names for the {nc} classes of its config")
    if isinstance(names, dict):
        if set(names) != set(range(nc)):
            raise CheckpointError(f"{where}: its class names are a dict whose keys are not 0..{nc - 1}")
        names = [names[k] for k in range(nc)]
    names, problem = class_names(names)  # a newline or an escape code would forge log lines and crops/ folder names
    if problem:
        raise CheckpointError(f"{where}: {problem}; refusing it")
    return names


def _config_nc(cfg, where: str) -> int:
    """The class count of a model config, checked to be a dict with an integer 'nc' in 1..MAX_CLASSES."""
    if cfg is None:
        raise CheckpointError(f"{where} has no model config ('yaml')")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{where}: its model config ('yaml') is a {type(cfg).__name__}, not a mapping")
    nc = cfg.get("nc")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise CheckpointError(f"{where}: its model config has no valid class count 'nc' (found {short_repr(nc)})")
    if nc > MAX_CLASSES:
        raise CheckpointError(f"{where}: its model config has {nc} classes, more than {MAX_CLASSES}; refusing it")
    return nc


def _check_weights(state, where: str, size: int) -> None:
    """A state dict of named tensors within the file's bytes, each of a kind a model can use (tensor_checks: dense
    real floating-point weights), finite (NaN or inf weights load fine and then detect nothing), with BatchNorm
    variances >= 0."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: its 'model' entry is a {type(state).__name__}, not a state dict of tensors")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{where}: its 'model' entry holds {short_repr(key)}: {type(value).__name__}, not a named tensor"
            )
    check_tensor_bytes(state.values(), size, where)  # before the checks read them
    check_weights(state, where)


def _check_config_size(ckpt: dict, where: str) -> None:
    """CheckpointError when the config cannot describe a model, or describes more parameters than the file holds
    weights for: the model is priced from its config before it is built, so a tiny file cannot make a huge one."""
    try:
        params = config_parameters(ckpt["yaml"], family=family_of_checkpoint(ckpt))
    except ModelConfigError as e:
        raise CheckpointError(f"{where} holds an unsupported model config: {one_line(e)}") from None
    held = sum(v.numel() for v in ckpt["model"].values())
    if params > held:
        raise CheckpointError(
            f"{where}: its config describes a model of {params} parameters but the file holds only {held} weight "
            "values (weights do not match its config); refusing to build it"
        )


def _from_official(ckpt: dict, where: str, size: int) -> dict:
    """Convert an official checkpoint dict (a recorded YOLOv5 Model or Ultralytics DetectionModel) into our format;
    the EMA weights where the file has them, as the official loaders take."""
    record = ckpt.get("ema") if isinstance(ckpt.get("ema"), Record) else ckpt.get("model")
    if not isinstance(record, Record) or not isinstance(record.__dict__.get("yaml"), dict):
        raise CheckpointError(f"{where} has no YOLO model with a config")
    cfg = record.__dict__["yaml"]
    nc = _config_nc(cfg, where)
    state = _record_state_dict(record, where)
    check_tensor_bytes(state.values(), size, where)  # the rest of the file's objects are dropped unread
    family = family_of_config(cfg)
    return {
        "format": FORMAT,
        "model": state,
        "yaml": cfg,
        "names": _names_list(record.__dict__.get("names"), nc, where),
        "family": family.name,
        "task": task_of_config(cfg).name,
        "source": "yolov5" if family.anchors else "ultralytics",
        "train_args": {"imgsz": training_size(ckpt)} if training_size(ckpt) else {},
    }


def _checked_family(ckpt: dict, where: str) -> Family:
    """The family a checkpoint records, checked against its network: a name we know, and the family its config
    builds (anchors or not, end-to-end or not), so that a file cannot make the engines treat an anchor-free network
    as YOLOv5's. Files written before checkpoints recorded it are recognised by their config, once, here."""
    network = family_of_config(ckpt["yaml"])
    recorded = ckpt.get("family")
    if recorded is None:
        return network
    if not isinstance(recorded, str):
        raise CheckpointError(f"{where}: its 'family' entry is a {type(recorded).__name__}, not a family's name")
    try:
        family = family_named(recorded)
    except ModelConfigError as e:
        raise CheckpointError(f"{where}: {one_line(e)}") from None
    if family is not network:
        raise CheckpointError(
            f"{where} says its model is {family.title} but its network is {network.title}'s (the file's 'family' "
            "entry does not match its config)"
        )
    return family


def training_size(ckpt: dict) -> int | None:
    """The image size a checkpoint was trained at: train_args['imgsz'] (ours and Ultralytics'), or opt['imgsz'] /
    opt['img_size'] (official YOLOv5); the larger side of a pair. None when the file does not say."""
    for key, names in (("train_args", ("imgsz",)), ("opt", ("imgsz", "img_size"))):
        args = ckpt.get(key)
        for name in names:
            value = args.get(name) if isinstance(args, dict) else None
            value = max(value, default=None) if isinstance(value, (list, tuple)) else value
            if isinstance(value, int) and not isinstance(value, bool) and 32 <= value <= 8192:
                return value
    return None


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint (ours or official YOLOv5) as a dict with 'model' (a state_dict), 'yaml' and 'names'.

    Raises CheckpointError for a file that is missing, unsafe, unreadable, beyond the bounds above or inconsistent
    (names that do not fit the class count, a config that is not a mapping or does not fit the weights, a 'model'
    that is not a state dict, non-finite weights)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a weights file")
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    ckpt, size = read_bounded(path)
    where = f"checkpoint {path}"
    tensors = scan_tree(ckpt, where)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not a model checkpoint (it holds a {type(ckpt).__name__})")
    if ckpt.get("format") == FORMAT:
        check_tensor_bytes(tensors, size, where)
        ckpt["names"] = _names_list(ckpt.get("names"), _config_nc(ckpt.get("yaml"), where), where)
        ckpt["family"] = _checked_family(ckpt, where).name
        try:  # recorded since tasks were declared; older files are recognised by their config, here
            ckpt["task"] = task_of_checkpoint(ckpt).name
        except ModelConfigError as e:
            raise CheckpointError(f"{where}: {one_line(e)}") from None
    elif isinstance(ckpt.get("model"), Record) or isinstance(ckpt.get("ema"), Record):
        ckpt = _from_official(ckpt, where, size)
    else:
        raise CheckpointError(f"{path} is not a YOLO checkpoint (no model config inside)")
    _check_weights(ckpt.get("model"), where, size)
    check_file_tensors(tensors, where)  # what else the file holds (an optimizer's state) is of usable kinds too
    training = ckpt.get("train_model")  # a last.pt's float32 training weights, which --resume loads
    if isinstance(training, dict) and all(isinstance(v, torch.Tensor) for v in training.values()):
        check_weights(training, f"{where} (its training weights)")
    _check_config_size(ckpt, where)
    return ckpt


def _state_mismatch(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> str | None:
    """How a state dict differs from a model's (the first shape that differs, else the missing and unexpected
    keys), or None when it fits."""
    for key, value in state.items():
        if key in own and own[key].shape != value.shape:
            return f"{key} is {tuple(value.shape)} in the file but {tuple(own[key].shape)} in the config"
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        return f"{len(missing)} missing (e.g. {missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]})"
    return None


def model_from_checkpoint(ckpt: dict, where: str = "checkpoint") -> Model:
    """Build a float32 Model of the checkpoint's family from a loaded checkpoint dict and load its weights; the model
    keeps the image size it was trained at (model.imgsz; None when the file does not say)."""
    try:
        model = Model(ckpt["yaml"], family=family_of_checkpoint(ckpt), task=task_of_checkpoint(ckpt))
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError, ZeroDivisionError) as e:
        reason = one_line(e) if isinstance(e, YoloError) else f"{e.__class__.__name__}: {one_line(e)}"
        raise CheckpointError(f"{where} holds an unsupported model config: {reason}") from None
    # Some older YOLOv5 files also keep Detect's anchor_grid as a buffer; it is derived from the anchors.
    state = {k: v for k, v in ckpt["model"].items() if not k.endswith(".anchor_grid")}
    mismatch = _state_mismatch(model.state_dict(), state)  # checked before converting anything
    if mismatch:  # load_state_dict would raise a multi-line RuntimeError listing every tensor
        raise CheckpointError(f"{where}: weights do not match its config: {mismatch}")
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=False)
    check_probe_outputs(model, int(model.stride.max()), where)  # finite weights can still make NaN outputs
    _check_mask_outputs(model, where)
    model.names = list(ckpt["names"])
    model.imgsz = training_size(ckpt)
    model.model[-1]._grids = {}
    return model


def _check_mask_outputs(model: Model, where: str) -> None:
    """A segment model's mask coefficients and prototypes on the probe image, finite (check_probe_outputs sees the
    predictions only): NaN prototypes would give every detection an empty mask, silently."""
    if not model.task.masks:
        return
    training = model.training
    try:
        with torch.no_grad():
            out = model.eval()(probe_image(int(model.stride.max())))
    finally:
        model.train(training)
    if not (torch.isfinite(out.coefficients).all() and torch.isfinite(out.protos).all()):
        raise CheckpointError(
            f"{where}: the model's mask coefficients or prototypes on a probe image are NaN or infinite although "
            "every weight is finite (weights that overflow, or damaged statistics); refusing it"
        )


def load_model(path: str | Path, device: str | torch.device = "cpu", fuse: bool = True) -> Model:
    """Load weights (ours, official YOLOv5 v6.0-v7.0, or the `ultralytics` package's YOLOv8, YOLO11 and YOLO26) as
    an eval-mode float32 Model on device.

    The path resolves as detect.py's --weights does: the file as given, else a bare name from weights/ (with a log
    line), else a download for official release names (DownloadError, one line, when offline). A missing path with
    a folder part is a CheckpointError (not found), never swapped for a same-named file elsewhere."""
    path = attempt_download_weights(path)
    model = model_from_checkpoint(load_checkpoint(path), f"checkpoint {path}")
    if fuse:
        model.fuse()
    return model.to(device).eval()


def fp16_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """State dict with floating-point tensors in FP16 (half the size of float32), on the CPU."""
    return {k: (v.half() if v.is_floating_point() else v).detach().cpu().clone() for k, v in model.state_dict().items()}


def checkpoint_dict(model: Model, **extra) -> dict:
    """A checkpoint dict of our format: FP16 weights, config, class names and strides, plus extra fields."""
    unwrapped = model.module if hasattr(model, "module") else model
    return {
        "format": FORMAT,
        "model": fp16_state_dict(unwrapped),
        "yaml": unwrapped.yaml,
        "names": list(unwrapped.names),
        "family": unwrapped.family.name,
        "task": unwrapped.task.name,
        "stride": [float(s) for s in unwrapped.stride],
        **extra,
    }


def _os_error_behind(error: BaseException) -> OSError | None:
    """The OSError behind an exception: torch's zip writer turns a failed write (a full disk) into a RuntimeError
    ('unexpected pos ...') raised while the OSError from the file's write() is its context."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def save_checkpoint(ckpt: dict, path: str | Path) -> None:
    """Write a checkpoint atomically: a temporary file in the same folder, then a rename.

    A failed write leaves an earlier file at path as it was; a full disk is an OSError(ENOSPC) that says so, on one
    line (utils.cli.run_cli prints it as "the disk is full (ENOSPC): ...")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; give it the usual permissions
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        cause = _os_error_behind(e) if isinstance(e, (OSError, RuntimeError)) else None
        if cause is None or cause.errno is None:
            raise
        kept = f"an earlier {path.name} there is kept intact" if path.exists() else "nothing was written there"
        raise OSError(cause.errno, f"{os.strerror(cause.errno)}: could not write checkpoint {path} ({kept})") from None
