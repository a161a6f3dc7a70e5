"""LiteRT INT8: the model quantized by torch.ao's PT2E flow with litert-torch's quantizer (int8 activations,
per-channel symmetric int8 weights), then converted by litert-torch, which turns the quantize / dequantize pairs into
int8 TFLite kernels (its "STATIC" QDQ conversion): every convolution but the first and the head's runs in int8.

Calibration: the --data val images, letterboxed as detect.py does (quantize.CalibrationImages), each placed at the
top left of the largest signature in letterbox grey, as LiteRTBackend places an input that only that signature
holds; one observed graph of that shape sees them all. Every other signature is its own graph (its grids are
constants of its shape) with the same nodes: its observers take the calibrated ones' ranges, so every signature has
the same scales. As in ExecuTorch's INT8 export (models/export/pt2e.py), the stem (the convolutions at most
FLOAT_DEPTH from the input; OpenVINO's and ONNX's keep the first one) and everything after the last convolutions
(the head's 1x1 convolutions, sigmoid, box decoding) stay in float, so the input and the predictions are float32.
SiLU stays float too (a DEQUANTIZE before it, a QUANTIZE after): the quantizer has no SiLU annotator, and written
as x * sigmoid(x) (sigmoid and mul in int8) litert-torch's converter refused the graph ("'tfl.pad' op quantization
parameters violate the same scale constraint", on the stride-2 convolutions' padding).
"""

import numpy as np
import torch

from models.export.edge import require_converter
from models.export.pt2e import calls_per_image, int8_quantizer
from models.export.runtime import LETTERBOX_GREY
from models.nn.blocks import edge_rewrite
from utils.log import LOGGER


class Int8Signatures:
    """The quantized graph of the model at each signature shape, and the quant_config litert-torch converts them
    with."""

    def __init__(self, model: torch.nn.Module, batch: int):
        self.pt2e = require_converter("torchao.quantization.pt2e.quantize_pt2e", "LiteRT INT8 (torchao)")
        litert = require_converter("litert_torch.quantize.pt2e_quantizer", "LiteRT INT8")
        self.quant_config = require_converter("litert_torch.quantize.quant_config", "LiteRT INT8")
        self.litert, self.model, self.batch = litert, model, batch
        self.calibrated: torch.fx.GraphModule | None = None
        # the blocks declared float here (attention: its qkv reshape, int8 between a quantized convolution and a
        # quantized split output of another scale, broke litert-torch's same-scale constraint on tfl.reshape)
        self.float_modules = {name for name, m in model.named_modules() if edge_rewrite(m).float_in_litert_int8}

    def _observed(self, shape: tuple[int, int]) -> torch.fx.GraphModule:
        """The model exported at shape with observers on every quantized tensor."""
        sample = torch.zeros(self.batch, 3, *shape)
        graph = torch.export.export(self.model, (sample,)).module()
        self.quantizer = int8_quantizer(self.litert.PT2EQuantizer, self.litert, graph, self.float_modules)
        observed = self.pt2e.prepare_pt2e(graph, self.quantizer)
        observed(sample)  # the weights' observers see their weights (the activations' ranges are replaced)
        return observed

    def calibrate(self, images, shape: tuple[int, int]) -> None:
        """Activation ranges from images, each padded at the top left of a shape input in letterbox grey."""
        self.calibrated = self._observed(shape)
        calls_per_image(self.calibrated)
        canvas = np.full((self.batch, 3, *shape), LETTERBOX_GREY, np.float32)
        for image in images:
            h, w = image.shape[2:]
            canvas[:, :, :h, :w] = image[0]
            self.calibrated(torch.from_numpy(canvas))
            canvas[:, :, :h, :w] = LETTERBOX_GREY
        LOGGER.info(f"LiteRT INT8: calibrated on {len(images)} images; the stem and the last convolutions in float")

    def graph(self, shape: tuple[int, int]) -> torch.fx.GraphModule:
        """The quantized graph at shape, with the calibrated ranges."""
        observed = self._observed(shape)
        ours, theirs = _observers(observed), _observers(self.calibrated)
        if [name for name, _ in ours] != [name for name, _ in theirs]:
            raise RuntimeError(f"the graph at {shape} observes other tensors than the calibrated one")
        for (_, mine), (_, source) in zip(ours, theirs):
            for buffer in ("min_val", "max_val"):
                getattr(mine, buffer).resize_as_(getattr(source, buffer)).copy_(getattr(source, buffer))
        return self.pt2e.convert_pt2e(observed, fold_quantize=False)

    def config(self):
        return self.quant_config.QuantConfig(pt2e_quantizer=self.quantizer)


def _observers(graph: torch.fx.GraphModule) -> list[tuple[str, torch.nn.Module]]:
    return [(name, m) for name, m in graph.named_modules() if hasattr(m, "min_val") and hasattr(m, "max_val")]
