"""Segment models through export.py: TorchScript, ONNX and OpenVINO give the predictions with their mask coefficients
and the prototypes, the task is in the metadata, and each backend's masks are the .pt's; the other formats say in one
line that they cannot carry masks yet."""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from models.export.backends import load_backend
from models.export.exporter import ExportOptions, _set_onnx_metadata
from models.export.exporter import export as export_weights
from models.export.metadata import onnx_metadata
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, load_model, save_checkpoint
from utils.errors import BackendError, ExportError
from utils.infer.predict import PredictOptions, Predictor

CPU = torch.device("cpu")
SIZE = 64  # the smallest input with every stride's grid; the prototypes are 16x16
FORMATS = ["torchscript", "onnx", "openvino"]
needs_openvino = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino is not installed")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """A 2-class yolov5n-seg (random weights) and its three exports at 64, written once for the module: exporting is
    what is under test, and one export per format is the least that checks it."""
    torch.manual_seed(0)
    model = Model("yolov5n-seg.yaml", nc=2)
    model.names = ["a", "b"]
    weights = tmp_path_factory.mktemp("seg_export") / "seg.pt"
    save_checkpoint(checkpoint_dict(model), weights)
    formats = FORMATS if importlib.util.find_spec("openvino") else FORMATS[:2]
    results = export_weights(weights, formats, ExportOptions(imgsz=(SIZE, SIZE)), CPU)
    return {"pt": weights, **{r.format: r.path for r in results}}


def _input() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.rand(2, 3, SIZE, SIZE + 32)  # a batch of two, not square: the dynamic axes are in use


@pytest.mark.parametrize("fmt", FORMATS)
def test_backend_gives_the_models_predictions_coefficients_and_prototypes(exported, fmt):
    if fmt not in exported:
        pytest.skip(f"{fmt} runtime is not installed")
    model = load_model(exported["pt"], CPU).eval()
    backend = load_backend(exported[fmt], CPU)
    assert backend.task.name == "segment"
    x = _input()
    with torch.no_grad():
        ref, out = model(x), backend(x)
    for name, a, b in (
        ("predictions", ref[0], out[0]),
        ("coefficients", ref.coefficients, out.coefficients),
        ("protos", ref.protos, out.protos),
    ):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, atol=1e-4 * float(a.abs().max()) + 1e-5), name


@pytest.mark.parametrize("fmt", FORMATS)
def test_predictor_masks_from_an_export_equal_the_pts(exported, fmt):
    if fmt not in exported:
        pytest.skip(f"{fmt} runtime is not installed")
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (70, 110, 3), dtype=np.uint8)
    im = np.ascontiguousarray(np.pad(image, ((13, 13), (9, 9), (0, 0)))[:, :, ::-1].transpose(2, 0, 1))  # 96x128
    options = PredictOptions(img_size=128, conf_thres=0.0, max_det=20)
    ref_boxes, ref_masks, _, _ = Predictor(load_model(exported["pt"], CPU).eval(), CPU, options).predict_masks(
        im, image
    )
    boxes, masks, _, _ = Predictor(load_backend(exported[fmt], CPU), CPU, options).predict_masks(im, image)
    assert len(masks) == len(boxes) == len(ref_boxes) == 20
    assert np.abs(boxes[:, :4] - ref_boxes[:, :4]).max() < 0.05
    same = [(masks.full(i) == ref_masks.full(i)).mean() for i in range(len(boxes))]
    assert min(same) > 0.99  # a pixel whose logit is within float noise of 0 may flip


def test_metadata_records_the_task(exported):
    assert onnx_metadata(exported["onnx"])["task"] == '"segment"'


def test_a_graph_that_does_not_fit_its_recorded_task_is_one_line(exported, tmp_path):
    """A segment graph whose metadata says detect (the coefficients make its rows too wide), and the other way
    round, a detection reading of it whose metadata claims prototypes the graph lacks."""
    onnx_file = tmp_path / "edited.onnx"
    shutil.copy(exported["onnx"], onnx_file)
    plain = {k: json.loads(v) for k, v in onnx_metadata(onnx_file).items() if k != "task"}
    _set_onnx_metadata(onnx, onnx_file, {**plain, "task": "detect"})
    backend = load_backend(onnx_file, CPU)  # the width of a dynamic graph's rows is known once it has run
    with pytest.raises(BackendError, match=r"expected \(batch, boxes, 7\)") as e:
        backend(torch.zeros(1, 3, SIZE, SIZE))
    assert "\n" not in str(e.value)
    _set_onnx_metadata(onnx, onnx_file, {**plain, "task": "pose"})
    with pytest.raises(BackendError, match="unknown model task 'pose'"):
        load_backend(onnx_file, CPU)


@pytest.mark.parametrize("fmt", ["ncnn", "litert", "executorch"])
def test_an_edge_format_says_it_cannot_carry_masks_yet(exported, fmt):
    with pytest.raises(ExportError, match=f"--include {fmt}: instance segmentation models are not supported by"):
        export_weights(exported["pt"], [fmt], ExportOptions(imgsz=(SIZE, SIZE)), CPU)
    assert not list(Path(exported["pt"]).parent.glob(f"*{fmt}*"))  # nothing written


def test_a_static_export_pads_a_smaller_input_and_crops_its_prototypes(tmp_path, exported):
    """A static 64x96 export given a 64x64 input runs it centred in grey; the prototypes handed back are the input's
    part, so a mask lands where the .pt's does."""
    weights = tmp_path / "static.pt"
    shutil.copy(exported["pt"], weights)
    (onnx_file,) = [
        r.path for r in export_weights(weights, ["onnx"], ExportOptions(imgsz=(SIZE, SIZE + 32), dynamic=False), CPU)
    ]
    backend = load_backend(onnx_file, CPU)
    x = torch.full((1, 3, SIZE, SIZE + 32), 114 / 255)
    x[..., 16 : 16 + SIZE] = _input()[:1, :, :, :SIZE]
    with torch.no_grad():
        whole = load_model(weights, CPU).eval()(x)
        out = backend(x[..., 16 : 16 + SIZE])
    assert out.protos.shape[2:] == (SIZE // 4, SIZE // 4)
    assert torch.allclose(out.protos, whole.protos[..., 4 : 4 + SIZE // 4], atol=1e-4 * float(whole.protos.abs().max()))
