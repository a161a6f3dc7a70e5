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
LETTERBOX_GREY = 114 / 255  # the letterbox's padding colour, as an input value
SHAPE_STEPS = 4  # a dynamic INT8 export runs at sides rounded up to a quarter of its size (at 640: 160, ..., 640)


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
        # A dynamic runtime pays one slow first inference at each new input shape (OpenVINO INT8, yolov5n: about one
        # more inference, at each of the 20 shapes of COCO128's letterboxes at 640). INT8, chosen for speed and not
        # bit-equal to the .pt anyway, runs at a few shapes instead: 4 at 640 (7% more pixels on COCO128).
        stride = int(max(meta["stride"]))
        quarter = -(-self.imgsz // (SHAPE_STEPS * stride)) * stride
        self.shape_step = quarter if meta["dynamic"] and self.precision == "int8" and quarter > stride else None
        self.output_width = 6 if self.family.end2end else 5 + len(self.names)
        # An empty parameter tells code that asks next(model.parameters()) the device and the float32 input dtype.
        self.device_anchor = nn.Parameter(torch.empty(0, device=device), requires_grad=False)
        self.checked_shapes: set[tuple[int, ...]] = set()  # input shapes whose output fitted the metadata

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
        # What the metadata claims is settled by the graph, not by the image: a raw output is checked once per input
        # shape, on its first image (a 640x480 yolov5n output is 1.6M values: every image's NaN and score scan cost
        # OpenVINO INT8 14% of its forward time in detect.py on COCO128; test.py's batches of 16, each of a new
        # shape, 17%), an end-to-end output's few class ids every time, on every image.
        if self.family.end2end or tuple(x.shape) not in self.checked_shapes:
            hw, strides, checked = tuple(x.shape[2:]), self.stride.tolist(), out if self.family.end2end else out[:1]
            problem = output_problem(checked, hw, len(self.names), self.family.end2end, strides, self.family.anchors)
            if problem:
                raise BackendError(f"{self.path}: its metadata does not fit the model: {problem}")
            self.checked_shapes.add(tuple(x.shape))
        return out

    def run_shape(self, images: int, height: int, width: int) -> tuple[int, int]:
        """The (h, w) an input of this size runs at, padded: a static export's one shape (any smaller input fits in
        it); for one image in a dynamic INT8 export, each side rounded up to a multiple of shape_step (a batch shares
        its first-inference cost among its images while padding costs each of them: test.py's batches of 16 keep
        their shapes); else its own size."""
        if self.fixed_shape:
            return self.fixed_shape
        step = self.shape_step if images == 1 else None
        return (-(-height // step) * step, -(-width // step) * step) if step else (height, width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        h, w = x.shape[2:]
        run_h, run_w = self.run_shape(x.shape[0], h, w)
        if h > run_h or w > run_w:
            raise BackendError(
                f"{self.path} is a static {run_h}x{run_w} export but got a {h}x{w} input: "
                f"letterbox to at most {run_h}x{run_w} or export with --dynamic"
            )
        top, left = (run_h - h) // 2, (run_w - w) // 2
        if (run_h, run_w) != (h, w):  # centred in letterbox grey, as a larger letterbox would have put the image
            canvas = x.new_full((*x.shape[:2], run_h, run_w), LETTERBOX_GREY)
            canvas[..., top : top + h, left : left + w] = x
            x = canvas
        out = self._fixed_batches(x) if self.batch else self.checked_run(x)
        if top or left:  # boxes back in the coordinates of the input as given
            out[..., 0] -= left
            out[..., 1] -= top
            if self.family.end2end:  # (x1, y1, x2, y2) rows; raw rows are (cx, cy, w, h)
                out[..., 2] -= left
                out[..., 3] -= top
        return out, None

    def _fixed_batches(self, x: torch.Tensor) -> torch.Tensor:
        """A fixed-batch export's output for any number of images: larger inputs split, the last chunk zero-padded."""
        outputs = []
        for chunk in x.split(self.batch):
            n = chunk.shape[0]
            if n < self.batch:
                chunk = torch.cat([chunk, chunk.new_zeros((self.batch - n, *chunk.shape[1:]))])
            outputs.append(self.checked_run(chunk)[:n])
        return torch.cat(outputs)
