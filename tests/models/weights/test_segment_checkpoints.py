"""Segment checkpoints: official YOLOv5 v7.0 and Ultralytics -seg files load as data to the same network (the
random-initialised references in ../shared/reference/seg), ours record their task, and the one getattr call that
YOLOv5's segment pickles make is accepted while every other is refused."""

import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from models.nn.task import DETECT, SEGMENT
from models.nn.yolo import Model, count_parameters
from models.weights.checkpoint import checkpoint_dict, load_checkpoint, model_from_checkpoint, save_checkpoint
from utils.errors import CheckpointError

REFERENCE = Path(__file__).resolve().parents[3].parent / "shared" / "reference" / "seg"
NAMES = ("yolov5n-seg", "yolov8n-seg", "yolo11n-seg", "yolo26n-seg")
needs_reference = pytest.mark.skipif(
    not (REFERENCE / "README.md").is_file(), reason=f"the reference seg checkpoints are not at {REFERENCE}"
)


def _readme_parameters() -> dict[str, int]:
    """The parameter counts the reference README states ('yolov5n-seg 1,991,549; ...')."""
    text = (REFERENCE / "README.md").read_text()
    return {name: int(count.replace(",", "")) for name, count in re.findall(r"(yolo\w+-seg) ([\d,]{7,})", text)}


def _reference_layout(model: Model, out) -> np.ndarray:
    """Our eval outputs in the reference's layout: YOLOv5's (B, N, 5 + nc + nm) rows; Ultralytics' (B, 4 + nc + nm,
    N) without the objectness of 1 that our anchor-free head adds for YOLOv5's NMS."""
    predictions, coefficients = out[0], out.coefficients
    if model.family.anchors:
        return torch.cat((predictions, coefficients), 2).numpy()
    return torch.cat((predictions[..., :4], predictions[..., 5:], coefficients), 2).transpose(1, 2).numpy()


def _relative(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(ours - reference).max() / np.abs(reference).max())


@needs_reference
@pytest.mark.parametrize("name", NAMES)
def test_reference_seg_checkpoint_loads_to_the_same_network(name):
    ckpt = load_checkpoint(REFERENCE / f"{name}_random.pt")
    assert ckpt["task"] == "segment"
    model = model_from_checkpoint(ckpt).eval()
    assert model.task is SEGMENT
    assert count_parameters(model) == _readme_parameters()[name]
    reference = np.load(REFERENCE / f"{name}_random_outputs.npz")
    model.end2end = False  # the reference 'pred' is the one-to-many output (YOLO26's too)
    with torch.no_grad():
        out = model(torch.from_numpy(reference["x"]))
    assert _relative(_reference_layout(model, out), reference["pred"]) < 1e-4
    assert _relative(out.protos.numpy(), reference["protos"]) < 1e-4


@needs_reference
def test_yolo26_seg_end_to_end_rows_match_as_a_set():
    model = model_from_checkpoint(load_checkpoint(REFERENCE / "yolo26n-seg_random.pt")).eval()
    reference = np.load(REFERENCE / "yolo26n-seg_random_outputs.npz")
    with torch.no_grad():
        out = model(torch.from_numpy(reference["x"]))
    ours = torch.cat((out[0], out.coefficients), 2)[0].numpy()
    rows = reference["pred_end2end"][0]
    assert ours.shape == rows.shape  # (300, 6 + 32)
    distance = np.abs(ours[:, None] - rows[None]).max(2)  # every row's nearest in the other set (near-equal
    scale = np.abs(rows).max()  # scores may order differently)
    assert distance.min(0).max() / scale < 1e-4 and distance.min(1).max() / scale < 1e-4


@needs_reference
def test_loading_imports_neither_peer():
    code = (
        "import sys; from models.weights.checkpoint import load_checkpoint, model_from_checkpoint\n"
        f"for n in {NAMES!r}: model_from_checkpoint(load_checkpoint({str(REFERENCE)!r} + '/' + n + '_random.pt'))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('ultralytics', 'models.yolo', 'models.common'))))"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_our_seg_checkpoint_records_its_task(tmp_path):
    torch.manual_seed(0)
    model = Model("yolo11n-seg.yaml", nc=2).eval()
    model.names = ["a", "b"]
    path = tmp_path / "seg.pt"
    save_checkpoint(checkpoint_dict(model), path)
    assert torch.load(path, weights_only=True)["task"] == "segment"
    loaded = model_from_checkpoint(load_checkpoint(path)).eval()
    assert loaded.task is SEGMENT
    x = torch.rand(1, 3, 64, 96)
    with torch.no_grad():
        a, b = model.half().float()(x), loaded(x)  # the file holds FP16 weights
    assert torch.allclose(a[0], b[0], atol=1e-4) and torch.allclose(a.protos, b.protos, atol=1e-4)


def test_files_written_before_tasks_were_recorded_load_as_detect(tmp_path):
    model = Model("yolov5n.yaml", nc=1)
    ckpt = checkpoint_dict(model)
    del ckpt["task"]
    save_checkpoint(ckpt, tmp_path / "old.pt")
    loaded = load_checkpoint(tmp_path / "old.pt")
    assert loaded["task"] == "detect" and model_from_checkpoint(loaded).task is DETECT


def test_a_recorded_task_that_is_not_the_configs_is_refused(tmp_path):
    ckpt = checkpoint_dict(Model("yolov8n-seg.yaml", nc=1))
    ckpt["task"] = "detect"
    save_checkpoint(ckpt, tmp_path / "liar.pt")
    with pytest.raises(CheckpointError, match="records the task 'detect' but its model config has a segment head"):
        load_checkpoint(tmp_path / "liar.pt")


class _GetattrCall:
    """Pickles as getattr(owner, attribute), as YOLOv5's Segment pickles Detect.forward."""

    def __init__(self, owner, attribute):
        self.call = (owner, attribute)

    def __reduce__(self):
        return getattr, self.call


@pytest.fixture
def official_detect(monkeypatch):
    """A class that pickles by reference as models.yolo.Detect, YOLOv5's detection head (our repository has no
    such module: only the name is written into the file)."""
    module = types.ModuleType("models.yolo")
    detect = type("Detect", (), {"__module__": "models.yolo", "forward": lambda self: None})
    module.Detect = detect
    monkeypatch.setitem(sys.modules, "models.yolo", module)
    return detect


@pytest.mark.parametrize(
    ("owner", "attribute"),
    [("detect", "__init__"), ("detect", "__reduce__"), ("conv", "forward"), ("conv", "__class__")],
)
def test_any_other_getattr_is_refused(tmp_path, official_detect, owner, attribute):
    owner = official_detect if owner == "detect" else nn.Conv2d
    path = tmp_path / "planted.pt"
    torch.save({"model": _GetattrCall(owner, attribute), "yaml": {"nc": 1}}, path)
    with pytest.raises(CheckpointError, match=f"it calls getattr\\(.*, '{attribute}'\\), which a model checkpoint"):
        load_checkpoint(path)


def test_the_detect_forward_getattr_is_accepted(tmp_path, official_detect):
    path = tmp_path / "segment_like.pt"
    torch.save({"model": _GetattrCall(official_detect, "forward")}, path)
    with pytest.raises(CheckpointError, match="not a YOLO checkpoint"):  # read to the end, then judged as data
        load_checkpoint(path)


def test_prototypes_that_overflow_are_refused(tmp_path):
    model = Model("yolov8n-seg.yaml", nc=1)
    for name, value in model.model[-1].proto.state_dict().items():  # finite FP16 values whose products overflow
        if name.endswith(("weight", "bias")):
            value.fill_(60000.0)
        elif name.endswith(("running_mean", "running_var")):
            value.fill_(-60000.0 if name.endswith("mean") else 0.0)
    path = tmp_path / "overflow.pt"
    save_checkpoint(checkpoint_dict(model), path)
    with pytest.raises(CheckpointError, match="mask coefficients or prototypes on a probe image are NaN or infinite"):
        model_from_checkpoint(load_checkpoint(path))
