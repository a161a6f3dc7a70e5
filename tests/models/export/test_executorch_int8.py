"""ExecuTorch INT8 (models/export/executorch_format.py): which nodes stay in float, on a small exported graph; a
shape-dynamic INT8 program of YOLO11's attention block; and a yolov5n INT8 program calibrated on COCO128 images that
is smaller than float and still finds the .pt's objects. The exports lower to XNNPACK (a minute or more), so they are
slow tests; they skip without executorch or ../shared."""

import glob
import shutil
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torchvision.ops import box_iou

from models.export.executorch_format import ExecuTorchBackend, export_executorch
from models.export.exporter import ExportOptions, prepare
from models.export.pt2e import (
    FLOAT_DEPTH,
    PRE_SILU_FLOOR,
    calls_per_image,
    float_node_names,
    int8_quantizer,
    mean_ranges,
)
from models.export.quantize import CalibrationImages
from models.nn.blocks import C2PSA
from models.nn.common import Conv
from tests.models.export.edge_helpers import needs
from utils.boxes import non_max_suppression

SIZE = 256  # large enough for COCO128's objects to be found at all; small enough to calibrate in seconds


def _stem() -> nn.ModuleList:
    """FLOAT_DEPTH convolutions from the input (3 channels to 4): the float stem."""
    return nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1) for i in range(FLOAT_DEPTH))


def _through(stem: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for conv in stem:
        x = nn.functional.silu(conv(x))
    return x


class _Chain(nn.Module):
    """A stem of convolutions -> SiLU, a middle convolution -> SiLU, and a head: a convolution, sigmoid and a
    decoding (mul, add, cat) whose add, mul and cat XNNPACK's quantizer annotates unless told not to."""

    def __init__(self):
        super().__init__()
        self.stem, self.middle, self.last = _stem(), nn.Conv2d(4, 4, 3), nn.Conv2d(4, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.silu(self.middle(_through(self.stem, x)))
        y = self.last(x).sigmoid()
        return torch.cat((y[:, :2] * 4 + x[:, :2], y[:, 2:]), 1)


def test_the_stem_and_everything_after_the_last_convolution_stay_float():
    graph = torch.export.export(_Chain().eval(), (torch.rand(1, 3, 16, 16),)).module()
    convs = [n.name for n in graph.graph.nodes if n.target == torch.ops.aten.conv2d.default]
    after = [
        n.name for n in graph.graph.nodes if n.target in (torch.ops.aten.sigmoid.default, torch.ops.aten.cat.default)
    ]
    kept = float_node_names(graph)
    assert len(convs) == FLOAT_DEPTH + 2 and set(convs[:FLOAT_DEPTH]) | {convs[-1]} | set(after) <= kept
    assert len(after) == 2 and convs[FLOAT_DEPTH] not in kept  # the one convolution past the stem that feeds another


def test_the_quantizer_leaves_the_float_nodes_unannotated():
    needs("executorch")
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer

    graph = torch.export.export(_Chain().eval(), (torch.rand(1, 3, 16, 16),)).module()
    kept = float_node_names(graph)
    quantizer = int8_quantizer(xnnpack_quantizer.XNNPACKQuantizer, xnnpack_quantizer, graph)
    annotated = quantizer.annotate(quantizer.transform_for_annotation(graph))
    marked = {n.name for n in annotated.graph.nodes if "quantization_annotation" in n.meta}
    middle = [n for n in annotated.graph.nodes if n.target == torch.ops.aten.conv2d.default][FLOAT_DEPTH]
    assert middle.name in marked and not marked & kept
    observer = middle.meta["quantization_annotation"].output_qspec.observer_or_fake_quant_ctr()
    assert observer.floor == PRE_SILU_FLOOR and observer.peak  # its output is read by a SiLU only


def test_activation_ranges_are_the_mean_of_each_images_min_and_max():
    needs("torchao")
    from torchao.quantization.pt2e import MinMaxObserver

    ramp = torch.linspace(-1, 1, 101)
    observer, pre_silu = mean_ranges(MinMaxObserver)(), mean_ranges(MinMaxObserver)(floor=-6.0, peak=True)
    for x in (ramp * 2, ramp * 20, ramp * 5):
        observer(x)
        pre_silu(x)
    assert observer.min_val.item() == pytest.approx(-9) and observer.max_val.item() == pytest.approx(9)
    assert pre_silu.min_val.item() == pytest.approx(-13 / 3) and pre_silu.max_val.item() == pytest.approx(20)
    # pre_silu: the mean of -2, -6 (not -20) and -5; the largest max


class _Concat(nn.Module):
    """Two convolutions of different gains after the stem, concatenated, then a head: XNNPACK's quantizer gives the
    concatenation's inputs and output one shared observer."""

    def __init__(self):
        super().__init__()
        self.stem, self.last = _stem(), nn.Conv2d(8, 2, 1)
        self.narrow, self.wide = nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _through(self.stem, x)
        return self.last(torch.cat((self.narrow(x).relu(), self.wide(x).relu() * 10), 1))


def test_a_shared_observer_ranges_each_image_by_the_union_of_its_tensors():
    needs("executorch")
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    model = _Concat().eval()
    graph = torch.export.export(model, (torch.rand(1, 3, 16, 16),)).module()
    observed = prepare_pt2e(graph, int8_quantizer(xnnpack_quantizer.XNNPACKQuantizer, xnnpack_quantizer, graph))
    observed(torch.full((1, 3, 16, 16), 100.0))  # a pass before calibration, forgotten
    calls_per_image(observed)
    cat = next(n for n in observed.graph.nodes if n.target == torch.ops.aten.cat.default)
    shared = observed.get_submodule(next(iter(cat.users)).target)
    assert shared.sites == 3  # the two inputs and the output
    images = [torch.rand(1, 3, 16, 16) * scale for scale in (1, 4)]
    peaks = []
    for image in images:
        observed(image)
        with torch.no_grad():
            x = _through(model.stem, image)
            peaks.append(max(model.narrow(x).relu().max().item(), model.wide(x).relu().max().item() * 10))
    assert shared.max_val.item() == pytest.approx(sum(peaks) / 2, rel=1e-4)  # each image's union, not each tensor's


@pytest.mark.slow
def test_int8_program_is_smaller_and_finds_the_pts_objects(tmp_path, shared):
    needs("executorch", "torchao")
    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    options = ExportOptions(imgsz=(SIZE, SIZE), int8=True)
    job = prepare(tmp_path / "yolov5n.pt", options, torch.device("cpu"))
    files = sorted(glob.glob(str(shared / "datasets/coco128/images/train2017/*.jpg")))
    job.calibration = CalibrationImages(files[::16], options.imgsz, 32, auto=True)  # 8 images
    job.metadata["calibration_images"] = len(job.calibration)
    folder = export_executorch(job, tmp_path / "yolov5n_int8_executorch_model")
    backend = ExecuTorchBackend(folder, torch.device("cpu"))
    assert backend.precision == "int8" and backend.calibration_images == 8 and backend.fixed_shape is None
    params = sum(p.numel() for p in job.model.parameters())
    assert (folder / "model.pte").stat().st_size < 2 * params  # float32 would be 4 bytes a weight
    found, total = 0, 0
    for image in CalibrationImages(files[1:64:8], options.imgsz, 32, auto=True):  # not calibrated on
        x = torch.from_numpy(image)
        with torch.no_grad():  # the .pt's confident objects, looked for among the INT8 ones above a lower threshold,
            expected = non_max_suppression(job.model(x), 0.5, 0.45)[0]  # so that int8 rounding near 0.25 is no miss
            got = non_max_suppression(backend.run(x), 0.1, 0.45)[0]
        total += len(expected)
        if len(expected) and len(got):
            iou = box_iou(expected[:, :4], got[:, :4])
            iou[expected[:, 5:6] != got[:, 5][None]] = 0
            found += int((iou.max(1).values >= 0.7).sum())
    assert total >= 5 and found >= 0.9 * total, f"{found} of {total} .pt detections found"


class _Attending(nn.Module):
    """The float stem, a strided convolution, YOLO11's C2PSA (its attention reshapes by its map's height and width,
    sizes a shape-dynamic graph reads off C2PSA's first, quantized, convolution) and a last convolution."""

    def __init__(self):
        super().__init__()
        self.stem, self.down = _stem(), Conv(4, 64, 3, 2)
        self.psa, self.last = C2PSA(64, 64), nn.Conv2d(64, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(self.psa(self.down(_through(self.stem, x)))).flatten(2)


@pytest.mark.slow
def test_a_dynamic_int8_program_holds_attention_over_a_quantized_convolutions_map(tmp_path):
    needs("executorch", "torchao")
    from executorch.runtime import Runtime

    model = _Attending().eval()
    images = [torch.rand(1, 3, 32, 48, generator=torch.Generator().manual_seed(i)).numpy() for i in range(4)]
    options = ExportOptions(imgsz=(32, 48), int8=True)
    job = SimpleNamespace(model=model, sample=torch.zeros(1, 3, 32, 48), options=options, calibration=images)
    job.metadata = {"stride": 2, "names": {i: str(i) for i in range(6)}}
    folder = export_executorch(job, tmp_path / "attending_executorch_model")  # failed: "Missing out variants"
    method = Runtime.get().load_program(folder / "model.pte").load_method("forward")
    for h, w in ((32, 48), (16, 32)):  # the export's shape and another
        x = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(h))
        with torch.no_grad():
            expected = model(x)
        got = method.execute((x,))[0]
        assert got.shape == expected.shape and (got - expected).abs().max() < 0.1 * expected.abs().max()
