"""LiteRT INT8 (models/export/litert_int8.py): every signature's graph takes the ranges calibrated in the largest one,
on a small graph; a block declared float (attention) stays float among int8 convolutions; and a static yolov5n INT8
.tflite at 64 (a few calibration images) holds int8 convolutions behind a float32 input and output, is smaller than
float and says int8 in its metadata. The export is one litert-torch
conversion (a minute or more), so it is slow; both skip without litert-torch (and ai-edge-litert, ../shared)."""

import glob
import shutil

import pytest
import torch
from torch import nn

from models.export.exporter import ExportOptions, export
from models.export.pt2e import FLOAT_DEPTH
from models.export.quantize import CalibrationImages
from models.nn.blocks import C2PSA
from models.nn.common import Conv
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import needs

SIZE = 64


class _Chain(nn.Module):
    """conv -> SiLU, FLOAT_DEPTH times (the float stem), then a quantized middle convolution -> SiLU and a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1) for i in range(FLOAT_DEPTH))
        self.middle, self.last = nn.Conv2d(4, 4, 3), nn.Conv2d(4, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.stem:
            x = nn.functional.silu(conv(x))
        return self.last(nn.functional.silu(self.middle(x)))


def test_every_signature_takes_the_calibrated_ranges():
    needs("litert_torch", "torchao")
    from models.export.litert_int8 import Int8Signatures, _observers

    torch.manual_seed(0)
    int8 = Int8Signatures(_Chain().eval(), 1)
    images = [torch.rand(1, 3, 12, 16).numpy() * scale for scale in (1, 3)]
    int8.calibrate(images, (16, 16))
    calibrated = [(name, m.min_val.clone(), m.max_val.clone()) for name, m in _observers(int8.calibrated)]
    observed = int8._observed((8, 24))  # a signature of another shape, before its ranges are copied
    assert [name for name, _ in _observers(observed)] == [name for name, _, _ in calibrated] and calibrated
    converted = int8.graph((8, 24))
    quantized = [n for n in converted.graph.nodes if "quantize_per_tensor" in str(n.target)]
    assert quantized  # the middle convolution's input and output
    scales = {float(n.args[1]) for n in quantized if isinstance(n.args[1], float)}
    # an int8 range always holds zero (the quantizer widens a one-signed range to it)
    expected = {float((hi.clamp(min=0) - lo.clamp(max=0)) / 255) for _, lo, hi in calibrated if lo.dim() == 0}
    assert scales and all(any(abs(s - e) < 1e-6 for e in expected) for s in scales)


def test_attention_stays_float_between_int8_convolutions():
    # litert-torch refused YOLO11's int8 attention: its qkv reshape between a convolution's int8 output and the
    # query's int8 input of another scale broke tfl.reshape's same-scale constraint
    needs("litert_torch", "torchao")
    from models.export.litert_int8 import Int8Signatures

    torch.manual_seed(0)
    model = nn.Sequential(*(Conv(3 if i == 0 else 16, 16, 3) for i in range(FLOAT_DEPTH + 1)), C2PSA(16, 16))
    model = nn.Sequential(model, Conv(16, 16, 3), nn.Conv2d(16, 6, 1)).eval()
    int8 = Int8Signatures(model, 1)
    int8.calibrate([torch.rand(1, 3, 8, 8).numpy()], (8, 8))
    graph = int8.graph((8, 8)).graph

    def module(node) -> str:
        return next(reversed(node.meta.get("nn_module_stack", {"": ("", None)}).values()))[0]

    quantized = {a.name for n in graph.nodes if "quantize_per_tensor" in str(n.target) for a in n.all_input_nodes}
    quantized |= {u.name for n in graph.nodes if "dequantize_per_tensor" in str(n.target) for u in n.users}
    convs = [n for n in graph.nodes if n.target == torch.ops.aten.conv2d.default]
    in_attention = [n.name for n in graph.nodes if ".attn" in module(n) and n.op == "call_function"]
    assert len(in_attention) > 10 and not quantized & set(in_attention)
    # C2PSA's own convolutions and the feed-forward network's stay int8
    assert {n.name for n in convs if module(n).startswith("0.5.") and ".attn" not in module(n)} <= quantized
    assert "1.conv" in {module(n) for n in convs if n.name in quantized}


@pytest.mark.slow
def test_int8_tflite_holds_int8_convolutions_behind_float_input_and_output(tmp_path, shared):
    needs("litert_torch", "ai_edge_litert", "torchao")
    from ai_edge_litert.interpreter import Interpreter

    from models.export.litert_format import LiteRTBackend

    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    data = tmp_path / "coco128.yaml"  # the val split: COCO128's images, every 32nd calibrating (4)
    data.write_text(f"path: {shared / 'datasets/coco128'}\ntrain: images/train2017\nval: images/train2017\nnc: 80\n")
    options = ExportOptions(imgsz=(SIZE, SIZE), int8=True, dynamic=False, data=data, calib_images=4)
    [result] = export(tmp_path / "yolov5n.pt", ["litert"], options, torch.device("cpu"))
    path, model = result.path, load_model(tmp_path / "yolov5n.pt", torch.device("cpu"))
    backend = LiteRTBackend(path, torch.device("cpu"))
    assert path.name == "yolov5n_int8.tflite" and backend.precision == "int8" and backend.calibration_images == 4
    assert path.stat().st_size < 2.5 * sum(p.numel() for p in model.parameters())  # float32: 4 bytes a weight
    interpreter = Interpreter(model_path=str(path))
    tensors = {t["index"]: t for t in interpreter.get_tensor_details()}
    convs = [op for op in interpreter._get_ops_details() if op["op_name"] == "CONV_2D"]
    int8_inputs = [op for op in convs if str(tensors[op["inputs"][0]]["dtype"]).endswith("int8'>")]
    assert len(int8_inputs) >= len(convs) - 8  # all but the stem's five (FLOAT_DEPTH) and the head's three
    runner = interpreter.get_signature_runner()
    [details], [output] = runner.get_input_details().values(), runner.get_output_details().values()
    assert str(details["dtype"]).endswith("float32'>") and str(output["dtype"]).endswith("float32'>")
    files = sorted(glob.glob(str(shared / "datasets/coco128/images/train2017/*.jpg")))
    x = torch.from_numpy(next(iter(CalibrationImages(files[1:2], options.imgsz, 32, auto=False))))
    with torch.no_grad():
        expected, got = model(x)[0], backend(x)[0]
    assert got.shape == expected.shape and (got[..., :4] - expected[..., :4]).abs().median() < 2
