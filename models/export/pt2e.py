"""What the PT2E INT8 exports (ExecuTorch's, LiteRT's) share: which nodes stay float, and a quantizer that leaves
them so and ranges each activation over the calibration images as NNCF does (the mean of each image's min and max).

yolov5n at 640 on COCO128 (mAP50-95, the .pt 0.3701), int8 simulated in eager PyTorch (fake quantization at the
same tensors, 32 calibration images): per-channel int8 weights alone cost 0.001 (0.3689; clipping each channel to
its least squared error gave 0.3668, so the weights keep their full range). What costs is the activations: every
convolution's input in int8 gives 0.3540 with the mean of each image's 0.01% / 99.99% percentiles (the previous
ranges), 0.3591 with the overall min and max, 0.3607 with the range of least squared error, 0.3635 with the mean of
each image's min and max. The rare large values carry the objects, so the ranges keep them. The convolutions'
outputs are int8 too (XNNPACK's and TFLite's int8 convolutions write int8), in front of a float SiLU: ranged alike
they cost another 0.011 (0.3526), since their long negative tails (to -54) coarsen every step; SiLU maps everything
below PRE_SILU_FLOOR to within 0.015 of 0, so those ranges start there, and end at the largest max of any image
(0.3622; at the mean max 0.3588). The exports themselves gave ExecuTorch 0.3547, LiteRT 0.3576; with each image's
range of a shared observer taken as the union of its calls (calls_per_image) 0.3578 / 0.3582, and with the stem
(FLOAT_DEPTH) in float as well 0.3628 / 0.3622 (test.py, docs/export.md). NNCF's fast bias correction on top of the
union ranges lowered them to 0.3518 / 0.3511, so there is none.

Which convolutions stay float: the stem and the head (float_node_names). The stem came from a per-tensor error scan
of the calibrated graph: the four convolutions after the first (yolov5n's second and three of its first C3 block's)
had the worst int8 outputs, 8-20% relative squared error; most of it is the clipping below PRE_SILU_FLOOR, which the
SiLU hides (after it they are 0.05-0.07%, among the worst but not apart), yet keeping them float gained 0.004-0.005 in
both exports. FLOAT_DEPTH is the rule that names those convolutions structurally."""

import dataclasses

import torch

from models.export.quantize import float_nodes

PRE_SILU_FLOOR = -6.0  # silu(-6) = -0.0148: a convolution output below it is as good as -6 to the SiLU after it
FLOAT_DEPTH = 4  # the float stem: on yolov5n the first two convolutions and three of the first C3 block's five
SILU = (torch.ops.aten.silu.default, torch.ops.aten.silu_.default)


def int8_quantizer(quantizer_type: type, quantizer_module, graph: torch.fx.GraphModule, float_modules=frozenset()):
    """A quantizer_type (XNNPACK's, litert-torch's PT2EQuantizer) for graph: per-channel symmetric int8 weights,
    activations ranged by mean_ranges (a convolution's output that only a SiLU reads from PRE_SILU_FLOOR up), the
    float_node_names of graph and every node inside the modules named in float_modules left unquantized."""
    config = quantizer_module.get_symmetric_quantization_config(is_per_channel=True)
    observer = mean_ranges(quantizer_module.MinMaxObserver)
    activation = dataclasses.replace(config.input_activation, observer_or_fake_quant_ctr=observer.with_args(eps=2**-12))
    pre_silu = dataclasses.replace(
        activation, observer_or_fake_quant_ctr=observer.with_args(eps=2**-12, floor=PRE_SILU_FLOOR, peak=True)
    )
    config = dataclasses.replace(config, input_activation=activation, output_activation=activation)
    kept = float_node_names(graph) | module_nodes(graph, float_modules)
    return float_keeping(quantizer_type, kept, pre_silu)().set_global(config)


def module_nodes(graph: torch.fx.GraphModule, modules) -> set[str]:
    """The names of graph's nodes that the modules named in modules (their qualified names) or their submodules
    compute, by the module stack torch.export records on each node."""
    return {
        n.name
        for n in graph.graph.nodes
        if any(path in modules for path, _ in n.meta.get("nn_module_stack", {}).values())
    }


def float_keeping(quantizer_type: type, kept: set[str], pre_silu=None) -> type:
    """quantizer_type whose annotation leaves the kept nodes unquantized and, given pre_silu (a QuantizationSpec),
    ranges by it the output of each convolution that only SiLUs read. Its filter function is not enough: the add,
    mul and cat annotators still quantized the box decoding, the objectness sharing the coordinates' scale (all 0 at
    640)."""

    class FloatKeeping(quantizer_type):
        def annotate(self, model):
            model = super().annotate(model)
            for node in model.graph.nodes:
                annotation = node.meta.get("quantization_annotation")
                if node.name in kept:
                    node.meta.pop("quantization_annotation", None)
                elif pre_silu is not None and annotation is not None and annotation.output_qspec is not None:
                    if node.target == torch.ops.aten.conv2d.default and all(u.target in SILU for u in node.users):
                        annotation.output_qspec = pre_silu
            return model

    return FloatKeeping


def mean_ranges(min_max_observer: type) -> type:
    """torchao's MinMaxObserver recording, for an activation, the mean over the calibration images of each image's
    min and max (NNCF's mean min-max: a typical image's range, which a lone extreme value does not stretch); given
    floor, the min is at least floor; with peak, the max is the largest of all images. One instance observes every
    tensor of a group that shares its scale (a concatenation's inputs and output, a max pool's): calls_per_image
    tells it how many calls one image makes, whose union is that image's range."""

    class MeanRanges(min_max_observer):
        def __init__(self, *args, floor: float | None = None, peak: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.floor, self.peak = floor, peak
            self.sites, self.calls, self.lows, self.highs = 1, 0, [], []

        def forward(self, x_orig):
            if x_orig.numel() == 0:
                return x_orig
            low, high = (float(v) for v in torch.aminmax(x_orig.detach().float()))
            if self.floor is not None:
                low = max(low, self.floor)
            if self.calls % self.sites:  # a further tensor of the same image: the image's range is their union
                low, high = min(low, self.lows.pop()), max(high, self.highs.pop())
            self.calls += 1
            self.lows.append(low)
            self.highs.append(high)
            self.min_val.fill_(sum(self.lows) / len(self.lows))
            self.max_val.fill_(max(self.highs) if self.peak else sum(self.highs) / len(self.highs))
            return x_orig

    return MeanRanges


def calls_per_image(observed: torch.fx.GraphModule) -> None:
    """Readies observed's MeanRanges observers for calibration: each forgets what it saw (a shape-setting pass) and
    learns how many of observed's nodes call it. Ranging a shared group per call instead (each call as one image)
    averaged a concatenation's narrow inputs with its wide one, clipping the wide one: ExecuTorch 0.3547, LiteRT
    0.3576 mAP50-95 on yolov5n against 0.3578 / 0.3582 per image (13 such groups: concatenations and max pools)."""
    observers = {id(m): m for m in observed.modules() if hasattr(m, "sites")}
    for observer in observers.values():
        observer.sites, observer.calls, observer.lows, observer.highs = 0, 0, [], []
    for node in observed.graph.nodes:
        if node.op == "call_module" and id(module := observed.get_submodule(node.target)) in observers:
            module.sites += 1


def float_node_names(graph: torch.fx.GraphModule) -> set[str]:
    """quantize.float_nodes of an exported graph: its first convolutions (here every convolution at most
    FLOAT_DEPTH convolutions from the input, counting itself) and every node after the last ones."""
    nodes = list(graph.graph.nodes)
    convs = {n.name for n in nodes if n.target == torch.ops.aten.conv2d.default}
    depth: dict[str, int] = {}
    for n in nodes:  # topological: every input's depth is known
        upstream = max((depth[a.name] for a in n.all_input_nodes), default=0)
        depth[n.name] = upstream + (n.name in convs)
    first = {name for name in convs if depth[name] <= FLOAT_DEPTH}
    successors = {n.name: [user.name for user in n.users] for n in nodes}
    return float_nodes([n.name for n in nodes], successors, convs, first)
