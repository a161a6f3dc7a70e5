"""Export-time rewrites that make the FP32 graphs XNNPACK runs (LiteRT, ExecuTorch) cheaper than Ultralytics' exports
of the same model, every value the same up to float rounding.

Both runtimes: fewer_copies. The FPN's top-down path upsamples a map, concatenates it and runs 1x1 convolutions on
the concatenation; a 1x1 convolution commutes with a nearest upsampling, so its columns for the upsampled part run at
the low resolution (upsample_after_conv: 78.6M of yolo11n's ~3.3G multiply-adds fewer at 640, no concatenation), and
C2f concatenates its first convolution's output whole rather than as its two halves (one slice copy fewer a block).

ExecuTorch (delegable_model, ones_as_arithmetic, delegable_ops): XNNPACK's partitioner leaves out of the delegate an
op it lacks (a split, a softmax over any dim but the last, an expand, arange, ones_like); each ran in ExecuTorch's
portable kernels and cut the graph into another delegate, with a layout change of every tensor crossing a cut
(yolo11n at 640: 17 delegates, 47 ops outside). The same values come from ops XNNPACK has: splits as slices, DFL's
softmax over its last dim, no-op expands dropped, a static export's anchor points as constants, ones as x * 0 + 1;
only the nearest upsamplings stay outside (XNNPACK's transposed convolution of ones, their exact substitute, cost 5x
the portable kernel). yolo11n, 640, 1 thread: ExecuTorch 0.91-0.93x Ultralytics' CPU time, LiteRT 0.97-0.98x
(docs/export.md). INT8 graphs are not rewritten: their calibration saw the model as it is.
"""

import contextlib
import operator

import torch
from torch import nn

from models.nn.blocks import edge_rewrite
from models.nn.common import Concat, Conv


class _UpsampledSum(nn.Module):
    """A fused 1x1 Conv of cat(upsample(a), b) computed as act(upsample(W_a a) + W_b b + bias): its columns for a at
    a's resolution, a quarter of the multiplications, then only its output channels upsampled; no concatenation."""

    def __init__(self, conv: Conv, upsample: nn.Upsample, channels_a: int):
        super().__init__()
        weight, bias = conv.conv.weight.detach(), conv.conv.bias.detach()
        self.low = nn.Conv2d(channels_a, weight.shape[0], 1, bias=False).requires_grad_(False)
        self.high = nn.Conv2d(weight.shape[1] - channels_a, weight.shape[0], 1).requires_grad_(False)
        self.low.weight.copy_(weight[:, :channels_a])
        self.high.weight.copy_(weight[:, channels_a:])
        self.high.bias.copy_(bias)
        self.upsample = nn.Upsample(scale_factor=upsample.scale_factor, mode="nearest")
        self.act = conv.act

    def forward(self, pair: list[torch.Tensor]) -> torch.Tensor:
        a, b = pair
        return self.act(self.upsample(self.low(a)) + self.high(b))


def _commutable(layers: nn.Sequential, i: int, saved) -> bool:
    """Whether layers i, i + 1, i + 2 are a nearest 2x upsampling, a channel concat of it first and another layer's
    output, and a block whose first ops are fused 1x1 convolutions, the first two read by nothing else."""
    up, concat, block = layers[i : i + 3]
    if not (isinstance(up, nn.Upsample) and up.mode == "nearest" and isinstance(concat, Concat)):
        return False
    convs = [getattr(block, name) for name in edge_rewrite(block).input_convs]
    fused = convs and all(not hasattr(c, "bn") and c.conv.kernel_size == (1, 1) and c.conv.groups == 1 for c in convs)
    wired = concat.d == 1 and isinstance(concat.f, list) and len(concat.f) == 2 and concat.f[0] == -1
    return bool(fused) and wired and block.f == -1 and i not in saved and i + 1 not in saved


@contextlib.contextmanager
def upsample_after_conv(model: nn.Module, sample: torch.Tensor):
    """While tracing: each upsample -> concat -> block of 1x1 convolutions (the FPN's top-down path of every YOLO
    family) computes those convolutions' part for the upsampled input at its low resolution and adds the parts
    (_UpsampledSum): the same values up to rounding, fewer multiplications, no concatenation. As before afterwards."""
    network = getattr(model, "model", None)  # the exporter's InferenceOutput wraps the Model
    layers = getattr(network, "model", None)
    saved = set(getattr(network, "save", ()))
    found = (
        [i for i in range(len(layers) - 2) if _commutable(layers, i, saved)]
        if isinstance(layers, nn.Sequential)
        else []
    )
    if not found:
        yield
        return
    channels = {}

    def record(module: nn.Module, inputs: tuple) -> None:
        channels[module] = inputs[0].shape[1]

    hooks = [layers[i].register_forward_pre_hook(record) for i in found]
    with torch.no_grad():
        model(sample)
    for hook in hooks:
        hook.remove()
    swapped = []
    for i in found:
        up, concat, block = layers[i : i + 3]
        up.forward, concat.forward = (lambda x: x), list  # the block's convolutions get [a, b]
        for name in edge_rewrite(block).input_convs:
            swapped.append((block, name, getattr(block, name)))
            setattr(block, name, _UpsampledSum(getattr(block, name), up, channels[up]))
    try:
        yield
    finally:
        for block, name, conv in swapped:
            setattr(block, name, conv)
        for i in found:
            layers[i].__dict__.pop("forward", None)
            layers[i + 1].__dict__.pop("forward", None)


@contextlib.contextmanager
def _forwards(model: nn.Module, rewrite: str):
    """While tracing: each block of model that declares a method for rewrite (blocks.EdgeRewrite: fewer_copies or
    xnnpack_ops) runs it as its forward; as before afterwards."""
    blocks = [(m, getattr(edge_rewrite(m), rewrite)) for m in model.modules()]
    blocks = [(m, method) for m, method in blocks if method]
    for block, method in blocks:
        block.forward = getattr(block, method)
    try:
        yield
    finally:
        for block, _ in blocks:
            del block.forward


@contextlib.contextmanager
def fewer_copies(model: nn.Module, sample: torch.Tensor):
    """While tracing an FP32 or FP16 graph for XNNPACK (LiteRT, ExecuTorch): upsample_after_conv, and the blocks'
    forwards with fewer copies (C2f's, YOLO11's C3k2's: no slice of their first half); model as before afterwards."""
    with _forwards(model, "fewer_copies"), upsample_after_conv(model, sample):
        yield


@contextlib.contextmanager
def delegable_model(model: nn.Module, sample: torch.Tensor, constant_grids: bool):
    """While tracing: fewer_copies (the FPN's upsamplings after their convolutions, C2f's halves), the blocks'
    forwards from XNNPACK's ops (DFL's softmax over the last dim), and with constant_grids (a static export) the
    heads' anchor-point caches filled at the sample's shape, so the graph holds them as constants; model as before
    afterwards."""
    with _forwards(model, "xnnpack_ops"), fewer_copies(model, sample):
        if constant_grids:
            with torch.no_grad():
                model(sample)
        yield


def ones_as_arithmetic(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Each ones_like(x) of the exported ATen graph as x * 0 + 1 (x finite: the head's class probabilities)."""
    graph, aten = exported.graph_module.graph, torch.ops.aten
    for node in [n for n in graph.nodes if n.op == "call_function" and n.target is aten.ones_like.default]:
        with graph.inserting_before(node):
            zeros = graph.call_function(aten.mul.Tensor, (node.args[0], 0.0))
            ones = graph.call_function(aten.add.Tensor, (zeros, 1.0))
        zeros.meta, ones.meta = dict(node.meta), dict(node.meta)
        node.replace_all_uses_with(ones)
        graph.erase_node(node)
    exported.graph_module.recompile()
    return exported


def sizes_from_input(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Each size a shape-dynamic graph reads off an inner tensor (aten.sym_size: C2PSA's attention reshapes by its
    map's height and width) read off the input instead, divided by that tensor's stride: the same value. In an INT8
    graph the inner tensor is a quantized convolution's output, and XNNPACK's partitioner takes such a convolution
    only when its output quantization is its one reader: with a size read too it was left outside the delegate, its
    per-channel weight dequantized by an op ExecuTorch's portable kernels lack ("Missing out variants")."""
    graph, signature = exported.graph_module.graph, exported.graph_signature
    x = next(n for n in graph.nodes if n.op == "placeholder" and n.name in signature.user_inputs)
    sides = [(dim, side) for dim, side in enumerate(x.meta["val"].shape) if isinstance(side, torch.SymInt)]
    reads = [n for n in graph.nodes if n.target is torch.ops.aten.sym_size.int and n.args[0] is not x]
    for node in reads:
        size = node.meta["val"]
        dim, side = next(((d, s) for d, s in sides if (s.node.expr / size.node.expr).is_Integer), (None, None))
        if side is None:  # not a whole fraction of an input side: left as it is
            continue
        with graph.inserting_before(node):
            read = graph.call_function(torch.ops.aten.sym_size.int, (x, dim))
            quotient = graph.call_function(operator.floordiv, (read, int(side.node.expr / size.node.expr)))
        read.meta["val"], quotient.meta["val"] = side, size
        node.replace_all_uses_with(quotient)
        graph.erase_node(node)
    exported.graph_module.recompile()
    return exported


def _splits_as_slices(graph, edge) -> None:
    """Each split_with_sizes_copy's outputs as slice_copy ops of its input (XNNPACK has slices, not splits)."""
    for node in [n for n in graph.nodes if n.target is edge.split_with_sizes_copy.default]:
        x, sizes = node.args[0], node.args[1]
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        for user in list(node.users):  # getitem(split, i)
            if user.target is not operator.getitem:
                break
            i = user.args[1]
            with graph.inserting_before(user):
                part = graph.call_function(edge.slice_copy.Tensor, (x, dim, starts[i], starts[i] + sizes[i]))
            part.meta = dict(user.meta)
            user.replace_all_uses_with(part)
            graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)


def _drop_noop_expands(graph, edge) -> None:
    """expand_copy ops to the shape their input has (a 4-D matmul's broadcast): the input itself."""
    for node in [n for n in graph.nodes if n.target is edge.expand_copy.default]:
        x = node.args[0]
        if tuple(x.meta["val"].shape) == tuple(node.meta["val"].shape):
            node.replace_all_uses_with(x)
            graph.erase_node(node)


def delegable_ops(graph_module: torch.fx.GraphModule):
    """An ExecuTorch transform pass (edge dialect, before partitioning): splits as slices, no-op expands dropped."""
    from executorch.exir.dialects._ops import ops
    from executorch.exir.pass_base import PassResult

    _splits_as_slices(graph_module.graph, ops.edge.aten)
    _drop_noop_expands(graph_module.graph, ops.edge.aten)
    graph_module.graph.eliminate_dead_code()
    graph_module.recompile()
    return PassResult(graph_module, True)
