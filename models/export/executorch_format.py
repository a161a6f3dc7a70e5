"""ExecuTorch exports: the model through torch.export, lowered to the XNNPACK delegate, run by ExecuTorch's runtime.

An export is a folder, `<stem>_executorch_model/`, holding `model.pte` (the program) and `metadata.yaml` (Ultralytics'
layout). The export takes any height and width that are multiples of the stride, up to --img-size plus one stride,
one image per run, so detect.py and test.py give it the .pt's rectangles: torch.export is given symbolic sides
(`Dim`) and the heads build their grids from their feature maps (edge.tensor_grids), since a grid cached per shape
cannot be keyed by a symbolic size; the grids' unsqueezes stay out of XNNPACK, whose reshape takes one symbolic
dimension only. --static fixes --img-size and --batch-size instead. YOLO26's end-to-end head exports its one-to-many
predictions (run with NMS), as Ultralytics does: its top-k is not an XNNPACK op.

--int8 --data: post-training quantization by torch.ao's PT2E flow with XNNPACK's quantizer (int8 activations,
per-channel symmetric int8 weights), calibrated on the data YAML's val images letterboxed as detect.py does; the
stem (models/export/pt2e.py: FLOAT_DEPTH) and everything after the last convolutions (the head's 1x1 convolutions,
sigmoid, box decoding) stay in float, so confidences stay calibrated.
"""

import contextlib
import warnings
from pathlib import Path

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
from models.export.metadata import error_line, openvino_metadata, parse_metadata
from models.export.pt2e import calls_per_image, int8_quantizer
from models.export.quantize import CalibrationImages
from models.export.runtime import Backend
from models.export.xnnpack_graph import delegable_model, delegable_ops, ones_as_arithmetic, sizes_from_input
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

PROGRAM = "model.pte"
PTE_ID = b"ET"  # bytes 4-6 of an ExecuTorch flatbuffer's file identifier ("ET12")


def export_executorch(job, folder: Path) -> Path:
    """torch.export the model (shape-dynamic unless --static), lower it to XNNPACK, write folder/model.pte and
    metadata.yaml."""
    exir = require_converter("executorch.exir", "ExecuTorch")
    xnnpack = require_converter("executorch.backends.xnnpack.partition.xnnpack_partitioner", "ExecuTorch")
    configs = require_converter("executorch.backends.xnnpack.partition.config", "ExecuTorch")
    fold = require_converter("executorch.exir.passes.constant_prop_pass", "ExecuTorch").constant_prop_pass
    dynamic = job.options.dynamic
    sample = job.sample[:1].float() if dynamic else job.sample.float()
    delegated = [c for c in configs.ALL_PARTITIONER_CONFIGS if c is not configs.UnsqueezeCopyConfig or not dynamic]
    model, int8 = job.model.float().eval(), job.options.int8
    grids = tensor_grids(model) if dynamic else contextlib.nullcontext()
    layout = channel_predictions(model)
    # FP32: rewritten so that one XNNPACK delegate holds the graph (xnnpack_graph); INT8 as PT2E quantizes it
    delegable = contextlib.nullcontext() if int8 else delegable_model(model, sample, constant_grids=not dynamic)
    passes = [] if int8 else [delegable_ops]
    with without_top_k(job, "ExecuTorch's XNNPACK") as metadata, grids, layout as channels, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            shapes = _dynamic_sides(sample, int(job.metadata["stride"])) if dynamic else None
            with delegable:
                exported = torch.export.export(model, (sample,), dynamic_shapes=shapes)
            exported = _quantized(exported, job.calibration, sample, shapes) if int8 else _folded(exported, fold)
            partitioner = xnnpack.XnnpackPartitioner(configs=delegated)
            edge = exir.to_edge_transform_and_lower(exported, transform_passes=passes, partitioner=[partitioner])
            program = edge.to_executorch()
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as e:  # torch.export's and exir's own error types
            raise ExportError(f"ExecuTorch could not export the model: {error_line(e)}") from None
    folder.mkdir()
    (folder / PROGRAM).write_bytes(program.buffer)
    precision = "int8" if job.options.int8 else "fp32"  # a --half run on CUDA exports the float model too
    write_metadata(folder / "metadata.yaml", {**metadata, **channels}, shape_metadata(sample, precision, dynamic))
    h, w = sample.shape[2:]
    said = f"sides multiples of {job.metadata['stride']} up to {h}x{w} plus one stride, one image per run"
    LOGGER.info(f"ExecuTorch: {said if dynamic else f'static {sample.shape[0]}x3x{h}x{w} input'}")
    return folder


def _folded(exported: torch.export.ExportedProgram, fold) -> torch.export.ExportedProgram:
    """An FP32 program's constants folded by fold (exir's constant_prop_pass: DFL.last_dim's view of the bins
    becomes the constant weight XNNPACK's linear layer needs) and its ones_like ops as arithmetic."""
    return ones_as_arithmetic(fold(exported))


def _dynamic_sides(sample: torch.Tensor, stride: int) -> tuple[dict, ...]:
    """torch.export's dynamic_shapes for the input: height and width any multiple of stride up to the sample's plus
    one stride (test.py's rectangular batches at 640 reach 672: half a stride of padding each side)."""
    h, w = (side // stride + 1 for side in sample.shape[2:])
    return ({2: stride * torch.export.Dim("rows", min=1, max=h), 3: stride * torch.export.Dim("cols", min=1, max=w)},)


def _quantized(exported, images: CalibrationImages, sample: torch.Tensor, shapes) -> torch.export.ExportedProgram:
    """The exported program quantized to int8 by XNNPACK's PT2E quantizer, calibrated on images (one forward pass
    each through the observed graph), exported again with the same input shapes for lowering; a shape-dynamic one
    reads its sizes off the input (xnnpack_graph.sizes_from_input: else YOLO11's and YOLO26's attention left a
    quantized convolution outside XNNPACK, and the export failed)."""
    xnnpack = require_converter("executorch.backends.xnnpack.quantizer.xnnpack_quantizer", "ExecuTorch")
    pt2e = require_converter("torchao.quantization.pt2e.quantize_pt2e", "ExecuTorch INT8 (torchao)")
    graph = exported.module()
    quantizer = int8_quantizer(xnnpack.XNNPACKQuantizer, xnnpack, graph)
    observed = pt2e.prepare_pt2e(graph, quantizer)
    calls_per_image(observed)
    for array in images:
        image = torch.from_numpy(array)
        observed(image if shapes else image.expand(len(sample), -1, -1, -1))  # a static export's batch
    LOGGER.info(f"ExecuTorch INT8: calibrated on {len(images)} images; the stem and the last convolutions in float")
    quantized = torch.export.export(pt2e.convert_pt2e(observed), (sample,), dynamic_shapes=shapes)
    return sizes_from_input(quantized) if shapes else quantized


def executorch_metadata(folder: Path) -> dict:
    """The metadata.yaml of an ExecuTorch folder ({} when absent), read with the bounded YAML reader."""
    return openvino_metadata(folder)


class ExecuTorchBackend(Backend):
    """An ExecuTorch folder (model.pte, metadata.yaml) run by ExecuTorch's runtime (XNNPACK on the CPU)."""

    kind = "ExecuTorch"

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        raw = executorch_metadata(path)
        super().__init__(path, parse_metadata(raw, path), device)
        self.channels = channel_layout(raw)
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
        x = x.detach().cpu().float()
        if self.fixed_shape:
            return rows_of(self.method.execute((x.contiguous(),))[0], self.channels)
        runs = [self.method.execute((image[None].contiguous(),))[0] for image in x]  # one image per run
        return rows_of(torch.cat(runs), self.channels)
