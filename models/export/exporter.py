"""Export a trained model for deployment: TorchScript, ONNX, OpenVINO IR and TensorRT engines (CUDA and tensorrt).

Every export holds the inference output only, ``(B, N, 5 + nc)`` boxes in input pixels (xywh, objectness, class
scores, all after sigmoid), and carries its metadata so an inference backend needs nothing else:
``names`` (list of class names), ``stride`` (the largest stride, an int, as YOLOv5 stores it), ``strides`` (every
level's), ``imgsz`` ([h, w] of the export), ``batch``, ``dynamic``, ``half``, ``precision`` (fp32, fp16 or int8),
``calibration_images`` (how many images calibrated an int8 export, else 0) and ``exporter`` (EXPORTER: marks the
export as ours). Where it lives per format: TorchScript: ``config.txt`` (JSON) in the archive's extra files; ONNX:
``metadata_props`` (each value a JSON string); OpenVINO: ``metadata.yaml`` in the model folder; TensorRT: a JSON
header before the engine (models/export/tensorrt.py).

Exports are dynamic in batch, height and width by default, so detect.py and test.py letterbox them to the same
rectangles as the .pt and get the same detections; ``static`` fixes one input shape (imgsz and batch) for runtimes
that need it. ``int8`` quantizes the ONNX and OpenVINO exports (and TensorRT engines) after calibrating on images
of a data YAML's val split (models/export/quantize.py); they are written as ``<stem>_int8.onnx`` and
``<stem>_int8_openvino_model/`` beside the float ones.

Nothing else is ever overwritten or deleted. Each export is written into a scratch folder beside the weights (the
ONNX file that OpenVINO converts from stays there too) and moved into place with one rename when complete. An
existing ``<stem>.onnx``, ``<stem>.torchscript`` or ``<stem>_openvino_model/`` is replaced only when it is an earlier
export of ours, recognised by its metadata (and, for an OpenVINO folder, by holding only .xml, .bin and
metadata.yaml files); anything else there is refused with one line before any work starts.

onnx, onnxruntime and openvino are optional (requirements-export.txt): they are imported only by their exporter.
"""

import importlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import yaml
from torch import nn

from models.export import quantize
from models.export.formats import FORMATS, INT8_FORMATS, MASK_FORMATS, format_of
from models.export.metadata import parse_metadata, read_metadata
from models.export.scratch import scratch_folder
from models.weights.checkpoint import load_model
from utils import downloads
from utils.errors import BackendError, ExportError, QuantizationError
from utils.log import LOGGER

INSTALL_HINT = "pip install -r requirements-export.txt"
DEFAULT_SIZE = 640  # the export size of weights that do not record the size they were trained at
EXPORTER = "yolo-detect export.py"  # in every export's metadata: what a later export may replace
# The metadata keys of our exports from before EXPORTER was written: an export that has them all is ours too.
LEGACY_KEYS = {"names", "stride", "strides", "imgsz", "batch", "dynamic", "half"}


@dataclass
class ExportOptions:
    """How to export: input size (h, w), batch, dynamic axes (the default; False fixes imgsz and batch), FP16 (CUDA
    only), ONNX simplification and opset; INT8 calibrated on calib_images images of the data YAML's val split."""

    imgsz: tuple[int, int] | None = None  # None: the size the weights were trained at (640 when they do not say)
    batch: int = 1
    dynamic: bool = True
    half: bool = False
    simplify: bool = False
    opset: int | None = None
    int8: bool = False
    data: str | Path | None = None
    calib_images: int = quantize.DEFAULT_CALIBRATION_IMAGES
    workspace_gb: float = 4.0  # TensorRT builder memory
    onnx_quantizer: str = "nncf"  # or onnxruntime (quantize_static), for --int8 ONNX exports

    @property
    def precision(self) -> str:
        return "int8" if self.int8 else "fp16" if self.half else "fp32"


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
    scratch: Path | None = None  # the private folder beside the weights where exports are written first
    results: list[Exported] = field(default_factory=list)
    calibration: quantize.CalibrationImages | None = None  # the int8 calibration inputs
    float_onnx: Path | None = None  # a float ONNX of the model, written once for OpenVINO and int8 exports


class InferenceOutput(nn.Module):
    """The model with only its decoded predictions as output: forward returns pred, not (pred, raw maps); a model
    whose task has masks (models/nn/task.py) returns its predictions with each row's mask coefficients appended and
    its prototypes, as YOLOv5's and Ultralytics' segment exports do."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.masks = model.task.masks

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, H, W) in [0, 1] -> (B, N, 5 + nc), or an end-to-end head's final (B, k, 6); with masks
        ((B, N, 5 + nc + nm) or (B, k, 6 + nm), prototypes (B, nm, H/4, W/4))."""
        out = self.model(x)
        if not self.masks:
            return out[0]
        return torch.cat((out[0], out.coefficients.to(out[0].dtype)), 2), out.protos


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
    """What a backend needs beside the graph: class names, the model family (models/nn/family.py), strides, export
    size, batch, dynamic, half, and end2end (YOLO26: the graph outputs final (B, k, 6) detections, run without
    NMS)."""
    strides = [int(s) for s in model.stride.tolist()]
    return {
        "names": list(model.names),
        "family": model.family.name,
        "task": model.task.name,  # a segment export's graph also outputs the prototypes (models/nn/task.py)
        "end2end": model.family.end2end,
        "stride": max(strides),
        "strides": strides,
        "imgsz": list(options.imgsz),
        "batch": options.batch,
        "dynamic": options.dynamic,
        "half": options.half,
        "precision": options.precision,
        "calibration_images": 0,  # set once the calibration images are known
        "exporter": EXPORTER,
    }


def export_torchscript(job: ExportJob, path: Path) -> Path:
    """torch.jit.trace the model into path; metadata as config.txt (JSON) in the archive."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch 2.9+ marks torch.jit deprecated; it still works
        traced = torch.jit.trace(job.model, job.sample, strict=False, check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={"config.txt": json.dumps(job.metadata)})
    return path


def _output_names(masks: bool) -> list[str]:
    """The graph's outputs: the predictions, and a segment model's prototypes (YOLOv5's and Ultralytics' names)."""
    return ["output0", "output1"] if masks else ["output0"]


def _dynamic_axes(dynamic: bool, masks: bool = False) -> dict | None:
    """Batch, height and width of the input (batch and boxes of the output, batch and size of the prototypes) as
    named dynamic axes."""
    if not dynamic:
        return None
    axes = {"images": {0: "batch", 2: "height", 3: "width"}, "output0": {0: "batch", 1: "anchors"}}
    if masks:
        axes["output1"] = {0: "batch", 2: "mask_height", 3: "mask_width"}
    return axes


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
            output_names=_output_names(job.model.masks),
            opset_version=opset,
            dynamic_axes=_dynamic_axes(job.options.dynamic, job.model.masks),
            do_constant_folding=True,
            dynamo=False,
        )


def _set_onnx_metadata(onnx, path: Path, metadata: dict) -> None:
    """metadata as the file's metadata_props (each value a JSON string), replacing any it had."""
    proto = onnx.load(str(path))
    del proto.metadata_props[:]
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.save(proto, str(path))


def export_float_onnx(job: ExportJob, path: Path) -> Path:
    """torch.onnx.export into path, checked with onnx.checker; metadata as metadata_props (JSON strings)."""
    onnx = require("onnx")
    _write_onnx(job, path)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    if job.options.simplify:
        proto = _simplified(proto)
    onnx.save(proto, str(path))
    _set_onnx_metadata(onnx, path, {**job.metadata, "precision": "fp16" if job.options.half else "fp32"})
    return path


def float_onnx(job: ExportJob) -> Path:
    """A float ONNX of the model: this run's ONNX export when it is float, else one written once in the scratch
    folder (an intermediate file, never beside the weights)."""
    done = [r.path for r in job.results if r.format == "onnx" and not job.options.int8]
    if done:
        return done[0]
    if job.float_onnx is None:
        (job.scratch / "intermediate").mkdir()
        job.float_onnx = export_float_onnx(job, job.scratch / "intermediate" / "model.onnx")
    return job.float_onnx


def export_onnx(job: ExportJob, path: Path) -> Path:
    """The ONNX export into path: float, or with --int8 the float graph quantized to QDQ (NNCF or ONNX Runtime)."""
    if not job.options.int8:
        return export_float_onnx(job, path)
    quantize.quantize_onnx(float_onnx(job), path, job.calibration, job.options.onnx_quantizer)
    _set_onnx_metadata(require("onnx"), path, job.metadata)
    return path


def _simplified(proto):
    """The graph through onnxslim when it is installed; otherwise unchanged, with a one-line note."""
    try:
        onnxslim = importlib.import_module("onnxslim")
    except ImportError:
        LOGGER.info("--simplify: onnxslim is not installed, so the ONNX graph is not simplified (pip install onnxslim)")
        return proto
    return onnxslim.slim(proto)


def export_openvino(job: ExportJob, folder: Path) -> Path:
    """openvino.convert_model from a float ONNX export into folder; with --int8 quantized by NNCF first."""
    ov = require("openvino")
    model = ov.convert_model(str(float_onnx(job)))
    if job.options.int8:
        model = quantize.quantize_openvino(model, job.calibration)
    folder.mkdir()
    ov.save_model(model, str(folder / f"{job.weights.stem}.xml"), compress_to_fp16=job.options.half)
    with open(folder / "metadata.yaml", "w", encoding="utf-8") as f:
        yaml.safe_dump(job.metadata, f, sort_keys=False)
    return folder


def export_engine(job: ExportJob, path: Path) -> Path:
    """A TensorRT engine built from a float ONNX export (models/export/tensorrt.py); CUDA and tensorrt only."""
    from models.export import tensorrt

    return tensorrt.build_engine(job, float_onnx(job), path)


def output_path(weights: Path, fmt: str, int8: bool = False) -> Path:
    """Where an export of weights goes: beside them, with YOLOv5's names (int8 ones with _int8 after the stem)."""
    return FORMATS[fmt].path_for(weights, int8)


def _our_metadata(path: Path) -> bool:
    """Whether an export's metadata marks it as ours: EXPORTER, or every key our exports had before it."""
    try:
        raw = read_metadata(path)
        meta = parse_metadata(raw, path)
    except BackendError:
        return False
    return meta["exporter"] == EXPORTER or LEGACY_KEYS <= set(raw)


def _our_folder(folder: Path) -> bool:
    """Whether folder holds nothing but a folder export of ours (OpenVINO, NCNN: its format's files and
    metadata.yaml; CoreML's .mlpackage: its files in its own subfolders, the metadata inside), or nothing at all."""
    fmt = format_of(folder)
    entries = list(folder.rglob("*") if fmt.nested else folder.iterdir())  # rglob does not enter linked folders
    if not entries:
        return True  # replacing an empty folder loses nothing
    for entry in entries:
        if entry.is_symlink() or not (entry.is_file() or (fmt.nested and entry.is_dir())):
            return False
        if entry.is_file() and entry.suffix not in fmt.files and entry.name != "metadata.yaml":
            return False
    return (fmt.nested or (folder / "metadata.yaml").is_file()) and _our_metadata(folder)


def is_our_export(path: Path) -> bool:
    """Whether path is an earlier export of ours, which a new export may replace (a symlink never is)."""
    if path.is_symlink():
        return False
    if format_of(path) is not None and format_of(path).folder:
        return path.is_dir() and _our_folder(path)
    return path.is_file() and _our_metadata(path)


def check_destination(path: Path) -> None:
    """ExportError (one line) when path exists and is not an export of ours: it is never overwritten."""
    if (path.exists() or path.is_symlink()) and not is_our_export(path):
        raise ExportError(f"{path} exists and is not an export of ours: move it away or choose another --weights name")


def install(staged: Path, path: Path, scratch: Path) -> None:
    """Move a finished export from the scratch folder to path with one rename, replacing only our own export."""
    check_destination(path)  # again: something may have appeared there while the export ran
    if not (staged.is_dir() and path.exists()):
        os.replace(staged, path)  # atomic: path holds the earlier export or the new one, never a partial file
        return
    replaced = scratch / f"replaced_{path.name}"  # a folder cannot be renamed over a full one: move ours aside
    os.rename(path, replaced)
    if not _our_folder(replaced):  # a file was added since the check: put everything back
        os.rename(replaced, path)
        raise ExportError(f"{path} changed during the export and is not only ours now: it was left as it is")
    try:
        os.rename(staged, path)
    except OSError:
        os.rename(replaced, path)
        raise


def resolve_weights(weights: str | Path) -> Path:
    """The weights file: as given; a bare name from weights/ (with a log line); an official name downloaded."""
    path = downloads.attempt_download_weights(weights)
    if not path.is_file():
        raise ExportError(f"--weights {weights}: no such file")
    return path


def prepare(
    weights: str | Path, options: ExportOptions, device: torch.device, converted_half: bool = False
) -> ExportJob:
    """Load the weights (refused as detect.py refuses them) and build the wrapped model and sample input (float32
    when converted_half: the formats' converters write FP16 themselves)."""
    weights = Path(weights)
    if not weights.is_file():
        raise ExportError(f"--weights {weights}: no such file")
    model = load_model(weights, device)
    said = "--img" if options.imgsz else "the size the weights record" if model.imgsz else "the default"
    options = replace(options, imgsz=tuple(options.imgsz or [model.imgsz or DEFAULT_SIZE] * 2))
    h, w = options.imgsz  # a static export's input; a dynamic one's default inference size (in its metadata)
    LOGGER.info(f"{model.family.title} model: export size {h}x{w} ({said})")
    stride = max(int(s) for s in model.stride.tolist())
    if any(side % stride for side in options.imgsz):
        raise ExportError(f"--img-size {list(options.imgsz)} must be a multiple of the model's stride {stride}")
    metadata = export_metadata(model, options)
    dtype = torch.float16 if options.half and not converted_half else torch.float32
    wrapped = InferenceOutput(model.to(dtype)).eval()
    for p in wrapped.parameters():
        p.requires_grad_(False)
    sample = torch.zeros(options.batch, 3, *options.imgsz, device=device, dtype=dtype)
    return ExportJob(wrapped, sample, metadata, weights, options)


def check_half(formats: list[str], options: ExportOptions, device: torch.device) -> bool:
    """Whether --half is left to the formats' converters (NCNN, LiteRT: FP16 from a float32 trace, on any device);
    ExportError when --half asks a traced FP16 model of a CPU or formats of both kinds are mixed."""
    if not options.half:
        return False
    converted = [f for f in formats if FORMATS[f].converts_half]
    if converted and len(converted) < len(formats):
        others = [f for f in formats if f not in converted]
        raise ExportError(f"--half: export {', '.join(converted)} and {', '.join(others)} in separate runs")
    if not converted and device.type != "cuda":
        raise ExportError("--half (FP16) export needs a CUDA device: pass --device 0, or drop --half")
    return bool(converted)


def check_int8(formats: list[str], options: ExportOptions) -> list[str]:
    """The calibration images of an --int8 export, each refusal one line before any work starts: no --data, a
    format that is not quantized, a missing quantization package, a data YAML whose split has no images."""
    if not options.int8:
        return []
    calibrated = [f for f in formats if not (f in FORMATS and FORMATS[f].int8_weights_only)]  # CoreML: weights only
    if not options.data and calibrated:
        raise QuantizationError("--int8 needs --data: a data YAML whose val images calibrate the quantization")
    others = [f for f in formats if f not in INT8_FORMATS]
    if others:
        raise QuantizationError(f"--int8 quantizes {', '.join(INT8_FORMATS)} exports, not {others[0]}: drop it")
    if options.half:
        raise QuantizationError("--int8 and --half are exclusive: pick one precision")
    if not calibrated:
        return []
    files = quantize.calibration_files(options.data, options.calib_images)  # a data problem first, with or without
    for fmt in calibrated:  # the quantizer installed (TensorRT's and ExecuTorch's come with their converters)
        if fmt in ("onnx", "openvino"):
            quantize.require_quantizer(fmt, options.onnx_quantizer)
    return files


def check_task(formats: list[str], task) -> None:
    """ExportError (one line, before any export is written) when a format cannot carry the model's task: a segment
    model's prototypes go through TorchScript, ONNX and OpenVINO only, so far."""
    unable = [f for f in formats if task.masks and not FORMATS[f].masks]
    if unable:
        raise ExportError(
            f"--include {unable[0]}: {task.title} models are not supported by {unable[0]} exports yet "
            f"(export them with --include {' '.join(MASK_FORMATS)})"
        )


def export(weights: str | Path, include: list[str], options: ExportOptions, device: torch.device) -> list[Exported]:
    """Export weights to every format in include, beside the weights; one Exported per format.

    A bare weights name missing here is taken from weights/ (official names downloaded), as detect.py does;
    every destination and input is checked before any work starts, and each export is moved into place when
    complete."""
    unknown = [f for f in include if f not in FORMATS]
    if unknown:
        raise ExportError(f"--include {unknown[0]}: unknown format, choose from {', '.join(FORMATS)}")
    formats = list(dict.fromkeys(include))
    if "engine" in formats:
        from models.export import tensorrt

        tensorrt.check_builder(device)
    calibration_files = check_int8(formats, options)
    converted_half = check_half(formats, options, device)
    weights = resolve_weights(weights)
    for fmt in formats:
        check_destination(output_path(weights, fmt, options.int8))
    with scratch_folder(weights) as scratch:
        job = prepare(weights, options, device, converted_half)
        check_task(formats, job.model.model.task)
        job.scratch = Path(scratch)
        if calibration_files:
            auto = options.dynamic  # detect.py's letterbox: a stride-padded rectangle, or the fixed static shape
            job.calibration = quantize.CalibrationImages(
                calibration_files, job.options.imgsz, job.metadata["stride"], auto, progress="Calibrating"
            )
            job.metadata["calibration_images"] = len(calibration_files)
        for fmt in formats:
            start, path = time.perf_counter(), output_path(weights, fmt, options.int8)
            # .to() empties Detect's grid cache, so each trace computes the grids from the input shape, in the graph
            job.model.to(job.sample.dtype)
            with torch.no_grad():
                staged = FORMATS[fmt].write(job, job.scratch / path.name)
            install(staged, path, job.scratch)
            job.results.append(Exported(fmt, path, file_size_mb(path), time.perf_counter() - start))
    return job.results
