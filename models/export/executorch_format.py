"""ExecuTorch exports: the model through torch.export, lowered to the XNNPACK delegate, run by ExecuTorch's runtime.

An export is a folder, `<stem>_executorch_model/`, holding `model.pte` (the program) and `metadata.yaml` (Ultralytics'
layout). torch.export specialises the anchor grid to the traced shape, so the export is static: --img-size, batch 1
unless --batch-size. YOLO26's end-to-end head exports its one-to-many predictions (run with NMS), as Ultralytics does:
its top-k is not an XNNPACK op. FP32 only.
"""

import warnings
from pathlib import Path

import torch

from models.export.edge import import_runtime, require_converter, without_top_k, write_static_metadata
from models.export.metadata import error_line, openvino_metadata, parse_metadata
from models.export.runtime import Backend
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

PROGRAM = "model.pte"
PTE_ID = b"ET"  # bytes 4-6 of an ExecuTorch flatbuffer's file identifier ("ET12")


def export_executorch(job, folder: Path) -> Path:
    """torch.export the model at the job's input shape, lower it to XNNPACK, write folder/model.pte and
    metadata.yaml."""
    exir = require_converter("executorch.exir", "ExecuTorch")
    xnnpack = require_converter("executorch.backends.xnnpack.partition.xnnpack_partitioner", "ExecuTorch")
    sample = job.sample.float()
    with without_top_k(job, "ExecuTorch's XNNPACK") as metadata, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exported = torch.export.export(job.model.float().eval(), (sample,))
            lowered = exir.to_edge_transform_and_lower(exported, partitioner=[xnnpack.XnnpackPartitioner()])
            program = lowered.to_executorch()
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # torch.export's and exir's own error types
            raise ExportError(f"ExecuTorch could not export the model: {error_line(e)}") from None
    folder.mkdir()
    (folder / PROGRAM).write_bytes(program.buffer)
    write_static_metadata(folder / "metadata.yaml", metadata, sample, "fp32")
    h, w = sample.shape[2:]
    LOGGER.info(f"ExecuTorch: static {sample.shape[0]}x3x{h}x{w} input (torch.export fixes the anchor grid's shape)")
    return folder


def executorch_metadata(folder: Path) -> dict:
    """The metadata.yaml of an ExecuTorch folder ({} when absent), read with the bounded YAML reader."""
    return openvino_metadata(folder)


class ExecuTorchBackend(Backend):
    """An ExecuTorch folder (model.pte, metadata.yaml) run by ExecuTorch's runtime (XNNPACK on the CPU)."""

    kind = "ExecuTorch"

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        super().__init__(path, parse_metadata(executorch_metadata(path), path), device)
        program_file = path / PROGRAM
        if not program_file.is_file():
            raise BackendError(f"{program_file} is missing: an ExecuTorch model is its model.pte (export it again)")
        with open(program_file, "rb") as f:
            if f.read(8)[4:6] != PTE_ID:
                raise BackendError(f"{program_file} is not an ExecuTorch program: no ET flatbuffer header")
        runtime = import_runtime("executorch.runtime")  # after the files' checks, as NCNN's
        try:
            program = runtime.Runtime.get().load_program(program_file)
            self.method = program.load_method("forward")
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # RuntimeError and ValueError with the runtime's own text
            raise BackendError(f"{program_file} could not be loaded by ExecuTorch: {error_line(e)}") from None

    def run(self, x: torch.Tensor) -> torch.Tensor:
        outputs = self.method.execute((x.detach().cpu().float().contiguous(),))
        return outputs[0]
