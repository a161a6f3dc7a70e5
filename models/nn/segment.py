"""Instance-segmentation heads: a detection head that also predicts, per prediction, nm mask coefficients, and a
prototype branch that makes nm prototype masks at 1/4 of the input size from the stride-8 features. An object's mask
is sigmoid(coefficients @ prototypes), cropped to its box (YOLACT's recipe, as YOLOv5 and Ultralytics use it).

Segment is YOLOv5's (its Detect with nm more channels per anchor; nearest-neighbour upsampling in the prototypes);
AnchorFreeSegment is YOLOv8's and YOLO11's (a third per-level branch for the coefficients; a learned 2x upsampling);
AnchorFreeSegment26 is YOLO26's (prototypes from all three levels, and a training-only per-class branch). Which one a
YAML's Segment entry builds is its family's declaration (models/nn/family.py, segment_head).

Outputs. Eval: MaskOutputs, (predictions, maps) exactly as the family's detection head gives them, so an engine that
only needs boxes reads a segment model as a detector, with .coefficients (B, N, nm) (an end-to-end head's: of its k
rows) and .protos (B, nm, H/4, W/4). Training: a dict: "detect" (the detection head's training output), "protos",
and for the anchor-free heads "coefficients" (per-level maps (B, nm, H, W)), for an end-to-end one
"one2one_coefficients" (from detached features) and for YOLO26 "semantic" (B, nc, H/8, W/8) logits.
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

from models.nn.common import Conv, conv_cost
from models.nn.head import AnchorFreeDetect, Detect, anchor_free_cost, detect_cost


class MaskOutputs(tuple):
    """A segment head's eval outputs: the 2-tuple (predictions, maps) of detection, with the mask coefficients of
    each prediction and the prototypes as attributes."""

    def __new__(cls, predictions: torch.Tensor, maps, coefficients: torch.Tensor, protos: torch.Tensor):
        outputs = super().__new__(cls, (predictions, maps))
        outputs.coefficients, outputs.protos = coefficients, protos
        return outputs


class Proto(nn.Module):
    """nm prototype masks at twice the input's resolution: a 3x3 convolution, a 2x upsampling (learned, a 2x2
    stride-2 transposed convolution, or nearest-neighbour as YOLOv5's), a 3x3 and a 1x1 convolution."""

    def __init__(self, c1: int, hidden: int = 256, nm: int = 32, learned_upsampling: bool = True):
        super().__init__()
        self.cv1 = Conv(c1, hidden, 3)
        if learned_upsampling:
            self.upsample = nn.ConvTranspose2d(hidden, hidden, 2, 2, 0, bias=True)
        else:
            self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.cv2 = Conv(hidden, hidden, 3)
        self.cv3 = Conv(hidden, nm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(self.cv2(self.upsample(self.cv1(x))))


class MultiScaleProto(Proto):
    """YOLO26's prototypes: the stride-16 and stride-32 features, each mapped to the stride-8 width by a 1x1
    convolution and upsampled (nearest), are added to the stride-8 features, fused by a 3x3 convolution, then made
    into prototypes as Proto does. In training it also gives per-class logits at stride 8 (semseg), an auxiliary
    target only."""

    def __init__(self, ch: list[int], hidden: int = 256, nm: int = 32, nc: int = 80):
        super().__init__(hidden, hidden, nm)
        self.feat_refine = nn.ModuleList(Conv(c, ch[0], 1) for c in ch[1:])
        self.feat_fuse = Conv(ch[0], hidden, 3)
        self.semseg = nn.Sequential(Conv(ch[0], hidden, 3), Conv(hidden, hidden, 3), nn.Conv2d(hidden, nc, 1))

    def forward(self, x: list[torch.Tensor]):
        """Prototypes (B, nm, 2H, 2W) of the stride-8 map's (H, W); in training (prototypes, semantic logits)."""
        features = x[0]
        for i, refine in enumerate(self.feat_refine):  # a fixed factor per level keeps an export's graph static
            features = features + F.interpolate(refine(x[i + 1]), scale_factor=2 ** (i + 1), mode="nearest")
        protos = super().forward(self.feat_fuse(features))
        return (protos, self.semseg(features)) if self.training else protos


class Segment(Detect):
    """YOLOv5's segment head: Detect with nm mask coefficients after each anchor's box, objectness and classes (raw,
    not passed through the sigmoid), and YOLOv5's prototypes."""

    def __init__(self, nc: int = 80, anchors: list | tuple = (), nm: int = 32, npr: int = 256, ch=()):
        super().__init__(nc, anchors, ch)
        self.nm, self.npr = nm, npr
        self.no = nc + 5 + nm
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        self.proto = Proto(ch[0], npr, nm, learned_upsampling=False)

    def forward(self, x: list[torch.Tensor]):
        protos = self.proto(x[0])
        outputs = super().forward(x)
        if self.training:
            return {"detect": outputs, "protos": protos}
        predictions, maps = outputs
        coefficients = torch.cat([m[..., self.nc + 5 :].reshape(m.shape[0], -1, self.nm) for m in maps], 1)
        return MaskOutputs(predictions, maps, coefficients, protos)


def _coefficient_branch(c_in: int, hidden: int, nm: int) -> nn.Sequential:
    return nn.Sequential(Conv(c_in, hidden, 3), Conv(hidden, hidden, 3), nn.Conv2d(hidden, nm, 1))


def coefficient_width(nm: int, ch) -> int:
    """Hidden channels of the anchor-free coefficient branch (Ultralytics' rule)."""
    return max(ch[0] // 4, nm)


class AnchorFreeSegment(AnchorFreeDetect):
    """The anchor-free segment head of YOLOv8 and YOLO11 (and, end to end, YOLO26's through its subclass):
    AnchorFreeDetect with a per-level coefficient branch (and its one-to-one copy) and learned-upsampling
    prototypes."""

    def __init__(self, nc=80, reg_max=16, end2end=False, legacy=True, nm: int = 32, npr: int = 256, ch=()):
        super().__init__(nc, reg_max, end2end, legacy, ch)
        self.nm, self.npr = nm, npr
        self.proto = self._prototypes(ch, npr, nm, nc)
        hidden = coefficient_width(nm, ch)
        self.cv4 = nn.ModuleList(_coefficient_branch(c, hidden, nm) for c in ch)
        if end2end:
            self.one2one_cv4 = copy.deepcopy(self.cv4)

    @staticmethod
    def _prototypes(ch, npr: int, nm: int, nc: int) -> nn.Module:
        return Proto(ch[0], npr, nm)

    def _protos(self, x: list[torch.Tensor]):
        return self.proto(x[0])

    def _coefficients(self, x: list[torch.Tensor], branch: nn.ModuleList) -> list[torch.Tensor]:
        return [b(xi) for xi, b in zip(x, branch)]

    def forward(self, x: list[torch.Tensor]):
        if self.training:
            return self._training_outputs(x)
        protos = self._protos(x)
        predictions, maps, cells = self.predict(x)
        branch = self.one2one_cv4 if cells is not None else self.cv4
        bs = x[0].shape[0]
        coefficients = torch.cat([m.reshape(bs, self.nm, -1) for m in self._coefficients(x, branch)], 2)
        if cells is not None:  # the end-to-end rows' own; a placeholder row (cell >= N) gets zeros
            coefficients = torch.cat((coefficients, coefficients.new_zeros(bs, self.nm, self.max_det)), 2)
            coefficients = coefficients.gather(2, cells[:, None].expand(-1, self.nm, -1))
        return MaskOutputs(predictions, maps, coefficients.transpose(1, 2), protos)

    def _training_outputs(self, x: list[torch.Tensor]) -> dict:
        protos = self._protos(x)
        outputs = {"detect": super().forward(x), "coefficients": self._coefficients(x, self.cv4)}
        if self.has_one2one:
            outputs["one2one_coefficients"] = self._coefficients([xi.detach() for xi in x], self.one2one_cv4)
        if isinstance(protos, tuple):
            protos, outputs["semantic"] = protos
        outputs["protos"] = protos
        return outputs


class AnchorFreeSegment26(AnchorFreeSegment):
    """YOLO26's segment head: AnchorFreeSegment with multi-scale prototypes (MultiScaleProto)."""

    @staticmethod
    def _prototypes(ch, npr: int, nm: int, nc: int) -> nn.Module:
        return MultiScaleProto(ch, npr, nm, nc)

    def _protos(self, x: list[torch.Tensor]):
        return self.proto(x)


def detection_maps(outputs):
    """The detection head's training maps inside a model's training output (a segment head's dict holds its
    detection head's output; an end-to-end head gives one-to-many and one-to-one maps): what strides are read from."""
    if isinstance(outputs, dict) and "detect" in outputs:
        outputs = outputs["detect"]
    return outputs["one2many"] if isinstance(outputs, dict) else outputs


def _sum(*costs) -> tuple[int, int, int]:
    return sum(c[0] for c in costs), sum(c[1] for c in costs), sum(c[2] for c in costs)


def proto_cost(size: int, c1: int, hidden: int, nm: int, learned_upsampling: bool) -> tuple[int, int, int]:
    """(parameters, multiply-adds, output elements) of a Proto on a size x size map."""
    up = 2 * size
    upsample = (hidden * hidden * 4 + hidden, hidden * hidden * size * size * 4) if learned_upsampling else (0, 0)
    convs = conv_cost(size, c1, hidden, 3), conv_cost(up, hidden, hidden, 3), conv_cost(up, hidden, nm)
    return _sum(*convs, (*upsample, hidden * up * up))


def multi_scale_proto_cost(sizes: list[int], ch: list[int], hidden: int, nm: int, nc: int) -> tuple[int, int, int]:
    """(parameters, multiply-adds, output elements) of a MultiScaleProto on maps of these sizes (its training-only
    branch included)."""
    size, c0 = sizes[0], ch[0]
    refine = [conv_cost(s, c, c0) for s, c in zip(sizes[1:], ch[1:])]
    semseg = conv_cost(size, c0, hidden, 3), conv_cost(size, hidden, hidden, 3)
    last = (hidden * nc + nc, hidden * nc * size * size, nc * size * size)
    fuse = conv_cost(size, c0, hidden, 3)
    return _sum(*refine, *semseg, last, fuse, proto_cost(size, hidden, hidden, nm, True))


def segment_cost(sizes: list[int], nc: int, levels: list, nm: int, npr: int, ch: list[int]) -> tuple[int, int, int]:
    """(parameters, multiply-adds, output elements) of YOLOv5's Segment, from its arguments alone."""
    return _sum(detect_cost(sizes, nc, levels, ch, extra=nm), proto_cost(sizes[0], ch[0], npr, nm, False))


def anchor_free_segment_cost(sizes, nc, reg_max, end2end, legacy, nm, npr, ch, multi_scale=False):
    """(parameters, multiply-adds, output elements) of an AnchorFreeSegment (multi_scale: AnchorFreeSegment26)."""
    hidden = coefficient_width(nm, ch)
    branch = [
        _sum(
            conv_cost(s, c, hidden, 3),
            conv_cost(s, hidden, hidden, 3),
            (hidden * nm + nm, hidden * nm * s * s, nm * s * s),
        )
        for s, c in zip(sizes, ch)
    ]
    coefficients = [(2 if end2end else 1) * v for v in _sum(*branch)]
    if multi_scale:
        protos = multi_scale_proto_cost(sizes, ch, npr, nm, nc)
    else:
        protos = proto_cost(sizes[0], ch[0], npr, nm, True)
    return _sum(anchor_free_cost(sizes, nc, reg_max, end2end, legacy, ch), coefficients, protos)


SEGMENT_COSTS = {  # what config.py prices each segment head with
    "Segment": segment_cost,
    "AnchorFreeSegment": anchor_free_segment_cost,
    "AnchorFreeSegment26": lambda *args: anchor_free_segment_cost(*args, multi_scale=True),
}
