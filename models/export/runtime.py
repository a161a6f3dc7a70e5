"""What every exported-model runtime shares: the Backend base class (the model's call signature over a runtime)
and importing the optional runtime packages with a one-line error when they are missing."""

import importlib
import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import nn

from models.export.metadata import error_line
from models.export.output_checks import output_problem
from models.nn.family import family_of_export
from models.nn.segment import MaskOutputs
from models.nn.task import task_of_export
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
    """An exported model; forward(x) -> (predictions on x's device, None), or for a segment export a MaskOutputs
    (models/nn/segment.py: the same pair with .coefficients and .protos), as the PyTorch model gives them.
    Subclasses implement run(x)."""

    kind = "backend"
    # A dynamic export that runs a batch one image at a time (OpenVINO INT8: see OpenVinoBackend); None runs it whole
    images_per_run: int | None = None
    # Inputs the runtime runs side by side (OpenVINO's streams): a batch's runs, and start()ed inputs, share them out
    parallel_runs = 1
    last_line = False  # whether the runtime's exception text has its cause on its last line (OpenVINO)
    # What forward() takes: float images in [0, 1], or where the runtime scales them inside its graph (OpenVINO), the
    # uint8 images themselves, which the engines then give it (utils.torch_utils.model_inputs); floats given to such
    # a backend are turned back into uint8 first
    uint8_input = False

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
        # Its task (models/nn/task.py; exports from before it was recorded are detection exports): a segment
        # export's graph gives each prediction row's mask coefficients after its columns, and the prototypes.
        try:
            self.family, self.task = family_of_export(meta), task_of_export(meta)
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
        self.started: dict[int, tuple] = {}  # id(input) -> (input, its future) of start()
        self.pool: ThreadPoolExecutor | None = None  # parallel_runs threads, made on first use
        self.side_by_side = threading.local()  # .on in the pool's threads: a run there has others beside it

    def run(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Raw predictions of one batch the export accepts; a graph with several outputs may give them all (a
        segment export's second output is its prototypes)."""
        raise NotImplementedError

    def run_shared(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """run(x), whose outputs may be views of the runtime's own buffers, valid until its next run (a runtime that
        can, OpenVINO, saves a copy per run where the caller copies them anyway: Backend._chunked)."""
        return self.run(x)

    def outputs(self, arrays: list) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """A runtime's output arrays as run() returns them: the predictions, and a segment export's prototypes."""
        kept = arrays[: 2 if self.task.masks else 1]
        tensors = tuple(a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a)) for a in kept)
        return tensors if self.task.masks else tensors[0]

    def _split(self, out, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(predictions (B, N, output_width + k) float32 on x's device, prototypes (B, k, h, w) or None), or
        BackendError when the graph's outputs are not what its metadata says (a detection export: one (B, N,
        output_width); a segment export: predictions with k mask coefficients per row, and k prototypes)."""
        many = isinstance(out, (list, tuple))
        pred, protos = (out[0], out[1] if self.task.masks and len(out) > 1 else None) if many else (out, None)
        coefs = protos.shape[1] if protos is not None and protos.ndim == 4 else 0
        if self.task.masks and (not coefs or protos.shape[0] != x.shape[0]):
            got = "no prototypes" if protos is None else f"a {tuple(protos.shape)} second output"
            raise BackendError(f"{self.path} records the task segment, but its graph gives {got}: export it again")
        width = self.output_width + coefs
        if pred.ndim != 3 or pred.shape[0] != x.shape[0] or pred.shape[-1] != width:
            shape = f"(batch, boxes, {width})"
            raise BackendError(f"{self.path} is not a YOLO export: it returned {tuple(pred.shape)}, expected {shape}")
        return pred.to(x.device).float(), None if protos is None else protos.to(x.device).float()

    def checked_run(self, x: torch.Tensor, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(predictions, prototypes or None) of run(x) (shared: run_shared(x)) as float32 on x's device (_split); a
        runtime's failure (a graph that does not take this input or gives other outputs, or one that does not fit its
        metadata: output_checks) as one BackendError line naming the export; out of memory (each runtime says it its
        own way) is left to the caller."""
        try:
            out = self.run_shared(x) if shared else self.run(x)
        except Exception as e:  # torch.jit.Error, onnxruntime's and OpenVINO's types are not RuntimeErrors
            if is_out_of_memory(e):
                raise
            raise BackendError(
                f"{self.path} failed on a {tuple(x.shape)} input: {error_line(e, self.last_line)}"
            ) from None
        out, protos = self._split(out, x)
        self.check_output(out[..., : self.output_width], x)
        return out, protos

    def check_output(self, out: torch.Tensor, x: torch.Tensor) -> None:
        """BackendError when the predictions do not fit what the metadata claims (output_checks)."""
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

    def run_shape(self, images: int, height: int, width: int) -> tuple[int, int]:
        """The (h, w) an input of this size runs at, padded: a static export's one shape (any smaller input fits in
        it); for one image in a dynamic INT8 export, each side rounded up to a multiple of shape_step (a batch shares
        its first-inference cost among its images while padding costs each of them: test.py's batches of 16 keep
        their shapes); else its own size."""
        if self.fixed_shape:
            return self.fixed_shape
        step = self.shape_step if images == 1 else None
        return (-(-height // step) * step, -(-width // step) * step) if step else (height, width)

    def start(self, x: torch.Tensor) -> None:
        """Begin forward(x) in the background where the runtime runs several inputs at once (parallel_runs > 1): the
        Predictor starts its next image before it collects the current one, so that the two run side by side;
        forward(x), on this same tensor, then collects it. Elsewhere nothing: forward(x) runs it."""
        if self.parallel_runs > 1:
            self.started[id(x)] = (x, self._parallel(self._forward, [x], wait=False)[0])

    def thread_pool(self) -> ThreadPoolExecutor:
        """The runtime's parallel_runs threads, made on first use."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.parallel_runs, thread_name_prefix="backend")
        return self.pool

    def _parallel(self, function, items: list, wait: bool = True) -> list:
        """function(item) for each item on the runtime's parallel_runs threads (their results, or unless wait their
        futures), each in the caller's inference mode (thread-local in torch), as if the caller had run it."""
        inference = torch.is_inference_mode_enabled()

        def call(item):
            self.side_by_side.on = True
            with torch.inference_mode(inference):
                return function(item)

        futures = [self.thread_pool().submit(call, item) for item in items]
        return [f.result() for f in futures] if wait else futures

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None] | MaskOutputs:
        started = self.started.pop(id(x), None)
        return started[1].result() if started else self._forward(x)

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None] | MaskOutputs:
        if self.uint8_input and x.is_floating_point():  # a caller's [0, 1] floats, as the uint8 they came from
            x = x.mul(255).round_().clamp_(0, 255).to(torch.uint8)
        h, w = x.shape[2:]
        run_h, run_w = self.run_shape(x.shape[0], h, w)
        if h > run_h or w > run_w:
            raise BackendError(
                f"{self.path} is a static {run_h}x{run_w} export but got a {h}x{w} input: "
                f"letterbox to at most {run_h}x{run_w} or export with --dynamic"
            )
        top, left = (run_h - h) // 2, (run_w - w) // 2
        if (run_h, run_w) != (h, w):  # centred in letterbox grey, as a larger letterbox would have put the image
            x = _centred(x, (run_h, run_w), (top, left))
        chunk = self.batch or self.images_per_run
        out, protos = self._chunked(x, chunk) if chunk and (self.batch or x.shape[0] > chunk) else self.checked_run(x)
        if top or left:  # boxes back in the coordinates of the input as given
            # (x1, y1, x2, y2) rows of an end-to-end export; raw rows are (cx, cy, w, h)
            shift = [left, top, left, top] if self.family.end2end else [left, top]
            if out.device.type == "cpu":  # in NumPy: see _centred
                out.numpy()[..., : len(shift)] -= np.array(shift, np.float32)
            else:
                out[..., : len(shift)] -= out.new_tensor(shift)
        if protos is None:
            return out, None
        protos = _cropped_protos(protos, (top, left), (h, w), (run_h, run_w))
        width = self.output_width
        return MaskOutputs(out[..., :width], None, out[..., width:], protos)

    def _chunked(self, x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The outputs of any number of images run `size` at a time (side by side where the runtime runs several
        inputs at once): larger inputs split; for a fixed-batch export the last chunk zero-padded to its batch. Each
        run's outputs are copied into the batch's own tensors (no concatenation), in the thread that ran it: a
        runtime may hand out its buffers, which that thread's next run reuses."""
        made, lock = [], threading.Lock()  # the batch's (predictions, prototypes), shaped as the first run's

        def run(start: int) -> None:
            chunk = x[start : start + size]
            n = chunk.shape[0]
            if self.batch and n < self.batch:
                chunk = torch.cat([chunk, chunk.new_zeros((self.batch - n, *chunk.shape[1:]))])
            pred, proto = self.checked_run(chunk, shared=True)
            with lock:
                if not made:
                    protos = None if proto is None else proto.new_empty((x.shape[0], *proto.shape[1:]))
                    made.extend([pred.new_empty((x.shape[0], *pred.shape[1:])), protos])
            made[0][start : start + n] = pred[:n]
            if made[1] is not None:
                made[1][start : start + n] = proto[:n]

        starts = list(range(0, x.shape[0], size))
        if self.parallel_runs > 1 and len(starts) > 1:
            self._parallel(run, starts)
        else:
            for start in starts:
                run(start)
        return made[0], made[1]


def _centred(x: torch.Tensor, run_hw: tuple[int, int], top_left: tuple[int, int]) -> torch.Tensor:
    """x centred at top_left in a run_hw canvas of letterbox grey; built in NumPy on the CPU: a torch op there wakes
    torch's OpenMP threads, which then spin beside the runtime's own threads (utils/infer/predict.py prepares the
    inputs of such runtimes in NumPy for the same reason)."""
    (top, left), (h, w) = top_left, x.shape[2:]
    grey = LETTERBOX_GREY if x.is_floating_point() else round(LETTERBOX_GREY * 255)
    if x.device.type != "cpu":
        canvas = x.new_full((*x.shape[:2], *run_hw), grey)
        canvas[..., top : top + h, left : left + w] = x
        return canvas
    array = x.numpy()
    canvas = np.full((*x.shape[:2], *run_hw), grey, array.dtype)
    canvas[..., top : top + h, left : left + w] = array
    return torch.from_numpy(canvas)


def _cropped_protos(protos: torch.Tensor, top_left, hw, run_hw) -> torch.Tensor:
    """The prototypes of the input as given, when it ran centred in a larger canvas: the canvas's prototypes cover
    it at their own scale (1/4 of the input at every stride the exporters use), so the input's part is cut out."""
    if tuple(hw) == tuple(run_hw):
        return protos
    scale_h, scale_w = protos.shape[2] / run_hw[0], protos.shape[3] / run_hw[1]
    y, x = round(top_left[0] * scale_h), round(top_left[1] * scale_w)
    return protos[..., y : y + max(round(hw[0] * scale_h), 1), x : x + max(round(hw[1] * scale_w), 1)]
