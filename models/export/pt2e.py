"""What the PT2E INT8 exports (ExecuTorch's, LiteRT's) share: which nodes stay float, a quantizer that leaves them
so, and the activation observer that ranges over typical images rather than the extremes."""

import dataclasses

import torch

from models.export.quantize import float_nodes


def float_keeping(quantizer_type: type, kept: set[str]) -> type:
    """quantizer_type whose annotation leaves the kept nodes unquantized. Its filter function is not enough: the
    add, mul and cat annotators still quantized the box decoding, the objectness sharing the coordinates' scale (all
    0 at 640)."""

    class FloatKeeping(quantizer_type):
        def annotate(self, model):
            model = super().annotate(model)
            for node in model.graph.nodes:
                if node.name in kept:
                    node.meta.pop("quantization_annotation", None)
            return model

    return FloatKeeping


def percentile_config(quantizer_module):
    """The quantizer module's (XNNPACK's, litert-torch's) symmetric config (per-channel int8 weights), its
    activations' ranges from mean_percentiles instead of its default histogram observer, which took 5-8 s an image
    at 160x160 in the observed graph (load 9 on 2 cores). yolov5n at 640, mAP50-95 of the quantized graph (torch's
    reference int8 arithmetic) on COCO128: the min and max over 32 images 0.347, the mean of each image's min and
    max over 128 images 0.351, of each image's percentiles 0.353."""
    config = quantizer_module.get_symmetric_quantization_config(is_per_channel=True)
    observer = mean_percentiles(quantizer_module.MinMaxObserver).with_args(eps=2**-12)
    activation = dataclasses.replace(config.input_activation, observer_or_fake_quant_ctr=observer)
    return dataclasses.replace(config, input_activation=activation, output_activation=activation)


TAIL = 1e-4  # the share of an image's activation values left out of its range at either end


def mean_percentiles(min_max_observer: type) -> type:
    """torchao's MinMaxObserver recording, for an activation, the mean over the calibration images of each image's
    TAIL and 1 - TAIL quantiles: the range of typical images, as NNCF's mean min-max and ONNX Runtime's moving
    average give, without a rare extreme value coarsening every step (the overall min and max do)."""

    class MeanPercentiles(min_max_observer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_buffer("images", torch.zeros(()))

        def forward(self, x_orig):
            if x_orig.numel() == 0:
                return x_orig
            x = x_orig.detach().float().flatten()
            k = max(int(TAIL * x.numel()), 1)
            low, high = torch.kthvalue(x, k).values, torch.kthvalue(x, x.numel() - k + 1).values
            self.images += 1
            first = bool(self.images == 1)
            self.min_val.copy_(low if first else self.min_val + (low - self.min_val) / self.images)
            self.max_val.copy_(high if first else self.max_val + (high - self.max_val) / self.images)
            return x_orig

    return MeanPercentiles


def float_node_names(graph: torch.fx.GraphModule) -> set[str]:
    """quantize.float_nodes of an exported graph: its first convolutions (on the input) and every node after the
    last ones."""
    nodes = list(graph.graph.nodes)
    convs = {n.name for n in nodes if n.target == torch.ops.aten.conv2d.default}
    first = {n.name for n in nodes if n.name in convs and n.args[0].op == "placeholder"}
    successors = {n.name: [user.name for user in n.users] for n in nodes}
    return float_nodes([n.name for n in nodes], successors, convs, first)
