"""What every exported-model runtime shares: the Backend base class (the model's call signature over a runtime)
and importing the optional runtime packages with a one-line error when they are missing."""

import importlib
import importlib.util
from pathlib import Path

import torch
from torch import nn

from models.export.metadata import error_line
from models.export.output_checks import output_problem
from models.nn.family import family_of_export
from utils.cli import is_out_of_memory
from utils.errors import BackendError, ModelConfigError

INSTALL = "pip install -r requirements-export.txt"


def import_optional(module: str):
    """The optional package `module`, or BackendError naming how to install the export extra (or, when it is
    installed but fails to import, e.g. a shared library that cannot be mapped under a memory limit, why)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if importlib.util.find_spec(module) is None:
            raise BackendError(f"running this export needs the {module} package: {INSTALL}") from None
        raise BackendError(f"the {module} package is installed but cannot be imported: {error_line(e)}") from None


class Backend(nn.Module):
    """An exported model; forward(x) -> (predictions on x's device, None). Subclasses implement run(x)."""

    kind = "backend"
    last_line = False  # whether the runtime's exception text has its cause on its last line (OpenVINO)

    def __init__(self, path: Path, meta: dict, device: torch.device):
        super().__init__()
        self.path, self.device = path, device
        self.names = meta["names"]
        self.stride = torch.tensor(meta["stride"])
        self.fixed_shape = None if meta["dynamic"] else tuple(meta["imgsz"])
        self.batch = None if meta["dynamic"] else meta["batch"]
        self.precision = meta["precision"]  # fp32, fp16 or int8, as exported
        self.calibration_images = meta["calibration_images"]
        # The exported model's family (exports from before it was recorded: recognised once, here); YOLO26's
        # end-to-end exports give final (B, k, 6) detections, which the Predictor and Validator do not NMS.
        try:
            self.family = family_of_export(meta)
        except ModelConfigError as e:
            raise BackendError(f"{path}: {e}") from None
        self.imgsz = max(meta["imgsz"])  # the size it was exported at: its default inference size
        self.output_width = 6 if self.family.end2end else 5 + len(self.names)
        # An empty parameter tells code that asks next(model.parameters()) the device and the float32 input dtype.
        self.device_anchor = nn.Parameter(torch.empty(0, device=device), requires_grad=False)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """Raw predictions of one batch the export accepts."""
        raise NotImplementedError

    def checked_run(self, x: torch.Tensor) -> torch.Tensor:
        """run(x) as float32 on x's device; a runtime's failure (a graph that does not take this input or gives
        another output than (B, N, output_width), or one that does not fit its metadata: output_checks) as one
        BackendError line naming the export; out of memory (each runtime says it its own way) is left to the caller."""
        try:
            out = self.run(x)
        except Exception as e:  # torch.jit.Error, onnxruntime's and OpenVINO's types are not RuntimeErrors
            if is_out_of_memory(e):
                raise
            raise BackendError(
                f"{self.path} failed on a {tuple(x.shape)} input: {error_line(e, self.last_line)}"
            ) from None
        if out.ndim != 3 or out.shape[0] != x.shape[0] or out.shape[-1] != self.output_width:
            shape = f"(batch, boxes, {self.output_width})"
            raise BackendError(f"{self.path} is not a YOLO export: it returned {tuple(out.shape)}, expected {shape}")
        out = out.to(x.device).float()
        hw, strides = tuple(x.shape[2:]), self.stride.tolist()
        problem = output_problem(out, hw, len(self.names), self.family.end2end, strides, self.family.anchors)
        if problem:
            raise BackendError(f"{self.path}: its metadata does not fit the model: {problem}")
        return out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.fixed_shape and tuple(x.shape[2:]) != self.fixed_shape:
            h, w = self.fixed_shape
            raise BackendError(
                f"{self.path} is a static {h}x{w} export but got a {x.shape[2]}x{x.shape[3]} input: "
                f"letterbox to {h}x{w} or export with --dynamic"
            )
        if not self.batch:
            return self.checked_run(x), None
        outputs = []
        for chunk in x.split(self.batch):  # a fixed batch: split larger inputs, zero-pad the last chunk
            n = chunk.shape[0]
            if n < self.batch:
                chunk = torch.cat([chunk, chunk.new_zeros((self.batch - n, *chunk.shape[1:]))])
            outputs.append(self.checked_run(chunk)[:n])
        return torch.cat(outputs), None
