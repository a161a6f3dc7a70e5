"""Checkpoints as data: save our own (tensors and plain containers) and import official YOLOv5 files safely.

Our files load with ``torch.load(path, weights_only=True)``. Official YOLOv5 files pickle whole
``models.yolo.Model`` modules; we read them with torch's weights-only unpickler, mapping each class
the file names to an inert record, so nothing named in the file is imported or executed.
"""

import os
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch
from torch import nn

from models.yolo import Model
from utils.errors import YoloError

FORMAT = "yolo-checkpoint-v1"

# Globals an official YOLOv5 checkpoint may name. They are never imported: each becomes a _Record.
_SAFE_PREFIXES = ("models.", "torch.nn.modules.", "utils.")
_SAFE_NAMES = {
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.ndarray",
    "numpy.dtype",
    "argparse.Namespace",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
}
_SAFE_PREFIXES_NUMPY = ("numpy.dtypes.",)


class CheckpointError(YoloError):
    """A weights file that is missing, damaged, foreign or unsafe; the message is one line."""


class _Record:
    """Inert stand-in for a class named in a checkpoint: keeps its state, runs nothing."""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        self._args = args

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self._state = state


def _is_allowed(name: str) -> bool:
    return name.startswith(_SAFE_PREFIXES + _SAFE_PREFIXES_NUMPY) or name in _SAFE_NAMES


def _torch_reason(e: Exception) -> str:
    """The useful part of torch's load error, one line, without its advice to pass weights_only=False."""
    text = str(e)
    if "WeightsUnpickler error:" in text:  # the weights-only unpickler's verdict, after paragraphs of advice
        text = text.split("WeightsUnpickler error:", 1)[1].strip().split("\n\n")[0]
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and "weights_only" not in line.lower() and "weights only" not in line.lower()
    ]
    reason = lines[0] if lines else ""
    reason = reason.split(" This is an internal miniz error")[0]  # keep the cause, not the speculation after it
    return f"{e.__class__.__name__}: {reason}" if reason else e.__class__.__name__


def _refused(path: Path, e: Exception) -> CheckpointError:
    return CheckpointError(
        f"refused to load {path}: it could not be read as a PyTorch checkpoint (a plain pickle, "
        f"a damaged file or another format; {_torch_reason(e)}); nothing from the file was run"
    )


def _torch_load_safely(path: Path) -> object:
    """torch.load with weights_only=True; classes from an official YOLOv5 pickle become _Records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about pickle protocols of files it is about to refuse
        try:
            if zipfile.is_zipfile(path):
                names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
            else:
                names = []  # legacy format: the weights-only unpickler alone refuses any unknown global
        except Exception as e:
            raise _refused(path, e) from None
        refused = sorted(n for n in names if not _is_allowed(n))
        if refused:
            raise CheckpointError(
                f"refusing to load {path}: it names {', '.join(refused)}, which a model checkpoint never needs "
                "(nothing from the file was run)"
            )
        try:
            with torch.serialization.safe_globals([(_Record, n) for n in names]):
                return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise _refused(path, e) from None


def _record_state_dict(record: _Record, prefix: str = "") -> dict[str, torch.Tensor]:
    """Rebuild a state_dict from a recorded nn.Module's _parameters, _buffers and _modules."""
    state = record.__dict__
    out = {}
    for key, value in (state.get("_parameters") or {}).items():
        if value is not None:
            out[prefix + key] = value.detach()
    transient = state.get("_non_persistent_buffers_set") or set()
    for key, value in (state.get("_buffers") or {}).items():
        if value is not None and key not in transient:
            out[prefix + key] = value
    for key, child in (state.get("_modules") or {}).items():
        if isinstance(child, _Record):
            out.update(_record_state_dict(child, f"{prefix}{key}."))
    return out


def _names_list(names, nc: int, where: str) -> list[str]:
    """The class names as a list of nc strings (YOLOv5 v7.0 stores a {index: name} dict), or CheckpointError."""
    if names is None:
        raise CheckpointError(f"{where} has no class names ('names')")
    if isinstance(names, dict):
        if set(names) != set(range(len(names))):
            raise CheckpointError(f"{where}: its class names are a dict whose keys are not 0..{len(names) - 1}")
        names = [names[k] for k in range(len(names))]
    if not isinstance(names, (list, tuple)):
        raise CheckpointError(f"{where}: its class names are a {type(names).__name__}, not a list")
    if len(names) != nc:
        raise CheckpointError(f"{where} has {len(names)} class names for the {nc} classes of its config")
    return [str(n) for n in names]


def _config_nc(cfg, where: str) -> int:
    """The class count of a model config, checked to be a dict with a positive integer 'nc'."""
    if cfg is None:
        raise CheckpointError(f"{where} has no model config ('yaml')")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{where}: its model config ('yaml') is a {type(cfg).__name__}, not a mapping")
    nc = cfg.get("nc")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise CheckpointError(f"{where}: its model config has no valid class count 'nc' (found {nc!r})")
    return nc


def _check_weights(state, where: str) -> None:
    """A state dict of named tensors, all finite: NaN or inf weights load fine and then detect nothing."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: its 'model' entry is a {type(state).__name__}, not a state dict of tensors")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{where}: its 'model' entry holds {key!r}: {type(value).__name__}, not a named tensor"
            )
    for key, value in state.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(
                f"{where}: weight {key} holds NaN or infinite values (a diverged or damaged training run); refusing it"
            )


def _from_official(ckpt: dict, where: str) -> dict:
    """Convert an official YOLOv5 checkpoint dict (with a recorded Model) into our format."""
    record = ckpt.get("ema") if isinstance(ckpt.get("ema"), _Record) else ckpt.get("model")
    if not isinstance(record, _Record) or not isinstance(record.__dict__.get("yaml"), dict):
        raise CheckpointError(f"{where} has no YOLOv5 model with a config")
    cfg = record.__dict__["yaml"]
    return {
        "format": FORMAT,
        "model": _record_state_dict(record),
        "yaml": cfg,
        "names": _names_list(record.__dict__.get("names"), _config_nc(cfg, where), where),
        "source": "yolov5",
    }


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint (ours or official YOLOv5) as a dict with 'model' (a state_dict), 'yaml' and 'names'.

    Raises CheckpointError for a file that is missing, unsafe, unreadable or inconsistent (names that do not fit
    the class count, a config that is not a mapping, a 'model' that is not a state dict, non-finite weights)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    ckpt = _torch_load_safely(path)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path} is not a model checkpoint (it holds a {type(ckpt).__name__})")
    where = f"checkpoint {path}"
    if ckpt.get("format") == FORMAT:
        ckpt["names"] = _names_list(ckpt.get("names"), _config_nc(ckpt.get("yaml"), where), where)
    elif isinstance(ckpt.get("model"), _Record) or isinstance(ckpt.get("ema"), _Record):
        ckpt = _from_official(ckpt, where)
    else:
        raise CheckpointError(f"{path} is not a YOLO checkpoint (no model config inside)")
    _check_weights(ckpt.get("model"), where)
    return ckpt


def _shape_mismatch(model: nn.Module, state: dict[str, torch.Tensor]) -> str | None:
    """The first weight whose shape differs from the model's, described, or None."""
    own = model.state_dict()
    for key, value in state.items():
        if key in own and own[key].shape != value.shape:
            return f"{key} is {tuple(value.shape)} in the file but {tuple(own[key].shape)} in the config"
    return None


def model_from_checkpoint(ckpt: dict, where: str = "checkpoint") -> Model:
    """Build a float32 Model from a loaded checkpoint dict and load its weights."""
    try:
        model = Model(ckpt["yaml"])
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError, ZeroDivisionError) as e:
        raise CheckpointError(
            f"{where} holds an unsupported model config: {e.__class__.__name__}: {' '.join(str(e).split())}"
        ) from None
    # Some older YOLOv5 files also keep Detect's anchor_grid as a buffer; it is derived from the anchors.
    state = {
        k: v.float() if v.is_floating_point() else v for k, v in ckpt["model"].items() if not k.endswith(".anchor_grid")
    }
    mismatch = _shape_mismatch(model, state)
    if mismatch:  # load_state_dict would raise a multi-line RuntimeError listing every tensor
        raise CheckpointError(f"{where}: weights do not match its config: {mismatch}")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise CheckpointError(
            f"{where}: weights do not match its config: {len(missing)} missing (e.g. {missing[:2]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:2]})"
        )
    model.names = list(ckpt["names"])
    model.model[-1]._grids = {}
    return model


def load_model(path: str | Path, device: str | torch.device = "cpu", fuse: bool = True) -> Model:
    """Load weights (ours or official YOLOv5 v6.0-v7.0) as an eval-mode float32 Model on device."""
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
        "stride": [float(s) for s in unwrapped.stride],
        **extra,
    }


def save_checkpoint(ckpt: dict, path: str | Path) -> None:
    """Write a checkpoint atomically: a temporary file in the same folder, then a rename."""
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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
