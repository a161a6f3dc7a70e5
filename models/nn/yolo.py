"""The detection model (YOLOv5, and the anchor-free YOLOv8, YOLO11 and YOLO26), built from a YAML description once
models/nn/config.py has checked and priced it."""

import math
from pathlib import Path

import torch
from torch import nn

from models.nn.common import Conv
from models.nn.config import LAYERS, PROBE_SIZE, LayerPlan, check_model_cost, load_cfg, plan_layers, short_repr
from models.nn.family import Family, family_of_config
from models.nn.features import HeadInputTap
from models.nn.head import is_end2end, set_end2end
from models.nn.segment import detection_maps
from models.nn.task import Task, task_of_config
from utils.errors import ModelConfigError
from utils.log import one_line


def build_layers(plans: list[LayerPlan]) -> tuple[nn.Sequential, list[int]]:
    """The planned layers built; return them and the indices whose outputs are reused."""
    layers, save = [], []
    for plan in plans:
        module = _make_layer(plan.i, plan.name, plan.args, plan.n)
        module.i, module.f = plan.i, plan.f  # layer index and where its input comes from
        save.extend(x % plan.i for x in ([plan.f] if isinstance(plan.f, int) else plan.f) if x != -1)
        layers.append(module)
    return nn.Sequential(*layers), sorted(set(save))


def parse_model(cfg: dict, ch: int = 3, family: Family | None = None) -> tuple[nn.Sequential, list[int]]:
    """Build the layer list from a model YAML dict (as a model of family; the config's own when None) once its plan
    is within the limits; return it and the indices whose outputs are reused."""
    plans = plan_layers(cfg, ch, family)
    check_model_cost(plans, ch)
    return build_layers(plans)


def _make_layer(i: int, name: str, args: list, n: int) -> nn.Module:
    """Layer i: n modules of type name built from args, or ModelConfigError saying why it cannot be built."""
    module_cls = LAYERS[name]
    try:
        return nn.Sequential(*(module_cls(*args) for _ in range(n))) if n > 1 else module_cls(*args)
    except (TypeError, ValueError, RuntimeError, IndexError) as e:
        raise ModelConfigError(
            f"layer {i} ({name}) cannot be built from args {short_repr(args)}: {one_line(e)}"
        ) from None


class Model(nn.Module):
    """A YOLO detector. Forward takes (B, 3, H, W) in [0, 1]; see Detect.forward (YOLOv5) and
    AnchorFreeDetect.forward (YOLOv8, YOLO11, YOLO26) for the outputs: in eval both give (B, N, 5 + nc) predictions
    for NMS first, except an end-to-end head (end2end True), whose (B, k, 6) detections are final.

    family (models/nn/family.py) is decided here once, from the config unless a checkpoint recorded it; task
    (models/nn/task.py) from the config's head entry (a segment head's eval outputs are models.nn.segment.MaskOutputs);
    imgsz is the training image size a checkpoint recorded (None for a model built from a YAML)."""

    def __init__(
        self,
        cfg: str | Path | dict = "yolov5s.yaml",
        ch: int = 3,
        nc: int | None = None,
        anchors=None,
        family: Family | None = None,
        task: Task | None = None,
    ):
        super().__init__()
        self.yaml = load_cfg(cfg)
        if nc is not None and nc != self.yaml.get("nc"):
            self.yaml["nc"] = nc
        if anchors is not None:
            self.yaml["anchors"] = anchors
        self.family = family or family_of_config(self.yaml)
        self.task = task_of_config(self.yaml)  # the head a config builds is its task's; a recorded one must agree
        if task is not None and task is not self.task:
            raise ModelConfigError(f"the config describes a {self.task.name} model, not a {task.name} one")
        self.imgsz: int | None = None
        self.model, self.save = parse_model(self.yaml, ch=ch, family=self.family)
        self.names = [str(i) for i in range(self.yaml["nc"])]
        detect = self.model[-1]
        # Strides from a dry run: input size over each output map's size.
        probe = PROBE_SIZE  # the limits in check_model_cost bound this run's work and memory
        maps = detection_maps(self._dry_run(torch.zeros(1, ch, probe, probe)))
        detect.stride = torch.tensor([probe / m.shape[-2] for m in maps])
        if not self.family.anchors:
            detect.initialize_biases()
            return
        detect.anchors /= detect.stride.view(-1, 1, 1)
        self._check_anchor_order()
        self._initialize_biases()

    @property
    def stride(self) -> torch.Tensor:
        return self.model[-1].stride

    @property
    def end2end(self) -> bool:
        """Whether eval outputs are final detections (YOLO26's one-to-one head), to be thresholded without NMS."""
        return is_end2end(self)

    @end2end.setter
    def end2end(self, enabled: bool) -> None:
        set_end2end(self, enabled)

    def tap_head_inputs(self) -> HeadInputTap:
        """A context that keeps what the head is fed on a forward (a tracker's appearance features come from it)."""
        return HeadInputTap(self.model[-1])

    def forward(self, x: torch.Tensor):
        outputs = []
        for m in self.model:
            if m.f != -1:
                x = outputs[m.f] if isinstance(m.f, int) else [x if j == -1 else outputs[j] for j in m.f]
            x = m(x)
            outputs.append(x if m.i in self.save else None)
        return x

    @torch.no_grad()
    def _dry_run(self, x: torch.Tensor):
        """forward() on a probe image; ModelConfigError naming the first layer whose inputs do not fit it."""
        outputs = []
        for m in self.model:
            if m.f != -1:
                x = outputs[m.f] if isinstance(m.f, int) else [x if j == -1 else outputs[j] for j in m.f]
            try:
                x = m(x)
            except (RuntimeError, ValueError, IndexError) as e:
                raise ModelConfigError(
                    f"layer {m.i} ({type(m).__name__}) cannot take its inputs: {one_line(e)}"
                ) from None
            outputs.append(x if m.i in self.save else None)
        return x

    def _check_anchor_order(self) -> None:
        """Make anchor sizes grow with stride, as the YAML order may be reversed."""
        detect = self.model[-1]
        area = detect.anchors.prod(-1).mean(-1).view(-1)
        if area[-1] - area[0] and (area[-1] - area[0]).sign() != (detect.stride[-1] - detect.stride[0]).sign():
            detect.anchors[:] = detect.anchors.flip(0)

    def _initialize_biases(self) -> None:
        """Objectness prior of about 8 objects per 640x640 image; class prior of 0.6/nc."""
        detect = self.model[-1]
        for conv, s in zip(detect.m, detect.stride):
            b = conv.bias.view(detect.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5 : 5 + detect.nc] += math.log(0.6 / (detect.nc - 0.99999))
            conv.bias = nn.Parameter(b.view(-1), requires_grad=True)

    def fuse(self) -> "Model":
        """Fold every Conv's BatchNorm into its convolution (inference only)."""
        for m in self.model.modules():
            if isinstance(m, Conv) and hasattr(m, "bn"):
                m.fuse()
        return self

    def set_anchors_pixels(self, anchors_px: torch.Tensor) -> None:
        """Store new anchors given in pixels, shape (nl, na, 2)."""
        detect = self.model[-1]
        detect.anchors[:] = anchors_px.to(detect.anchors) / detect.stride.to(detect.anchors).view(-1, 1, 1)
        detect._grids = {}


def count_parameters(model: nn.Module) -> int:
    """Number of parameters in a module."""
    return sum(p.numel() for p in model.parameters())
