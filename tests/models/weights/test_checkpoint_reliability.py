"""Checkpoints that load but are wrong, and files that are refused: each is one CheckpointError line, also
through test.py's and detect.py's command lines."""

import importlib.util
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

import detect
from models import load_model
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, load_checkpoint, save_checkpoint
from utils.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)


def _ours(tmp_path: Path, net: Model, name: str, **changes) -> Path:
    """Our-format checkpoint of net with some entries replaced (None deletes the entry)."""
    ckpt = checkpoint_dict(net)
    for key, value in changes.items():
        if value is None:
            del ckpt[key]
        else:
            ckpt[key] = value
    path = tmp_path / f"{name}.pt"
    save_checkpoint(ckpt, path)
    return path


def _official(tmp_path: Path, model: Model, name: str, names) -> Path:
    """An official-style file: the pickled Model module (models.nn.yolo.Model) with these names."""
    model.names = names
    path = tmp_path / f"{name}.pt"
    torch.save({"epoch": -1, "model": model, "ema": None}, path)
    return path


def _expect(path: Path, *words: str) -> str:
    """load_model(path) raises one CheckpointError line holding every word; returns the message."""
    with pytest.raises(CheckpointError) as err:
        load_model(path, fuse=False)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert "weights_only" not in message and "Weights only" not in message, message
    return message


@pytest.mark.slow
def test_names_that_do_not_fit_the_class_count(tmp_path, small_model):
    _expect(_ours(tmp_path, small_model, "short", names=["cat"]), "1 class names", "2 classes")
    _expect(_ours(tmp_path, small_model, "long", names=["cat", "dog", "cow"]), "3 class names", "2 classes")
    _expect(_ours(tmp_path, small_model, "none", names=None), "no class names")
    _expect(_ours(tmp_path, small_model, "text", names="cat,dog"), "class names are a str")
    official = Model("yolov5n.yaml", nc=2).eval()
    _expect(_official(tmp_path, official, "official_short", ["cat"]), "1 class names", "2 classes")
    _expect(_official(tmp_path, official, "official_long", ["a", "b", "c"]), "3 class names")
    _expect(_official(tmp_path, official, "official_none", None), "no class names")
    # the good cases still load, names as saved (a v7.0-style dict too)
    assert load_model(_ours(tmp_path, small_model, "good"), fuse=False).names == ["cat", "dog"]
    assert load_model(_official(tmp_path, official, "official_dict", {0: "a", 1: "b"})).names == ["a", "b"]


def test_weights_that_do_not_fit_their_config(tmp_path, small_model):
    other = checkpoint_dict(Model("yolov5n.yaml", nc=5))["model"]  # the Detect head has another width
    path = _ours(tmp_path, small_model, "mismatch", model=other)
    _expect(path, "do not match its config", "model.24.m.0.weight", "(30, 64, 1, 1)", "(21, 64, 1, 1)")


@pytest.mark.parametrize(
    "entry, words",
    [
        ([torch.zeros(3)], ("'model' entry is a list",)),
        ("weights", ("'model' entry is a str",)),
        (torch.zeros(3), ("'model' entry is a Tensor",)),
        ({"model.0.conv.weight": [1.0, 2.0]}, ("'model.0.conv.weight'", "not a named tensor")),
    ],
)
def test_model_entry_of_the_wrong_type(tmp_path, small_model, entry, words):
    _expect(_ours(tmp_path, small_model, "wrong_model", model=entry), *words)


@pytest.mark.slow
def test_missing_or_wrong_config(tmp_path, small_model):
    _expect(_ours(tmp_path, small_model, "no_yaml", yaml=None), "no model config")
    _expect(_ours(tmp_path, small_model, "list_yaml", yaml=[1, 2]), "model config ('yaml') is a list")
    _expect(_ours(tmp_path, small_model, "no_nc", yaml={"backbone": []}), "class count 'nc'")
    cfg = dict(small_model.yaml, backbone=[[-1, 1, "NoSuchLayer", [16]]])
    _expect(_ours(tmp_path, small_model, "bad_layer", yaml=cfg), "unsupported model config")


@pytest.mark.slow
def test_non_finite_weights_are_refused(tmp_path, small_model):
    for bad in (float("nan"), float("inf")):
        weights = checkpoint_dict(small_model)["model"]
        weights["model.2.cv1.conv.weight"][0, 0, 0, 0] = bad
        _expect(_ours(tmp_path, small_model, "diverged", model=weights), "model.2.cv1.conv.weight", "NaN or infinite")
    official = Model("yolov5n.yaml", nc=2).eval()
    with torch.no_grad():
        official.model[24].m[1].bias[3] = float("nan")
    _expect(_official(tmp_path, official, "official_nan", ["a", "b"]), "model.24.m.1.bias", "NaN")


class _RunsShell:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _unreadable_files(tmp_path: Path) -> list[Path]:
    """A legacy plain pickle (with code), random bytes, a zip that is not a torch file, a text file."""
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps({"model": _RunsShell(tmp_path / "pwned")}))
    noise = tmp_path / "noise.pt"
    noise.write_bytes(bytes(range(256)) * 20)
    archive = tmp_path / "archive.pt"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("hello.txt", "hi")
    text = tmp_path / "notes.pt"
    text.write_text("these are not weights\n")
    return [legacy, noise, archive, text]


def test_refused_files_say_so_without_torch_advice(tmp_path):
    for path in _unreadable_files(tmp_path):
        message = _expect(path, "refused", "could not be read", str(path))
        assert "pickle" in message  # says what it may be
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
def test_cli_one_line_errors_for_bad_checkpoints(tmp_path, small_model, shared, capsys, log):
    """test.py and detect.py exit 1 with one ERROR line naming the problem, never a traceback."""
    files = {
        _ours(tmp_path, small_model, "short", names=["cat"]): "1 class names",
        _ours(
            tmp_path, small_model, "mismatch", model=checkpoint_dict(Model("yolov5n.yaml", nc=5))["model"]
        ): "do not match its config",
        _official(tmp_path, Model("yolov5n.yaml", nc=2), "official_short", ["a"]): "1 class names",
    }
    files.update({p: "refused" for p in _unreadable_files(tmp_path)})
    data = tmp_path / "data.yaml"
    data.write_text(
        f"path: {shared / 'datasets/coco128'}\ntrain: images/train2017\nval: images/train2017\n"
        "nc: 2\nnames: [cat, dog]\n"
    )
    image = str(shared / "images/bus.jpg")
    for path, words in files.items():
        for name, run in (
            (
                "test",
                lambda p: yolo_test.main(
                    ["--data", str(data), "--weights", str(p), "--project", str(tmp_path / "runs"), "--no-plots"]
                ),
            ),
            (
                "detect",
                lambda p: detect.main(["--source", image, "--weights", str(p), "--project", str(tmp_path / "runs")]),
            ),
        ):
            log.clear()
            code = run(path)
            errors = [line for m in log.messages for line in m.splitlines() if "ERROR" in line]
            assert code == 1 and len(errors) == 1 and words in errors[0], (name, path, log.messages)
            assert "weights_only" not in log.text and "Traceback" not in capsys.readouterr().err


def test_official_weights_still_load(shared):
    ckpt = load_checkpoint(shared / "weights/yolov5n.pt")
    assert ckpt["source"] == "yolov5" and len(ckpt["names"]) == 80 and ckpt["yaml"]["nc"] == 80
