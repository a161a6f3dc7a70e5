"""LiteRT (TensorFlow Lite) exports: the model converted by litert-torch and run by LiteRT's interpreter
(`ai-edge-litert`, with its XNNPACK delegate).

An export is one file, `<stem>.tflite`, FP32, FP16 or INT8 (--int8 --data: models/export/litert_int8.py) as its
metadata records. The metadata is a zip archive appended to the flatbuffer holding `metadata.json` (the layout
Ultralytics uses: the interpreter ignores bytes after the model), read back with zipfile with its member sizes
checked first. litert-torch exports through torch.export, and the graph it writes keeps the traced sizes of the
upsamplings: each input shape is a signature of its own, sharing one copy of the weights (signature_shapes:
--img-size, and test.py's usual rectangles and the square that holds any of its batches; --static: --img-size
alone). An input runs in the smallest signature that holds it, placed at the top left in letterbox grey, and only
the rows of the cells over the input are kept: the cells keep their place on every level's grid, so the predictions
are the .pt's, exactly in a signature of the input's own shape, else but near the bottom and right edges.
Batch 1 unless --batch-size. --half casts the weights to float16 (ai-edge-quantizer's weight-only float casting; the
arithmetic stays float32 on CPUs). The heads' grids are constants of the graph: every op runs in XNNPACK's
partitions, as in Ultralytics' export. Two rewrites make FP32 and FP16 graphs cheaper than Ultralytics' (yolo11n at
640: 0.98x its CPU time, docs/export.md): the FPN's 1x1 convolutions after each upsampling run at the low resolution
(xnnpack_graph.upsample_after_conv), and anchor-free predictions come out as rows (N, 5 + nc), the order LiteRT's
NHWC maps already hold them in (nhwc_rows: no transpose but the input's). INT8 keeps its calibrated graph, (5 + nc, N)
(edge.channel_predictions).
"""

import contextlib
import json
import math
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.export.edge import channel_layout, channel_predictions, import_runtime, require_converter, rows_of
from models.export.metadata import MAX_METADATA_BYTES, error_line, parse_metadata
from models.export.runtime import LETTERBOX_GREY, Backend
from models.export.xnnpack_graph import fewer_copies
from models.nn.head import is_end2end
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

METADATA_MEMBER = "metadata.json"
MAX_ZIP_MEMBERS = 16  # ours has one member; Ultralytics' too
FLATBUFFER_ID = b"TFL3"  # bytes 4-8 of every .tflite


def _square(x: torch.Tensor, exponent):
    """aten.pow with a scalar exponent, which LiteRT's converter cannot lower on 5-D tensors (YOLOv5's box decoding
    squares its width and height): x * x for a square, exp(log(x) * e) otherwise."""
    return x * x if exponent == 2 else torch.exp(torch.log(x) * exponent)


PHOTO_RATIOS = (3 / 4, 2 / 3)  # the common camera aspect ratios (4:3, 3:2): test.py's usual rectangular batches


def signature_shapes(job) -> list[tuple[int, int]]:
    """The input shapes (h, w) an export holds, smallest first: --img-size alone with --static; else also the
    rectangles test.py's batches of 4:3 and 3:2 photos take at --img-size (one stride more on the long side, as
    they are padded by half a stride, both orientations) and the square that holds any of its batches."""
    (h, w), stride = job.sample.shape[2:], int(job.metadata["stride"])
    if not job.options.dynamic:
        return [(h, w)]
    side = max(h, w)
    long = math.ceil(side / stride + 0.5) * stride
    short = {math.ceil(r * side / stride + 0.5) * stride for r in PHOTO_RATIOS}
    shapes = {(h, w), (long, long)} | {(s, long) for s in short} | {(long, s) for s in short}
    return sorted(shapes, key=lambda shape: (shape[0] * shape[1], shape))


def shape_metadata(job, shapes: list[tuple[int, int]]) -> dict:
    """The export's shape keys: imgsz is --img-size (the size detect.py and test.py then default to), not the
    smallest signature: at 640 that is 448x672, and test.py at 672 made batches wider than any signature."""
    h, w = job.sample.shape[2:]
    dynamic = len(shapes) > 1
    return {"dynamic": dynamic, "batch": job.sample.shape[0], "imgsz": [h, w], "precision": job.options.precision}


@contextlib.contextmanager
def nhwc_rows(model: torch.nn.Module):
    """While tracing: anchor-free heads (not end-to-end) put out rows computed in LiteRT's NHWC layout
    (AnchorFreeDetect._row_predictions); yields the metadata to add (none: rows are every export's layout)."""
    heads = [] if is_end2end(model) else [m for m in model.modules() if getattr(m, "rows_output", False)]
    for head in heads:
        head.rows_output, head._channel_predictions = False, head._row_predictions
    try:
        yield {}
    finally:
        for head in heads:
            head.rows_output = True
            del head._channel_predictions


def _signature_name(shape: tuple[int, int]) -> str:
    return f"input_{shape[0]}x{shape[1]}"


def _converted(litert_torch, job, shapes: list[tuple[int, int]]):
    """litert-torch's model of job at each of shapes, one signature each (--int8: quantized, litert_int8)."""
    model, converter, config = job.model.float().eval(), litert_torch, None
    heads = [m for m in model.modules() if isinstance(getattr(m, "_grids", None), dict)]
    samples = [torch.zeros(job.sample.shape[0], 3, *shape) for shape in shapes]
    for sample in samples:
        with torch.no_grad():  # fills the heads' grid caches at this shape: the graph holds them as constants,
            model(sample)  # not as BROADCAST_TO ops, which XNNPACK lacks and which split its partition
    for head in heads:  # anchor sizes (1, na, 1, 1, 2), broadcast by the multiplication, not one per cell and shape
        head._grids = {key: (grid, anchors[:, :, :1, :1].clone()) for key, (grid, anchors) in head._grids.items()}
    try:
        graphs = [model] * len(shapes)
        if job.options.int8:
            from models.export.litert_int8 import Int8Signatures

            int8 = Int8Signatures(model, job.sample.shape[0])
            int8.calibrate(job.calibration, shapes[-1])
            graphs, config = [int8.graph(shape) for shape in shapes], int8.config()
        for shape, graph, sample in zip(shapes, graphs, samples):
            converter = converter.signature(_signature_name(shape), graph, (sample,))
        return converter.convert(quant_config=config)
    finally:
        for head in heads:
            head._grids = {}


def export_litert(job, path: Path) -> Path:
    """litert_torch.convert the model at each of signature_shapes into path; --half: weights cast to float16; the
    metadata appended as a zip of metadata.json."""
    litert_torch = require_converter("litert_torch", "LiteRT")
    litert_torch.fx_infra.decomp.add_pre_lower_decomp(torch.ops.aten.pow.Tensor_Scalar, _square)
    shapes = signature_shapes(job)
    try:
        # FP32 and FP16: the FPN's convolutions after each upsampling at the low resolution, C2f's halves whole
        fewer_macs = contextlib.nullcontext() if job.options.int8 else fewer_copies(job.model, job.sample)
        # FP32 and FP16: rows, as LiteRT lays them out; INT8 as its calibration ran: (B, C, N)
        rows = channel_predictions(job.model) if job.options.int8 else nhwc_rows(job.model)
        with warnings.catch_warnings(), rows as layout, fewer_macs:
            warnings.simplefilter("ignore")
            _converted(litert_torch, job, shapes).export(str(path))
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # the converter's own error types: an op it cannot lower
        raise ExportError(f"litert-torch could not convert the model to LiteRT: {error_line(e)}") from None
    if job.options.half:
        _cast_weights_to_fp16(path)
    shape = shape_metadata(job, shapes)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(METADATA_MEMBER, json.dumps({**job.metadata, **layout, **shape}))
    sizes = ", ".join(f"{sh}x{sw}" for sh, sw in shapes)
    held = "smaller inputs padded at the top left" if shape["dynamic"] else "static: smaller inputs padded, centred"
    LOGGER.info(f"LiteRT: batch {shape['batch']}, input shapes {sizes} (one signature each; {held})")
    return path


def _cast_weights_to_fp16(path: Path) -> None:
    """Every weight of the .tflite at path cast to float16 (ai-edge-quantizer's weight-only float casting)."""
    quantizer = require_converter("ai_edge_quantizer.quantizer", "LiteRT --half")
    names = require_converter("ai_edge_quantizer.qtyping", "LiteRT --half")
    recipe = require_converter("ai_edge_quantizer.recipe", "LiteRT --half")
    qt = quantizer.Quantizer(str(path))
    qt.add_weight_only_config(
        regex=".*",
        operation_name=names.TFLOperationName.ALL_SUPPORTED,
        num_bits=16,
        algorithm_key=recipe.AlgorithmName.FLOAT_CASTING,
    )
    qt.quantize().export_model(str(path), overwrite=True)


def litert_metadata(path: Path) -> dict:
    """The metadata.json appended to a .tflite of ours ({} when it has none), its size checked before reading."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > MAX_ZIP_MEMBERS:
                raise BackendError(f"{path}: its appended archive has {len(members)} members (at most 16)")
            entry = next((m for m in members if m.filename == METADATA_MEMBER), None)
            if entry is None:
                return {}
            if entry.file_size > MAX_METADATA_BYTES:
                raise BackendError(f"{path}: its {METADATA_MEMBER} is {entry.file_size} bytes")
            with archive.open(entry) as f:
                text = f.read(MAX_METADATA_BYTES + 1).decode("utf-8")
    except zipfile.BadZipFile:
        return {}  # a .tflite without our metadata: refused by parse_metadata as not a YOLO export
    except (EOFError, ValueError, NotImplementedError, RuntimeError, UnicodeDecodeError) as e:
        raise BackendError(f"{path}: its appended metadata is damaged: {error_line(e)}") from None
    except OSError as e:
        raise BackendError(f"{path} could not be read: {e.strerror or e}") from None
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise BackendError(f"{path}: its {METADATA_MEMBER} is not JSON") from None
    return raw if isinstance(raw, dict) else {}


class LiteRTBackend(Backend):
    """A .tflite of ours run by LiteRT's interpreter (XNNPACK on the CPU), on torch's thread count: each input in the
    smallest of its signatures that holds it (a --static export: its one shape, as any static export)."""

    kind = "LiteRT"
    own_threads = True  # the interpreter runs on its own thread pool: the Predictor then pre-processes in NumPy

    def __init__(self, path: Path, device: torch.device, bf16: bool = False):  # bf16: runs as exported
        raw = litert_metadata(path)
        super().__init__(path, parse_metadata(raw, path), device)
        self.channels = channel_layout(raw)
        with open(path, "rb") as f:
            if f.read(8)[4:] != FLATBUFFER_ID:
                raise BackendError(f"{path} is not a LiteRT model: no {FLATBUFFER_ID.decode()} flatbuffer header")
        interpreter = import_runtime("ai_edge_litert.interpreter")  # after the file's checks, as NCNN's
        try:
            self.interpreter = interpreter.Interpreter(model_path=str(path), num_threads=torch.get_num_threads())
            self.signatures = sorted(self._signature(key) for key in self.interpreter.get_signature_list())
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except BackendError:
            raise
        except Exception as e:  # ValueError and RuntimeError with the interpreter's own text
            raise BackendError(f"{path} could not be loaded by LiteRT: {error_line(e)}") from None
        if not self.signatures:
            raise BackendError(f"{path} is not a YOLO export: it has no signature")
        self.signature_batch = self.signatures[0].shape[0]
        self.row_indices: dict[tuple, torch.Tensor] = {}  # (signature h, w, input h, w): the rows kept

    def _signature(self, key: str) -> "_Signature":
        """One signature of the model: its runner, input and output names, and input shape."""
        runner = self.interpreter.get_signature_runner(key)
        inputs, outputs = runner.get_input_details(), runner.get_output_details()
        if len(inputs) != 1 or len(outputs) != 1:
            raise BackendError(
                f"{self.path} is not a YOLO export: its signature {key} has {len(inputs)} inputs and "
                f"{len(outputs)} outputs"
            )
        [(name, details)], [output] = inputs.items(), outputs
        shape = tuple(int(v) for v in details["shape"])
        if len(shape) != 4 or shape[1] != 3:
            raise BackendError(f"{self.path} is not a YOLO export: its signature {key} takes a {shape} input")
        return _Signature(shape[2] * shape[3], shape, runner, name, output)

    def run_shape(self, images: int, height: int, width: int) -> tuple[int, int]:
        """A --static export: its one shape (the base class pads); else the input's own, padded in run()."""
        if self.fixed_shape:
            return super().run_shape(images, height, width)
        if not any(height <= s.shape[2] and width <= s.shape[3] for s in self.signatures):
            h, w = self.signatures[-1].shape[2:]
            raise BackendError(
                f"{self.path} takes inputs up to {h}x{w} but got a {height}x{width} input: letterbox to at most "
                f"{h}x{w} or export at a larger --img-size"
            )
        return height, width

    def run(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2:]
        signature = next(s for s in self.signatures if h <= s.shape[2] and w <= s.shape[3])
        images = x.detach().cpu().float().numpy()
        step = self.signature_batch
        outputs = [self._run_batch(signature, images[i : i + step]) for i in range(0, len(x), step)]
        out = torch.cat(outputs) if len(outputs) > 1 else outputs[0]
        if self.family.end2end or signature.shape[2:] == (h, w):  # end-to-end rows are boxes, in the input's place
            return out
        return out[:, self._rows(signature.shape[2:], (h, w), out.shape[1])]

    def _run_batch(self, signature: "_Signature", images: np.ndarray) -> torch.Tensor:
        """Predictions (n, N, C) of n <= the signature's batch images, placed at the top left of its input in
        letterbox grey (missing images: zeros)."""
        n, _, h, w = images.shape
        if images.shape != signature.shape:
            canvas = np.zeros(signature.shape, np.float32)
            canvas[:n] = LETTERBOX_GREY
            canvas[:n, :, :h, :w] = images
            images = canvas
        # the runner's outputs are copies of its own (writable, unshared): no second one
        out = signature.runner(**{signature.input_name: images})[signature.output_name]
        return rows_of(torch.from_numpy(out), self.channels)[:n]

    def _rows(self, run_hw: tuple[int, int], hw: tuple[int, int], rows: int) -> torch.Tensor:
        """Indices of the rows of a run_hw input's predictions whose cells lie over the hw top-left part of it, in
        order: every level's cells row-major, after each anchor's (the rows of an hw input)."""
        key = (*run_hw, *hw)
        if key not in self.row_indices:
            strides = [int(s) for s in self.stride.tolist()]
            cells = sum((run_hw[0] // s) * (run_hw[1] // s) for s in strides)
            anchors, indices, start = rows // cells, [], 0
            for s in strides:
                grid = torch.arange(anchors * (run_hw[0] // s) * (run_hw[1] // s)).view(anchors, run_hw[0] // s, -1)
                indices.append(grid[:, : hw[0] // s, : hw[1] // s].reshape(-1) + start)
                start += grid.numel()
            self.row_indices[key] = torch.cat(indices)
        return self.row_indices[key]


@dataclass(order=True)
class _Signature:
    """One input shape of a LiteRT export, ordered by its area."""

    area: int
    shape: tuple[int, int, int, int]
    runner: object = field(compare=False)
    input_name: str = field(compare=False)
    output_name: str = field(compare=False)
