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
(0.3622; at the mean max 0.3588). The exports themselves: ExecuTorch 0.3547, LiteRT 0.3576 (docs/export.md)."""

import dataclasses

import torch

from models.export.quantize import float_nodes

PRE_SILU_FLOOR = -6.0  # silu(-6) = -0.0148: a convolution output below it is as good as -6 to the SiLU after it
SILU = (torch.ops.aten.silu.default, torch.ops.aten.silu_.default)


def int8_quantizer(quantizer_type: type, quantizer_module, graph: torch.fx.GraphModule):
    """A quantizer_type (XNNPACK's, litert-torch's PT2EQuantizer) for graph: per-channel symmetric int8 weights,
    activations ranged by mean_ranges (a convolution's output that only a SiLU reads from PRE_SILU_FLOOR up), the
    float_node_names of graph left unquantized."""
    config = quantizer_module.get_symmetric_quantization_config(is_per_channel=True)
    observer = mean_ranges(quantizer_module.MinMaxObserver)
    activation = dataclasses.replace(config.input_activation, observer_or_fake_quant_ctr=observer.with_args(eps=2**-12))
    pre_silu = dataclasses.replace(
        activation, observer_or_fake_quant_ctr=observer.with_args(eps=2**-12, floor=PRE_SILU_FLOOR, peak=True)
    )
    config = dataclasses.replace(config, input_activation=activation, output_activation=activation)
    return float_keeping(quantizer_type, float_node_names(graph), pre_silu)().set_global(config)


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
    floor, the min is at least floor; with peak, the max is the largest of all images."""

    class MeanRanges(min_max_observer):
        def __init__(self, *args, floor: float | None = None, peak: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.floor, self.peak = floor, peak
            self.register_buffer("images", torch.zeros(()))

        def forward(self, x_orig):
            if x_orig.numel() == 0:
                return x_orig
            low, high = torch.aminmax(x_orig.detach().float())
            if self.floor is not None:
                low = low.clamp_min(self.floor)
            self.images += 1
            first = bool(self.images == 1)
            self.min_val.copy_(low if first else self.min_val + (low - self.min_val) / self.images)
            mean = self.max_val + (high - self.max_val) / self.images
            self.max_val.copy_(high if first else torch.maximum(self.max_val, high) if self.peak else mean)
            return x_orig

    return MeanRanges


def float_node_names(graph: torch.fx.GraphModule) -> set[str]:
    """quantize.float_nodes of an exported graph: its first convolutions (on the input) and every node after the
    last ones."""
    nodes = list(graph.graph.nodes)
    convs = {n.name for n in nodes if n.target == torch.ops.aten.conv2d.default}
    first = {n.name for n in nodes if n.name in convs and n.args[0].op == "placeholder"}
    successors = {n.name: [user.name for user in n.users] for n in nodes}
    return float_nodes([n.name for n in nodes], successors, convs, first)
