"""Hostile model files through the real loading path (issue 28): tensors of odd kinds, negative BatchNorm variances,
finite weights whose outputs overflow and class names with control characters, in our format and as an official
pickled module, are each one CheckpointError line from load_model, and one ERROR line from detect.py."""

import warnings
from pathlib import Path

import pytest
import torch

import detect
from models import load_model
from models.api.ensemble import load_models
from models.weights.checkpoint import checkpoint_dict, load_checkpoint
from utils.errors import CheckpointError


def _quantized(w: torch.Tensor) -> torch.Tensor:
    return torch.quantize_per_tensor(w.float(), 0.01, 0, torch.qint8)


# name -> (suffix of the edited weights, the edit, words the refusal holds)
EDITS = {
    "complex NaN": (
        "0.conv.weight",
        lambda w: torch.complex(w.float(), w.float()).fill_(complex("nan+1j")),
        "complex64",
    ),
    "int32": ("0.conv.weight", lambda w: w.to(torch.int32), "int32"),
    "float8_e4m3fn": ("0.conv.weight", lambda w: w.to(torch.float8_e4m3fn), "float8_e4m3fn"),
    "float8_e5m2": ("m.0.weight", lambda w: w.to(torch.float8_e5m2), "float8_e5m2"),
    "qint8": ("0.conv.weight", _quantized, "quantized qint8"),
    "sparse COO": ("0.conv.weight", lambda w: w.to_sparse(), "sparse_coo"),
    "negative variance": (
        "2.cv1.bn.running_var",
        lambda v: v.clone().index_fill_(0, torch.tensor([1]), -0.5),
        "negative",
    ),
    "overflowing outputs": ("bn.weight", lambda w: w.float().fill_(6e4), "probe image"),
}


def _edited(small_model, name: str) -> dict:
    suffix, edit, _ = EDITS[name]
    ckpt = checkpoint_dict(small_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated, complex casts warn
        ckpt["model"] = {k: edit(v) if k.endswith(suffix) else v for k, v in ckpt["model"].items()}
    return ckpt


@pytest.mark.parametrize("name", EDITS)
def test_hostile_tensors_in_our_format(tmp_path, small_model, name):
    path = tmp_path / "w.pt"
    torch.save(_edited(small_model, name), path)
    with pytest.raises(CheckpointError) as err:
        load_model(path)
    assert "\n" not in str(err.value) and EDITS[name][2] in str(err.value), err.value


@pytest.mark.parametrize("name", ["qint8", "negative variance", "float8_e5m2"])
def test_hostile_tensors_in_an_official_pickled_module(tmp_path, small_model, name):
    """YOLOv5's releases pickle the whole module: the edited tensor sits in a module's _parameters or _buffers."""
    suffix, edit, words = EDITS[name]
    model = type(small_model)(small_model.yaml)
    model.load_state_dict(small_model.state_dict())
    model.names = list(small_model.names)
    key = next(k for k in model.state_dict() if k.endswith(suffix))
    owner, _, attr = key.rpartition(".")
    module = model.get_submodule(owner)
    store = module._parameters if attr in module._parameters else module._buffers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store[attr] = edit(store[attr].detach())
    path = tmp_path / "official.pt"
    torch.save({"epoch": -1, "model": model, "ema": None}, path)
    with pytest.raises(CheckpointError, match=words):
        load_model(path)


@pytest.mark.parametrize("official", [False, True])
def test_class_names_with_control_characters(tmp_path, small_model, official):
    names = ["cat\nERROR: forged line", "dog\x1b[2J"]
    path = tmp_path / "names.pt"
    if official:
        model = type(small_model)(small_model.yaml)
        model.load_state_dict(small_model.state_dict())
        model.names = dict(enumerate(names))
        torch.save({"epoch": -1, "model": model, "ema": None}, path)
    else:
        torch.save({**checkpoint_dict(small_model), "names": names}, path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert "class name 0 'cat\\x0aERROR: forged line'" in message and message.isprintable(), message


def test_usable_dtypes_still_load(tmp_path, small_model):
    ckpt = checkpoint_dict(small_model)
    for dtype in (torch.bfloat16, torch.float64):
        ckpt["model"] = {k: v.to(dtype) if v.is_floating_point() else v for k, v in ckpt["model"].items()}
        torch.save(ckpt, tmp_path / "w.pt")
        assert load_model(tmp_path / "w.pt").names == ["cat", "dog"]


def test_detect_prints_one_error_line_for_each_class(tmp_path, small_model, shared, log):
    """detect.py ends in one ERROR line before reading any image: an odd tensor, a NaN-making model, forged names."""
    files = []
    for name in ("float8_e4m3fn", "overflowing outputs"):
        files.append(tmp_path / f"{name.replace(' ', '_')}.pt")
        torch.save(_edited(small_model, name), files[-1])
    files.append(tmp_path / "names.pt")
    torch.save({**checkpoint_dict(small_model), "names": ["a\nERROR: forged", "b"]}, files[-1])
    for path in files:
        log.clear()
        project = tmp_path / f"runs_{path.stem}"
        argv = ["--weights", str(path), "--source", str(shared / "images" / "bus.jpg"), "--project", str(project)]
        code = detect.main([*argv, "--img", "64"])
        errors = [m for m in log.messages if m.startswith("ERROR")]
        assert code == 1 and len(errors) == 1 and "forged" not in "".join(log.messages[:-1]), log.messages
        assert not Path(project).exists() or not any(Path(project).rglob("*.jpg"))


def test_ensemble_of_same_count_different_names_says_which_differ(tmp_path, small_model):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(checkpoint_dict(small_model), a)
    torch.save({**checkpoint_dict(small_model), "names": ["cat", "cow"]}, b)
    with pytest.raises(CheckpointError) as err:
        load_models([a, b])
    message = str(err.value)
    assert "both have 2 classes but their names differ" in message and "class 1 is 'dog'" in message, message


@pytest.mark.parametrize(
    "odd, words",
    [(torch.zeros(3, dtype=torch.complex64), "complex64"), (torch.zeros(3).to(torch.float8_e5m2), "float8_e5m2")],
)
def test_odd_tensors_beside_the_weights_are_refused(tmp_path, small_model, odd, words):
    """What --resume loads besides the weights (an optimizer's state) may not be complex or float8 either."""
    ckpt = checkpoint_dict(small_model)
    fine = {"state": {0: {"step": torch.tensor(3.0), "momentum_buffer": torch.zeros(2)}}, "param_groups": []}
    torch.save({**ckpt, "optimizer": fine, "epoch": torch.tensor(1)}, tmp_path / "fine.pt")
    load_checkpoint(tmp_path / "fine.pt")
    odd_state = {"state": {0: {"step": torch.tensor(3.0), "momentum_buffer": odd}}, "param_groups": []}
    torch.save({**ckpt, "optimizer": odd_state}, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match=f"beside its weights .*{words}"):
        load_checkpoint(tmp_path / "odd.pt")
