"""The export formats, one record each: its --include name, what its file or folder name ends with, whether --int8
quantizes it and whether it can run a float export in bfloat16, and where its writer, its metadata reader and its
backend are. A new format is one entry here, its writer (models/export/exporter.py or a module of its own) and its
backend (models/export/backends.py or a module of its own).

The writer, reader and backend are named as "module:attribute" and imported on first use: the optional runtimes
(onnx, onnxruntime, openvino, tensorrt, ncnn, ...) stay unimported until a format needs them, and this table imports
none of the modules it names."""

import importlib
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ExportFormat:
    """One export format."""

    name: str  # export.py --include name
    suffix: str  # the end of the file's name (.onnx) or, for a folder, of the folder's name (_openvino_model)
    folder: bool  # an export that is a folder of files
    int8: bool  # --int8 quantizes it
    bf16: bool  # --bf16 can run its float export in bfloat16 (other formats run as exported)
    writer: str  # (ExportJob, staged path) -> written path
    metadata: str  # (path) -> the raw metadata dict, read within bounds
    backend: str  # (path, device, bf16) -> a models.export.runtime.Backend
    files: tuple[str, ...] = ()  # a folder export's file suffixes (with metadata.yaml, all that one of ours holds)
    static: bool = False  # its runtime takes one input shape: exported at --img-size, batch 1, whatever --dynamic
    converts_half: bool = False  # --half: its converter writes FP16 from a float32 trace, on any device
    int8_weights_only: bool = False  # --int8 quantizes the weights alone: no calibration images, no --data
    nested: bool = False  # a folder export with subfolders of its own (CoreML's .mlpackage)
    runs_on: str = ""  # what its runtime needs beyond the packages: "cuda" (TensorRT), "macos" (CoreML)
    masks: bool = False  # its writer and backend carry a segment model's prototypes (models/nn/task.py) too

    def path_for(self, weights: Path, int8: bool = False) -> Path:
        """Where an export of weights goes: beside them, with YOLOv5's names (int8 ones with _int8 after the stem)."""
        return weights.parent / f"{weights.stem}{'_int8' if int8 else ''}{self.suffix}"

    def matches(self, path: str | Path) -> bool:
        """Whether path names an export of this format (by its name; a trailing slash is allowed)."""
        return str(path).rstrip("/\\").endswith(self.suffix)

    def write(self, job, path: Path) -> Path:
        return _resolve(self.writer)(job, path)

    def read_metadata(self, path: Path) -> dict:
        return _resolve(self.metadata)(path)

    def load_backend(self, path: Path, device, bf16: bool = False):
        return _resolve(self.backend)(path, device, bf16)

    def cannot_run_here(self, device) -> str:
        """Why this machine cannot run this format's exports, by its runs_on ('' when nothing stands in the way but
        perhaps a package, which its backend names)."""
        if self.runs_on == "cuda" and getattr(device, "type", str(device)) != "cuda":
            return f"{self.name} runs on CUDA only: pass --device 0 on a machine with a GPU and tensorrt"
        if self.runs_on == "macos" and platform.system() != "Darwin":
            return f"{self.name} runs on macOS only (this is {platform.system()})"
        return ""


def _resolve(ref: str):
    """The attribute a "module:attribute" reference names, imported now."""
    module, attribute = ref.split(":")
    return getattr(importlib.import_module(module), attribute)


_EXPORTER, _METADATA, _BACKENDS = "models.export.exporter", "models.export.metadata", "models.export.backends"
FORMATS = {
    f.name: f
    for f in (
        ExportFormat(
            "torchscript",
            ".torchscript",
            folder=False,
            int8=False,
            bf16=False,
            writer=f"{_EXPORTER}:export_torchscript",
            metadata=f"{_METADATA}:torchscript_metadata",
            backend=f"{_BACKENDS}:TorchScriptBackend",
            masks=True,
        ),
        ExportFormat(
            "onnx",
            ".onnx",
            folder=False,
            int8=True,
            bf16=False,
            writer=f"{_EXPORTER}:export_onnx",
            metadata=f"{_METADATA}:onnx_metadata",
            backend=f"{_BACKENDS}:OnnxBackend",
            masks=True,
        ),
        ExportFormat(
            "openvino",
            "_openvino_model",
            folder=True,
            int8=True,
            bf16=True,
            writer=f"{_EXPORTER}:export_openvino",
            metadata=f"{_METADATA}:openvino_metadata",
            backend=f"{_BACKENDS}:OpenVinoBackend",
            files=(".xml", ".bin"),
            masks=True,
        ),
        ExportFormat(
            "engine",
            ".engine",
            folder=False,
            int8=True,
            bf16=False,
            writer=f"{_EXPORTER}:export_engine",
            metadata=f"{_METADATA}:engine_metadata",
            backend=f"{_BACKENDS}:engine_backend",
            runs_on="cuda",
        ),
        ExportFormat(
            "ncnn",
            "_ncnn_model",
            folder=True,
            int8=False,
            bf16=False,
            writer="models.export.ncnn_format:export_ncnn",
            metadata="models.export.ncnn_format:ncnn_metadata",
            backend="models.export.ncnn_format:NcnnBackend",
            files=(".param", ".bin"),
            converts_half=True,
        ),
        ExportFormat(
            "litert",
            ".tflite",
            folder=False,
            int8=True,
            bf16=False,
            writer="models.export.litert_format:export_litert",
            metadata="models.export.litert_format:litert_metadata",
            backend="models.export.litert_format:LiteRTBackend",
            converts_half=True,
        ),
        ExportFormat(
            "executorch",
            "_executorch_model",
            folder=True,
            int8=True,
            bf16=False,
            writer="models.export.executorch_format:export_executorch",
            metadata="models.export.executorch_format:executorch_metadata",
            backend="models.export.executorch_format:ExecuTorchBackend",
            files=(".pte",),
        ),
        ExportFormat(
            "coreml",
            ".mlpackage",
            folder=True,
            int8=True,
            bf16=False,
            writer="models.export.coreml_format:export_coreml",
            metadata="models.export.coreml_format:coreml_metadata",
            backend="models.export.coreml_format:CoreMLBackend",
            files=(".json", ".mlmodel", ".bin"),
            static=True,
            converts_half=True,
            int8_weights_only=True,
            nested=True,
            runs_on="macos",
        ),
    )
}
INT8_FORMATS = tuple(name for name, f in FORMATS.items() if f.int8)
MASK_FORMATS = tuple(name for name, f in FORMATS.items() if f.masks)


def format_of(path: str | Path) -> ExportFormat | None:
    """The export format a path names, by its name; None for anything else (.pt weights)."""
    return next((f for f in FORMATS.values() if f.matches(path)), None)


def is_backend_path(path: str | Path) -> bool:
    """True for weights that an exported backend runs (.torchscript, .onnx, .engine, *_openvino_model folders)."""
    return format_of(path) is not None
