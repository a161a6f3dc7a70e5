"""The export-time rewrites for XNNPACK's runtimes (models/export/xnnpack_graph.py) compute the values the model
computes and leave it as it was; a static yolo11n ExecuTorch export runs every op in XNNPACK but its two upsamplings."""

import shutil
from collections import Counter

import pytest
import torch

from models.export.xnnpack_graph import delegable_model, fewer_copies, ones_as_arithmetic, sizes_from_input
from models.nn.blocks import C2PSA, DFL
from models.nn.common import Conv
from tests.models.export.edge_helpers import needs


def test_dfl_with_its_softmax_over_the_last_dim_gives_the_same_distances():
    dfl = DFL(16).eval()
    x = torch.randn(2, 64, 300, generator=torch.Generator().manual_seed(0)) * 4
    expected = dfl(x)
    with delegable_model(dfl, x, constant_grids=False):
        rewritten = dfl(x)
        graph = torch.export.export(dfl, (x,)).graph
    [softmax] = [n for n in graph.nodes if n.target is torch.ops.aten.softmax.int]
    assert softmax.args[1] in (-1, 3)  # XNNPACK's softmax: over the last dim only
    assert torch.allclose(rewritten, expected, atol=1e-5)
    assert "forward" not in dfl.__dict__ and not hasattr(dfl, "bins_row")  # as before afterwards


@pytest.mark.parametrize("name", ["weights/yolov5n.pt", "reference/ultralytics/yolo11n_random.pt"])
def test_fewer_copies_gives_the_model_outputs_and_restores_it(shared, name):
    from models.export.exporter import InferenceOutput
    from models.weights.checkpoint import load_model

    model = InferenceOutput(load_model(shared / name, torch.device("cpu"))).eval()
    x = torch.rand(1, 3, 160, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(x)
        with fewer_copies(model, torch.zeros(1, 3, 128, 128)):
            swapped = [m for m in model.modules() if type(m).__name__ == "_UpsampledSum"]
            rewritten = model(x)
        again = model(x)
    assert len(swapped) == (4 if "yolov5" in name else 2)  # C3's two 1x1 convolutions, C3k2's one, per upsampling
    assert (rewritten - expected).abs().max() <= 1e-5 * expected.abs().max()
    assert torch.equal(again, expected) and not any(type(m).__name__ == "_UpsampledSum" for m in model.modules())


class _Objectness(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = x.sigmoid()
        return torch.cat((torch.ones_like(scores[:, :1]), scores), 1)


def test_ones_like_becomes_arithmetic_with_the_same_output():
    x = torch.randn(1, 5, 7)
    exported = ones_as_arithmetic(torch.export.export(_Objectness(), (x,)))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert "aten.ones_like.default" not in targets and "aten.mul.Tensor" in targets
    assert torch.equal(exported.module()(x), _Objectness()(x))


def test_sizes_are_read_off_the_input_with_the_same_values():
    model = torch.nn.Sequential(Conv(3, 64, 3, 2), C2PSA(64, 64)).eval()  # the attention reshapes by h and w
    sides = {2: 2 * torch.export.Dim("rows", max=32), 3: 2 * torch.export.Dim("cols", max=32)}
    exported = torch.export.export(model, (torch.rand(1, 3, 32, 48),), dynamic_shapes=(sides,))
    sizes = [n for n in exported.graph.nodes if n.target is torch.ops.aten.sym_size.int]
    assert sizes and any(n.args[0].op != "placeholder" for n in sizes)  # read off a convolution's output
    exported = sizes_from_input(exported)
    sizes = [n for n in exported.graph.nodes if n.target is torch.ops.aten.sym_size.int]
    assert sizes and all(n.args[0].op == "placeholder" for n in sizes)
    for shape in ((1, 3, 32, 48), (1, 3, 16, 40)):
        x = torch.rand(shape, generator=torch.Generator().manual_seed(shape[3]))
        with torch.no_grad():
            assert torch.equal(exported.module()(x), model(x))


def _kernels(program: bytes) -> Counter:
    """The ops a .pte runs: each kernel outside a delegate by name, delegates as 'delegate'."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(program).program.execution_plan[0]
    names = [op.name for op in plan.operators]
    calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
    kinds = [names[c.op_index] if hasattr(c, "op_index") else type(c).__name__ for c in calls]
    return Counter("delegate" if kind == "DelegateCall" else kind for kind in kinds if kind != "MoveCall")


@pytest.mark.slow
def test_static_yolo11n_runs_in_xnnpack_but_its_upsamplings(shared, tmp_path):
    needs("executorch")
    from models.export.backends import load_backend
    from models.export.exporter import ExportOptions, export
    from models.weights.checkpoint import load_model

    reference = shared / "reference/ultralytics/yolo11n_random.pt"
    if not reference.is_file():
        pytest.skip(f"{reference} is missing")
    weights = tmp_path / reference.name
    shutil.copyfile(reference, weights)
    [result] = export(weights, ["executorch"], ExportOptions(imgsz=(320, 320), dynamic=False), torch.device("cpu"))
    kernels = _kernels((result.path / "model.pte").read_bytes())
    outside = {k for k in kernels if k != "delegate"}
    assert outside <= {"aten::upsample_nearest2d", "dim_order_ops::_to_dim_order_copy"}, kernels
    assert kernels["delegate"] == 3  # cut by the two upsamplings only
    x = torch.rand(1, 3, 320, 320, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, out = load_model(weights)(x)[0], load_backend(result.path)(x)[0]
    assert (out - ref).abs().max() <= 1e-3 * ref.abs().max()
