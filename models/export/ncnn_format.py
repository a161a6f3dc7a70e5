"""NCNN exports: the traced model converted by pnnx (the route Ultralytics takes) and run by the `ncnn` package.

An export is a folder, `<stem>_ncnn_model/`, holding `model.ncnn.param` (the graph, text), `model.ncnn.bin` (the
weights) and `metadata.yaml` (the metadata every export carries). The export takes any height and width (one image
per run, as NCNN runs), so detect.py and test.py give it the .pt's rectangles: pnnx is given two input shapes and
keeps the sides symbolic, and the heads build their grids from their feature maps (edge.tensor_grids) rather than
with arange, a layer NCNN lacks; --static fixes the one shape of --img-size instead. FP32 stores the
weights in float32 and runs without NCNN's fp16/bf16 storage; --half stores float16 weights and runs with fp16
storage (any CPU: the trace stays float32 and pnnx converts). Anchor-free predictions come out as (5 + nc, N), the
layout the head computes in (edge.channel_predictions, `output_layout: channels` in the metadata), and pnnx's graph is
made lean before it is written (lean_param): no transpose, and no Reshape in NCNN's batch mode, which copies its input
element by element.

The .param is checked as text before NCNN reads it (its magic number, counts and line lengths), so a damaged or
hostile file is one line rather than a crash inside the runtime, and the .bin's size is checked against what its
layers need by NCNN's own loader, whose failure is one line too.
"""

import contextlib
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import torch

from models.export.edge import (
    channel_layout,
    channel_predictions,
    import_runtime,
    require_converter,
    rows_of,
    shape_metadata,
    tensor_grids,
    without_top_k,
    write_metadata,
)
from models.export.metadata import openvino_metadata, parse_metadata
from models.export.runtime import Backend
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

PARAM, BIN = "model.ncnn.param", "model.ncnn.bin"
PARAM_MAGIC = "7767517"  # the first line of every NCNN .param
MAX_PARAM_BYTES = 16 << 20  # the graph as text; yolov5x's is ~40 KB
MAX_LAYERS = 100_000
MAX_PARAM_LINE = 64 << 10  # one layer's line: its type, name, blob names and key=value pairs
PNNX_TIMEOUT_S = 1800


def export_ncnn(job, folder: Path) -> Path:
    """Trace the model (batch 1), convert it with pnnx into folder (model.ncnn.param/.bin), shape-dynamic unless
    --static, add metadata.yaml."""
    pnnx = require_converter("pnnx", "NCNN")
    work = (job.scratch / "ncnn_intermediate").resolve()
    work.mkdir()
    sample, dynamic = job.sample[:1].float(), job.options.dynamic
    grids = tensor_grids(job.model) if dynamic else contextlib.nullcontext()
    channels = channel_predictions(job.model)
    with without_top_k(job, "NCNN") as metadata, grids, channels as layout, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated in torch 2.9+ and tracer warnings are expected
        torch.jit.trace(job.model.float(), sample, check_trace=False).save(str(work / "model.pt"))
    command = [pnnx.EXEC_PATH, str(work / "model.pt"), f"inputshape={_shape(sample.shape)}f32"]
    if dynamic:  # a second shape, each side another multiple of the stride: pnnx keeps the sides symbolic
        stride = int(job.metadata["stride"])
        h, w = sample.shape[2:]
        command.append(f"inputshape2={_shape((1, 3, h + stride, w + 2 * stride))}f32")
    command += [f"fp16={int(job.options.half)}"] + [f"{key}={work / name}" for key, name in _PNNX_OUTPUTS.items()]
    result = subprocess.run(command, capture_output=True, text=True, cwd=work, timeout=PNNX_TIMEOUT_S)
    param, weights = work / "model.ncnn.param", work / "model.ncnn.bin"
    if result.returncode != 0 or not param.is_file() or not weights.is_file():
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()] or ["no output"]
        raise ExportError(f"pnnx could not convert the model to NCNN: {lines[-1][:200]}")
    folder.mkdir()
    (folder / PARAM).write_text(lean_param(param.read_text(encoding="utf-8")), encoding="utf-8")
    shutil.move(weights, folder / BIN)
    shape = shape_metadata(sample, job.options.precision, dynamic)
    write_metadata(folder / "metadata.yaml", {**metadata, **layout}, shape)
    h, w = sample.shape[2:]
    said = f"any height and width up to {h}x{w}, one image per run" if dynamic else f"static 1x3x{h}x{w} input"
    LOGGER.info(f"NCNN: {said}")
    return folder


def _shape(dims) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def lean_param(text: str) -> str:
    """pnnx's .param made runnable and fast: torch.ones_like as NCNN's Power (_ONES_LIKE), and before each Reshape
    that takes its sizes from a second blob (YOLO11's attention restoring height and width), a Reshape of its data
    to 2-D. Such a Reshape runs in NCNN's batch mode, which copies a 3-D input element by element (8.6 ms for
    yolo11n's 2x64x400 at one thread, 0.05 ms from 2-D); a flattening Reshape keeps the element order."""
    lines = _ONES_LIKE.sub(_POWER_ONES, text).splitlines()
    out, added = lines[:2], 0
    for line in lines[2:]:
        fields = line.split()
        if len(fields) > 5 and fields[0] == "Reshape" and fields[2] == "2":
            flat = f"{fields[4]}_2d"
            out.append(f"Reshape {fields[1]}_2d 1 1 {fields[4]} {flat} 0=0 1=-1")  # w kept, the rest as h
            line, added = " ".join([*fields[:4], flat, *fields[5:]]), added + 1
        out.append(line)
    layers, blobs = (int(n) for n in out[1].split())
    out[1] = f"{layers + added} {blobs + added}"
    return "\n".join(out) + "\n"


# pnnx leaves torch.ones_like (the anchor-free heads' objectness of 1) unconverted in a shape-dynamic graph: NCNN's
# Power layer, (shift + scale * x) ** power with scale 0 and shift 1, gives the same ones at any shape
_ONES_LIKE = re.compile(r"^torch\.ones_like(\s+\S+\s+1\s+1\s+\S+\s+\S+).*$", re.MULTILINE)
_POWER_ONES = r"Power\1 0=1.0 1=0.0 2=1.0"


# Everything pnnx writes goes into the scratch folder (by default it writes beside the TorchScript file)
_PNNX_OUTPUTS = {
    "pnnxparam": "model.pnnx.param",
    "pnnxbin": "model.pnnx.bin",
    "pnnxpy": "model_pnnx.py",
    "pnnxonnx": "model.pnnx.onnx",
    "ncnnparam": "model.ncnn.param",
    "ncnnbin": "model.ncnn.bin",
    "ncnnpy": "model_ncnn.py",
}


def ncnn_metadata(folder: Path) -> dict:
    """The metadata.yaml of an NCNN folder ({} when absent), read with the bounded YAML reader."""
    return openvino_metadata(folder)


def check_param(path: Path) -> None:
    """BackendError (one line) unless path reads as an NCNN .param: its magic line, then a layer and blob count,
    then at most that many layer lines, each of a bounded length, before NCNN parses it."""
    if not path.is_file():
        raise BackendError(f"{path} is missing: an NCNN model is its .param and .bin (export it again)")
    size = path.stat().st_size
    if size > MAX_PARAM_BYTES:
        raise BackendError(f"{path} is {size} bytes: larger than an NCNN .param of a YOLO model can be")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise BackendError(f"{path} is not an NCNN .param: it is not text") from None
    counts = lines[1].split() if len(lines) > 1 else []
    if not lines or lines[0].strip() != PARAM_MAGIC or len(counts) != 2 or not all(c.isdigit() for c in counts):
        raise BackendError(f"{path} is not an NCNN .param: no '{PARAM_MAGIC}' line and layer/blob counts")
    layers = [line for line in lines[2:] if line.strip()]
    if not 0 < int(counts[0]) <= MAX_LAYERS or len(layers) != int(counts[0]):
        raise BackendError(f"{path} is truncated or damaged: it declares {counts[0]} layers and has {len(layers)}")
    if any(len(line) > MAX_PARAM_LINE or not _LAYER_LINE.match(line) for line in layers):
        raise BackendError(f"{path} is damaged: a layer line is not 'type name inputs outputs ...'")


_LAYER_LINE = re.compile(r"^\S+\s+\S+\s+\d+\s+\d+(\s|$)")


class NcnnBackend(Backend):
    """An NCNN folder (model.ncnn.param, model.ncnn.bin, metadata.yaml) run by the ncnn package, one image per
    extraction, with fp16 storage only for an FP16 export."""

    kind = "NCNN"
    own_threads = True  # NCNN runs on its own thread pool: the Predictor then pre-processes in NumPy

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        raw = ncnn_metadata(path)
        super().__init__(path, parse_metadata(raw, path), device)
        self.channels = channel_layout(raw)
        param, weights = path / PARAM, path / BIN
        check_param(param)
        if not weights.is_file():
            raise BackendError(f"{weights} is missing: an NCNN model is its .param and .bin (export it again)")
        ncnn = import_runtime("ncnn")  # after the files' checks: a damaged export says so with or without it
        net = ncnn.Net()
        half = self.precision == "fp16"
        for option in ("use_fp16_packed", "use_fp16_storage"):
            setattr(net.opt, option, half)
        for option in ("use_fp16_arithmetic", "use_bf16_storage", "use_bf16_packed"):
            setattr(net.opt, option, False)  # float32 arithmetic: an FP32 export gives the .pt's numbers
        net.opt.num_threads = torch.get_num_threads()
        if net.load_param(str(param)) != 0:
            raise BackendError(f"{param} could not be read by NCNN (a layer type it lacks, or a damaged file)")
        if net.load_model(str(weights)) != 0:
            raise BackendError(f"{weights} is truncated or does not belong to {param.name}: NCNN could not load it")
        inputs, outputs = net.input_names(), net.output_names()
        if len(inputs) != 1 or len(outputs) != 1:
            raise BackendError(f"{path} is not a YOLO export: it has {len(inputs)} inputs and {len(outputs)} outputs")
        self.ncnn, self.net, self.input_name, self.output_name = ncnn, net, inputs[0], outputs[0]

    def run(self, x: torch.Tensor) -> torch.Tensor:
        outputs = [self._extract(image) for image in x.detach().cpu().float().numpy()]
        # one image (as detect.py and test.py run NCNN): its array as it is, a (B, C, N) output as a view
        return rows_of(torch.from_numpy(outputs[0][None] if len(outputs) == 1 else np.stack(outputs)), self.channels)

    def _extract(self, image: np.ndarray) -> np.ndarray:
        """One (3, H, W) image through the net; NCNN's Mat is cloned because it would only borrow the array."""
        with self.net.create_extractor() as extractor:
            extractor.input(self.input_name, self.ncnn.Mat(np.ascontiguousarray(image)).clone())
            status, out = extractor.extract(self.output_name)
            if status != 0:
                raise BackendError(f"{self.path}: NCNN could not run the graph (status {status})")
            return np.array(out, dtype=np.float32)
