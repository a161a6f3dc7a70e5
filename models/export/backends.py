"""Exported models as inference backends: TorchScript, ONNX Runtime and OpenVINO behind one interface.

load_backend(path, device) returns a Backend: called on a (B, 3, H, W) float tensor in [0, 1] it returns
(predictions (B, N, 5 + nc) on the input's device, None), as a PyTorch Model in eval mode does (a segment export:
MaskOutputs, with each row's mask coefficients and the prototypes, as the segment model gives them), and it carries
names, stride, fixed_shape ((h, w) of a static export, None for a dynamic one), batch (a fixed batch or None) and
kind. The export's own metadata (names, stride, imgsz, batch, dynamic) is all it needs. Backends run in the
precision they were exported in; ONNX Runtime and OpenVINO use torch's thread count so speeds compare fairly.
"""

import functools
import importlib
import importlib.util
import os
import threading
from pathlib import Path

import numpy as np
import torch

from models.export.formats import FORMATS, format_of
from models.export.metadata import (
    check_openvino_ir,
    error_line,
    onnx_metadata,
    openvino_metadata,
    parse_metadata,
    torchscript_metadata,
)
from models.export.runtime import Backend, import_optional
from utils.data.cache import user_cache_dir
from utils.downloads import attempt_download_weights
from utils.errors import BackendError
from utils.log import LOGGER
from utils.torch_utils import cpu_supports_bf16, prefers_channels_last


class TorchScriptBackend(Backend):
    """A torch.jit export with its metadata in the extra file config.txt."""

    kind = "TorchScript"

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        super().__init__(path, parse_metadata(torchscript_metadata(path), path), device)  # archive sizes checked
        try:
            module = torch.jit.load(str(path), map_location=device)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # torch.jit.Error is not a RuntimeError
            raise BackendError(f"{path} is not a TorchScript file: {error_line(e)}") from None
        self.module = module.eval()
        floats = [p.dtype for p in module.parameters() if p.is_floating_point()]
        self.dtype = floats[0] if floats else torch.float32
        # the device's preferred layout, as utils.torch_utils uses for PyTorch models (several times faster on CPU)
        self.channels_last = prefers_channels_last(device)
        if self.channels_last:
            self.module.to(memory_format=torch.channels_last)
        if self.fixed_shape:  # the profiling executor optimises after its first runs: pay that here, not per image
            with torch.inference_mode():  # as the Predictor runs; under no_grad alone it stayed slow for 5+ runs
                for _ in range(3):
                    self.checked_run(torch.zeros(self.batch, 3, *self.fixed_shape, device=device))

    def run(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, self.dtype)
        out = self.module(x.contiguous(memory_format=torch.channels_last) if self.channels_last else x)
        return self.outputs(list(out)) if isinstance(out, (list, tuple)) else out


def _check_outputs(path, shapes: list[list], width: int, masks: bool = False) -> None:
    """BackendError unless the graph's first output is (B, N, width), or for a segment export (masks) (B, N, width
    + k) and a second (B, k, h, w): k mask coefficients per row, k prototypes (symbolic dimensions pass)."""
    shape, coefs = shapes[0], None
    if masks:
        protos = shapes[1] if len(shapes) > 1 else []
        if len(protos) != 4:
            raise BackendError(f"{path} records the task segment, but its graph has no (batch, masks, h, w) output")
        coefs = protos[1]
        width = width + coefs if isinstance(coefs, int) else None
    last = shape[-1] if shape else None
    if len(shape) != 3 or (isinstance(last, int) and width is not None and last != width):
        expected = f"{width}" if not masks else f"{width - coefs} + {coefs} mask coefficients"
        raise BackendError(
            f"{path} is not a YOLO export: its output has shape {list(shape)}, expected (batch, boxes, {expected})"
        )


class OnnxBackend(Backend):
    """An ONNX file run by ONNX Runtime (CUDA when the device is CUDA and the provider exists, else CPU)."""

    kind = "ONNX Runtime"
    own_threads = True  # runs on its own thread pool: the Predictor then pre-processes in NumPy, not torch

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        ort = import_optional("onnxruntime")
        super().__init__(path, parse_metadata(onnx_metadata(path), path), device)  # before the graph is loaded
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        providers = ["CPUExecutionProvider"]
        if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        try:
            session = ort.InferenceSession(str(path), options, providers=providers)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # onnxruntime raises its own exception types for unreadable graphs
            raise BackendError(f"{path} is not a readable ONNX model: {error_line(e)}") from None
        _check_outputs(path, [o.shape for o in session.get_outputs()], self.output_width, self.task.masks)
        self.session, self.input_name = session, session.get_inputs()[0].name
        self.numpy_dtype = np.float16 if "float16" in session.get_inputs()[0].type else np.float32

    def run(self, x: torch.Tensor) -> torch.Tensor:
        array = x.detach().cpu().numpy().astype(self.numpy_dtype, copy=False)
        return self.outputs(self.session.run(None, {self.input_name: array}))


class OpenVinoBackend(Backend):
    """An OpenVINO IR folder (model .xml + .bin, metadata.yaml) compiled for the CPU."""

    kind = "OpenVINO"
    own_threads = True  # runs on its own thread pool: the Predictor then pre-processes in NumPy, not torch
    last_line = True
    uint8_input = True  # see _uint8_input

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):
        ov = import_optional("openvino")
        xmls = sorted(path.glob("*.xml"))
        if not xmls:
            raise BackendError(f"{path} holds no OpenVINO .xml model: export it with export.py --include openvino")
        super().__init__(path, parse_metadata(openvino_metadata(path), path), device)
        check_openvino_ir(xmls[0])
        # A dynamic INT8 export runs a batch one image at a time: OpenVINO grows its buffers for each larger input
        # shape, and at test.py's batches of 16 (COCO128, 640) they came as 550k page faults, 3.5 s of system time,
        # with 2.0 s more on every later pass; one image at a time, 18k faults and 0.2 s, at the same user time (the
        # same images, as 1-image runs: 6.6 against 6.3-6.6 CPU s, load 5-12).
        if not self.fixed_shape and self.precision == "int8":
            self.images_per_run = 1
        core = openvino_core()
        model = _openvino_call(core.read_model, xmls[0], "could not be read by OpenVINO", str(xmls[0]))
        shapes = [[d.get_length() if d.is_static else None for d in o.partial_shape] for o in model.outputs]
        _check_outputs(path, shapes, self.output_width, self.task.masks)
        model = _uint8_input(ov, model)
        # f32 as exported unless --bf16 asks for bfloat16 (OpenVINO's own default on CPUs with AMX or AVX512-BF16)
        precision = "bf16" if bf16 and cpu_supports_bf16() else "f32"
        if bf16 and precision == "f32":
            LOGGER.warning("WARNING: --bf16 needs a CPU with AVX512-BF16 or AMX; this one has neither, running float32")
        self.kind = f"OpenVINO ({precision})"
        config = {"INFERENCE_NUM_THREADS": torch.get_num_threads(), "INFERENCE_PRECISION_HINT": precision}
        # Threads not pinned to cores, as torch's are not: on a CPU shared with other jobs a pinned thread waits for
        # its busy core (yolov5n INT8 at load 15 on 2 cores, median of 6-8 alternating passes: 0.90x the pinned
        # time for one image, 0.92x for a batch of 16)
        config["ENABLE_CPU_PINNING"] = False
        if self.images_per_run == 1 and torch.get_num_threads() > 1:
            # two images run side by side, each on half the threads (OpenVINO's streams), rather than each on all:
            # the threads of one image wait for one another (yolov5n: 45 ms/image on 1 thread, 30 on 2, so a quarter
            # of the 2-thread CPU is waiting); test.py's batches and detect.py's images, started one ahead
            # (utils.infer.sources.read_ahead), keep both streams busy. Two, not one per thread: detect.py has two
            # images in flight. yolov5n INT8 on COCO128, 2 threads, against one stream, alternating, load 5-7: detect.py
            # 12.7 against 14.1 CPU s, test.py 19.3 against 26.2.
            self.parallel_runs = config["NUM_STREAMS"] = 2
        self.config = self.cached(config)
        self.compile = functools.partial(_openvino_call, core.compile_model, xmls[0], "could not be compiled", model)
        self.compiled = {}  # side by side (or the only one) -> its compiled model, keyed as in _compiled
        if self.parallel_runs > 1:
            # compiled on one of the runtime's threads (OpenVINO lets go of the GIL meanwhile): detect.py sets up and
            # reads its first images (utils.infer.sources.read_ahead) while the other core would idle; a failure is
            # raised, as one line, by the first run
            self.compiling = self.thread_pool().submit(self.compile, "CPU", self.config)
        else:
            self.compiled[True] = self.compile("CPU", self.config)
        self.compile_lock = threading.Lock()
        self.requests = threading.local()  # .by_model: id(compiled model) -> this thread's infer request on it
        self.lone_runs = 0  # runs outside the runtime's pool (see _compiled)

    def _compiled(self, side_by_side: bool):
        """The compiled model for a run with others beside it (in the runtime's pool) or alone. One image alone (a
        Detector call, a live stream's frame) would run on one stream's half of the threads, about 1.5x its time on
        all of them on 2 cores: it gets a model of one stream, compiled on the second such run. The first lone run
        runs on the two-stream model: in detect.py it is the Predictor's warm-up, its only lone run, for which a
        second compilation was paid before (warm-up and first image 0.38-0.43 against 0.29-0.31 CPU s now, the
        compiled models in the cache, 2 threads, load 5)."""
        if not side_by_side:
            self.lone_runs += 1
            side_by_side = self.lone_runs == 1
        if side_by_side and True not in self.compiled:
            self.compiled[True] = self.compiling.result()
        if side_by_side not in self.compiled:
            with self.compile_lock:
                if side_by_side not in self.compiled:
                    alone = {k: v for k, v in self.config.items() if k != "NUM_STREAMS"}
                    self.compiled[side_by_side] = self.compile("CPU", alone)
        return self.compiled[side_by_side]

    def run(self, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        array = np.ascontiguousarray(x.detach().cpu().numpy())  # uint8 (Backend._forward): read in place
        side_by_side = self.parallel_runs == 1 or getattr(self.side_by_side, "on", False)
        model = self._compiled(side_by_side)
        requests = self.requests.__dict__.setdefault("by_model", {})  # this thread's: runs side by side need their own
        if id(model) not in requests:
            requests[id(model)] = model.create_infer_request()
        request = requests[id(model)]
        # the predictions (and a segment model's prototypes); share_inputs: OpenVINO reads the array in place
        # instead of copying it into its own tensor first; share_outputs: its output tensors as they are, valid until
        # the thread's next run
        return self.outputs(request.infer([array], share_inputs=True, share_outputs=shared).to_tuple())

    def run_shared(self, x: torch.Tensor) -> torch.Tensor:
        """run(x) on OpenVINO's own output buffers: test.py's batches of 16, run one image at a time and each copied
        into the batch's outputs, no longer pay a copy per image (yolov5n INT8, 16 images at 672x672: 1.45 against
        1.66 CPU s, mostly system time for the 10 MB arrays mapped and unmapped, with the concatenation)."""
        return self.run(x, shared=True)

    @staticmethod
    def cached(config: dict) -> dict:
        """config with OpenVINO's model cache in the user cache folder ($YOLO_CACHE_DIR or ~/.cache/yolo)/openvino,
        which a run creates: compiling yolov5n's INT8 export took 1.0-1.5 s from the cache against 3.5-4.5 s without
        (load 13, 2 cores), paid by every command. Not in the export's folder: a re-export replaces only a folder
        that holds nothing but the model and its metadata. No cache where that folder cannot be made (read-only)."""
        folder = user_cache_dir() / "openvino"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return config
        return {**config, "CACHE_DIR": str(folder)} if os.access(folder, os.W_OK) else config


@functools.cache
def openvino_core():
    """The process's one OpenVINO Core, kept to its end. Each Core's CPU plugin gives the thread that first compiles
    with it an alternate signal stack of its own and, when that Core is freed, puts back the stack it found and
    unmaps its own: with two Cores freed in the order they were made, the thread was left on an unmapped stack, and
    the next signal handled in Python there (Ctrl-C, a DataLoader worker's SIGCHLD) killed the process with a
    SIGSEGV and no traceback (tests/models/export/test_backends.py runs that order)."""
    return import_optional("openvino").Core()


def _uint8_input(ov, model):
    """model taking uint8 images (0-255) and turning them into its [0, 1] float input itself: the engines give it
    their uint8 batches as they are (Backend.uint8_input), so no float32 copy of each batch is made in torch, and
    the conversion runs in the compiled graph, on OpenVINO's threads (at test.py's batches of 16 on COCO128, the
    uint8 -> float pass was 7% of the main thread's time). Each value is looked up in a table of k / 255 (a graph
    built once, when the model is built): a scale step is folded into the first convolution's weights, which moved
    test.py's INT8 mAP50-95 by 0.0003 (0.3661 against 0.3664); the table gives the float input bit for bit, so the
    outputs are the float path's exactly."""
    from openvino import opset13 as ops

    table = ops.constant(np.arange(256, dtype=np.float32) / np.float32(255))  # as torch's and NumPy's division

    def looked_up(images):
        return ops.gather(table, ops.convert(images, ov.Type.i32), ops.constant(np.int32(0))).output(0)

    steps = ov.preprocess.PrePostProcessor(model)
    steps.input().tensor().set_element_type(ov.Type.u8)
    steps.input().preprocess().custom(looked_up)
    return steps.build()


def _openvino_call(function, xml: Path, failed: str, *args):
    """function(*args), OpenVINO's multi-line RuntimeError (a bad .xml/.bin pair, out of memory) as one line."""
    try:
        return function(*args)
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:
        raise BackendError(f"{xml} {failed}: {error_line(e, last=True)}") from None


def engine_backend(path: Path, device: torch.device, bf16: bool = False) -> Backend:
    """A TensorRT engine (models/export/tensorrt.py), which needs CUDA and tensorrt: one line when either is missing."""
    if importlib.util.find_spec("tensorrt") is None:
        raise BackendError(f"{path}: TensorRT engines need CUDA and the tensorrt package (pip install tensorrt)")
    if device.type != "cuda":
        raise BackendError(f"{path}: TensorRT engines need CUDA and tensorrt; pass --device 0")
    from models.export.tensorrt import TensorRTBackend

    return TensorRTBackend(path, device)


def check_exported(paths: list, half: bool | None, bf16: bool, augment: bool) -> None:
    """BackendError for what exported weights cannot do (ensembles, TTA); a warning for ignored precision flags."""
    if len(paths) > 1:
        listed = " ".join(map(str, paths))
        raise BackendError(f"--weights {listed}: ensembles take .pt weights only, not exported models")
    if augment:
        raise BackendError(f"--augment (test-time augmentation) takes .pt weights only, not {paths[0]}")
    if half or (bf16 and not format_of(paths[0]).bf16):  # OpenVINO alone can run an f32 export in bfloat16
        flag = "--half" if half else "--bf16"
        LOGGER.warning(f"WARNING: {flag} is ignored for {paths[0]}: exported models run in their export precision")


def load_exported(
    paths: list, device: torch.device, half: bool | None = None, bf16: bool = False, augment: bool = False
) -> Backend:
    """The one exported model of detect.py, test.py and the Detector: flags checked, a bare name found in weights/
    (as .pt names are), run as exported (no fusing, half or channels-last), one log line."""
    check_exported(paths, half, bf16, augment)
    path = attempt_download_weights(paths[0])
    backend = load_backend(path, device, bf16)
    LOGGER.info(f"Model {path}: {describe_backend(backend)}, {device}")
    return backend


def describe_backend(backend: Backend) -> str:
    """'ONNX Runtime backend, 80 classes, static 1x3x640x640 input (square letterbox)' for the log."""
    if backend.fixed_shape:
        h, w = backend.fixed_shape
        shape = f"static {backend.batch}x3x{h}x{w} input (square letterbox at {h}x{w}, smaller inputs padded to it)"
    else:
        step = backend.shape_step
        shape = "dynamic input (rectangular letterbox)" + (f", one image padded to multiples of {step}" if step else "")
    precision = backend.precision
    if precision == "int8":
        precision += f" (calibrated on {backend.calibration_images} images)"
    return f"{backend.kind} backend, {precision}, {len(backend.names)} classes, {shape}"


def load_backend(path: str | Path, device: str | torch.device = "cpu", bf16: bool = False) -> Backend:
    """The Backend for an exported model, chosen by its format (models/export/formats.py); BackendError (one line)
    when it cannot run.

    bf16 runs an OpenVINO model in bfloat16 on CPUs that support it; other formats run as exported."""
    path, device = Path(str(path).rstrip("/\\")), torch.device(device)
    if not path.exists():
        raise BackendError(f"weights file not found: {path}")
    fmt = format_of(path)
    if fmt is None:
        suffixes = ", ".join(
            f"{'a *' if f.folder else ''}{f.suffix}{' folder' if f.folder else ''}" for f in FORMATS.values()
        )
        raise BackendError(f"{path}: unknown export format (use .pt, {suffixes})")
    if fmt.folder != path.is_dir():
        raise BackendError(f"{path} is not {'a folder' if fmt.folder else 'a file'}: not a {fmt.name} export of ours")
    backend = fmt.load_backend(path, device, bf16)
    if backend.task.masks and not fmt.masks:  # export.py refuses to write one: its metadata was edited
        raise BackendError(f"{path}: {fmt.name} exports of {backend.task.title} models are not supported yet")
    return backend
