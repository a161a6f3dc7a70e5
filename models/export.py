"""Export a trained model for deployment: TorchScript, ONNX and OpenVINO IR (TensorRT needs CUDA and tensorrt).

Every export holds the inference output only, ``(B, N, 5 + nc)`` boxes in input pixels (xywh, objectness, class
scores, all after sigmoid), and carries its metadata so an inference backend needs nothing else:
``names`` (list of class names), ``stride`` (the largest stride, an int, as YOLOv5 stores it), ``strides`` (every
level's), ``imgsz`` ([h, w] of the export), ``batch``, ``dynamic`` and ``half``. Where it lives per format:
TorchScript: ``config.txt`` (JSON) in the archive's extra files; ONNX: ``metadata_props`` (each value a JSON
string); OpenVINO: ``metadata.yaml`` in the model folder.

onnx, onnxruntime and openvino are optional (requirements-export.txt): they are imported only by their exporter.
"""

import importlib
import json
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from torch import nn

from models.checkpoint import load_model
from utils.errors import YoloError
from utils.log import LOGGER

FORMATS = ("torchscript", "onnx", "openvino", "engine")
INSTALL_HINT = "pip install -r requirements-export.txt"


class ExportError(YoloError):
    """An export that cannot be carried out (missing package, wrong device, unusable weights or options)."""


@dataclass
class ExportOptions:
    """How to export: input size (h, w), batch, dynamic axes, FP16 (CUDA only), ONNX simplification and opset."""

    imgsz: tuple[int, int] = (640, 640)
    batch: int = 1
    dynamic: bool = False
    half: bool = False
    simplify: bool = False
    opset: int | None = None


@dataclass
class Exported:
    """One written export: its format, path, size in MB and seconds taken."""

    format: str
    path: Path
    size_mb: float
    seconds: float

    def line(self) -> str:
        """A one-line summary: format, file, size, seconds."""
        return f"{self.format}: {self.path} ({self.size_mb:.1f} MB, {self.seconds:.1f} s)"


@dataclass
class ExportJob:
    """A loaded model ready for export: the wrapped model, a sample input, its metadata and the weights path."""

    model: nn.Module
    sample: torch.Tensor
    metadata: dict
    weights: Path
    options: ExportOptions
    results: list[Exported] = field(default_factory=list)


class InferenceOutput(nn.Module):
    """The model with only its decoded predictions as output: forward returns pred, not (pred, raw maps)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [0, 1] -> (B, N, 5 + nc)."""
        return self.model(x)[0]


def require(package: str):
    """Import an optional export package, or ExportError naming the install command."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise ExportError(f"{package} is not installed: {INSTALL_HINT}") from None


def file_size_mb(path: Path) -> float:
    """Size of a file, or of every file in a folder, in MB."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) / 1e6


def export_metadata(model: nn.Module, options: ExportOptions) -> dict:
    """What a backend needs beside the graph: class names, strides, export size, batch, dynamic, half."""
    strides = [int(s) for s in model.stride.tolist()]
    return {
        "names": list(model.names),
        "stride": max(strides),
        "strides": strides,
        "imgsz": list(options.imgsz),
        "batch": options.batch,
        "dynamic": options.dynamic,
        "half": options.half,
    }


def export_torchscript(job: ExportJob) -> Path:
    """torch.jit.trace the model; metadata as config.txt (JSON) in the archive."""
    path = job.weights.with_suffix(".torchscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch 2.9+ marks torch.jit deprecated; it still works
        traced = torch.jit.trace(job.model, job.sample, strict=False, check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={"config.txt": json.dumps(job.metadata)})
    return path


def _dynamic_axes(dynamic: bool) -> dict | None:
    """Batch, height and width of the input (batch and boxes of the output) as named dynamic axes."""
    if not dynamic:
        return None
    return {"images": {0: "batch", 2: "height", 3: "width"}, "output0": {0: "batch", 1: "anchors"}}


def _write_onnx(job: ExportJob, path: Path) -> None:
    """torch.onnx.export (the TorchScript-based exporter, which keeps the grid computed from the input shape)."""
    opset = job.options.opset or 17
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python values are expected
        torch.onnx.export(
            job.model,
            (job.sample,),
            str(path),
            input_names=["images"],
            output_names=["output0"],
            opset_version=opset,
            dynamic_axes=_dynamic_axes(job.options.dynamic),
            do_constant_folding=True,
            dynamo=False,
        )


def export_onnx(job: ExportJob) -> Path:
    """torch.onnx.export, checked with onnx.checker; metadata as metadata_props (JSON strings)."""
    onnx = require("onnx")
    path = job.weights.with_suffix(".onnx")
    _write_onnx(job, path)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    if job.options.simplify:
        proto = _simplified(proto)
    for key, value in job.metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.save(proto, str(path))
    return path


def _simplified(proto):
    """The graph through onnxslim when it is installed; otherwise unchanged, with a one-line note."""
    try:
        onnxslim = importlib.import_module("onnxslim")
    except ImportError:
        LOGGER.info("--simplify: onnxslim is not installed, so the ONNX graph is not simplified (pip install onnxslim)")
        return proto
    return onnxslim.slim(proto)


def export_openvino(job: ExportJob) -> Path:
    """openvino.convert_model from the ONNX export (written first if absent) into <name>_openvino_model/."""
    ov = require("openvino")
    onnx_path = job.weights.with_suffix(".onnx")
    if not onnx_path.is_file() or not any(r.format == "onnx" for r in job.results):
        onnx_path = export_onnx(job)
    folder = job.weights.parent / f"{job.weights.stem}_openvino_model"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    model = ov.convert_model(str(onnx_path))
    ov.save_model(model, str(folder / f"{job.weights.stem}.xml"), compress_to_fp16=job.options.half)
    with open(folder / "metadata.yaml", "w", encoding="utf-8") as f:
        yaml.safe_dump(job.metadata, f, sort_keys=False)
    return folder


def export_engine(job: ExportJob) -> Path:
    """TensorRT engines are not built here yet: refused with one line on every device."""
    if job.sample.device.type != "cuda":
        raise ExportError("--include engine (TensorRT) needs a CUDA device: pass --device 0")
    require("tensorrt")
    raise ExportError("--include engine (TensorRT) is not supported yet; export onnx and build it with trtexec")


EXPORTERS = {
    "torchscript": export_torchscript,
    "onnx": export_onnx,
    "openvino": export_openvino,
    "engine": export_engine,
}


def prepare(weights: str | Path, options: ExportOptions, device: torch.device) -> ExportJob:
    """Load the weights (refused as detect.py refuses them) and build the wrapped model and sample input."""
    weights = Path(weights)
    if not weights.is_file():
        raise ExportError(f"--weights {weights}: no such file")
    if options.half and device.type != "cuda":
        raise ExportError("--half (FP16) export needs a CUDA device: pass --device 0, or drop --half")
    model = load_model(weights, device)
    stride = max(int(s) for s in model.stride.tolist())
    if any(side % stride for side in options.imgsz):
        raise ExportError(f"--img-size {list(options.imgsz)} must be a multiple of the model's stride {stride}")
    metadata = export_metadata(model, options)
    dtype = torch.float16 if options.half else torch.float32
    wrapped = InferenceOutput(model.to(dtype)).eval()
    for p in wrapped.parameters():
        p.requires_grad_(False)
    sample = torch.zeros(options.batch, 3, *options.imgsz, device=device, dtype=dtype)
    return ExportJob(wrapped, sample, metadata, weights, options)


def export(weights: str | Path, include: list[str], options: ExportOptions, device: torch.device) -> list[Exported]:
    """Export weights to every format in include, beside the weights; one Exported per format."""
    unknown = [f for f in include if f not in EXPORTERS]
    if unknown:
        raise ExportError(f"--include {unknown[0]}: unknown format, choose from {', '.join(FORMATS)}")
    job = prepare(weights, options, device)
    for fmt in dict.fromkeys(include):
        start = time.perf_counter()
        # .to() empties Detect's grid cache, so each trace computes the grids from the input shape, in the graph
        job.model.to(job.sample.dtype)
        with torch.no_grad():
            path = EXPORTERS[fmt](job)
        job.results.append(Exported(fmt, path, file_size_mb(path), time.perf_counter() - start))
    return job.results
