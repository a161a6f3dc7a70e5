"""Model ensembles: several weights files run on the same input, their predictions merged before NMS.

load_models() is the one loader for `--weights a.pt [b.pt ...]`: one file gives the plain Model, several an Ensemble.
"""

from pathlib import Path

import torch
from torch import nn

from models.nn.family import mixed_rule
from models.nn.head import set_end2end
from models.nn.segment import MaskOutputs
from models.nn.task import DETECT
from models.weights.checkpoint import load_model
from utils.errors import CheckpointError
from utils.log import LOGGER


class Ensemble(nn.Module):
    """Several models with the same classes; forward(x) -> (their predictions concatenated along the boxes, None).

    NMS over the concatenation merges the members' boxes, as YOLOv5's ensembles do. Members of mixed families:
    the ensemble takes the first model's family (its default thresholds and box rounding; models/nn/family.mixed_rule).

    Segment members (every member's task has masks) give a MaskOutputs: the members' prototypes side by side along
    the channels, and each prediction's coefficients placed at its own member's channels (zeros elsewhere), so a
    detection's coefficients @ prototypes is its own model's mask. With detection members among them, the ensemble
    is a detector (one warning).
    """

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        if len(models) < 2:
            raise ValueError(f"an Ensemble needs at least two models, got {len(models)}")
        for model in models:  # members are merged before NMS: end-to-end heads give their NMS predictions
            set_end2end(model, False)
        self.models = nn.ModuleList(models)
        self.names = list(models[0].names)
        self.family = mixed_rule([m.family for m in models])
        self.imgsz = models[0].imgsz  # the first model's training size, as its thresholds
        tasks = [getattr(m, "task", DETECT) for m in models]
        self.task = tasks[0] if all(t.masks for t in tasks) else DETECT
        if any(t.masks for t in tasks) and not self.task.masks:
            LOGGER.warning("WARNING: an ensemble of segment and detection models gives boxes only, no masks")

    @property
    def stride(self) -> torch.Tensor:
        """The largest member's strides, so inputs padded to them fit every member."""
        return max((m.stride for m in self.models), key=lambda s: float(s.max()))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None] | MaskOutputs:
        # Members may differ in precision only through autocast; the concatenation takes the first member's dtype.
        outputs = [model(x) for model in self.models]
        dtype = outputs[0][0].dtype
        predictions = torch.cat([out[0].to(dtype) for out in outputs], 1)
        if not self.task.masks:
            return predictions, None
        protos = torch.cat([out.protos.to(dtype) for out in outputs], 1)
        coefficients = predictions.new_zeros(*predictions.shape[:2], protos.shape[1])
        row = channel = 0
        for out in outputs:  # each member's rows, at its own prototypes' channels
            rows, channels = out.coefficients.shape[1:]
            coefficients[:, row : row + rows, channel : channel + channels] = out.coefficients
            row, channel = row + rows, channel + channels
        return MaskOutputs(predictions, None, coefficients, protos)


def load_models(
    weights: str | Path | list[str | Path] | tuple[str | Path, ...], device: str | torch.device = "cpu", fuse=True
) -> nn.Module:
    """One weights file -> its Model; several -> an Ensemble of them (official release names are downloaded).

    Raises CheckpointError (one line) for an unreadable file, an empty list, or members whose classes differ.
    """
    paths = [weights] if isinstance(weights, (str, Path)) else list(weights)
    if not paths:
        raise CheckpointError("no weights given: pass at least one weights file")
    models = [load_model(p, device, fuse=fuse) for p in paths]  # load_model resolves bare names as detect.py does
    if len(models) == 1:
        return models[0]
    _check_same_classes(models, paths)
    return Ensemble(models)


def _check_same_classes(models: list[nn.Module], paths: list) -> None:
    """CheckpointError naming the first file whose class list differs from the first file's."""
    first = list(models[0].names)
    for model, path in zip(models[1:], paths[1:]):
        names = list(model.names)
        if names == first:
            continue
        if len(names) == len(first):  # the same count: say which class differs, not "(80 classes) with (80 classes)"
            i = next(i for i, (a, b) in enumerate(zip(first, names)) if a != b)
            raise CheckpointError(
                f"cannot ensemble {paths[0]} with {path}: both have {len(first)} classes but their names differ "
                f"(class {i} is '{first[i]}' in {paths[0]}, '{names[i]}' in {path}); an ensemble's models must "
                "predict the same class list"
            )
        raise CheckpointError(
            f"cannot ensemble {paths[0]} ({len(first)} classes) with {path} ({len(names)} classes): "
            f"an ensemble's models must predict the same class list"
        )
