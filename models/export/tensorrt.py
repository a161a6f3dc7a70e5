"""TensorRT engines: built from the float ONNX export (FP32, FP16, or INT8 calibrated on a dataset's images) and run
on CUDA. Needs the tensorrt package and a CUDA device; everything here is imported only then.

An engine file is a 4-byte little-endian length, that many bytes of JSON metadata (the keys of every export, see
models/export/exporter.py), then the serialized engine: the layout Ultralytics uses, so their readers find the metadata
too. The nodes after the last convolutions (decoding, sigmoid, the final concatenation) are built in float32 at any
precision, as in the INT8 ONNX and OpenVINO exports (models/export/quantize.py).

A dynamic export's engine has one optimization profile: batch 1 to the export's batch (larger inputs run in
chunks), height and width from one stride to imgsz plus one stride (test.py pads rectangles by half a stride). INT8
calibration needs one shape, so its images are letterboxed to the square imgsz.
"""

import json
from pathlib import Path

import numpy as np
import torch

from models.export.metadata import parse_metadata, read_engine_metadata
from models.export.quantize import CalibrationImages, onnx_float_nodes
from models.export.runtime import Backend, import_optional
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

INSTALL_HINT = "pip install tensorrt (on a machine with a CUDA GPU)"


def check_builder(device: torch.device) -> None:
    """ExportError (one line) unless engines can be built here: a CUDA device and the tensorrt package."""
    if device.type != "cuda":
        raise ExportError("--include engine (TensorRT) needs a CUDA device: pass --device 0")
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        raise ExportError(f"--include engine needs the tensorrt package: {INSTALL_HINT}") from None


def _profile_shapes(job, stride: int) -> tuple[tuple, tuple, tuple]:
    """(min, opt, max) input shapes of the engine's optimization profile."""
    b, (h, w) = job.options.batch, job.options.imgsz
    if not job.options.dynamic:
        return (b, 3, h, w), (b, 3, h, w), (b, 3, h, w)
    return (1, 3, stride, stride), (1, 3, h, w), (b, 3, h + stride, w + stride)


def _calibrator(trt, images: CalibrationImages, device: torch.device):
    """An entropy calibrator feeding images one by one from CUDA memory (no calibration cache is written)."""

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            super().__init__()
            self.arrays, self.current = iter(images), None

        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names):
            array = next(self.arrays, None)
            if array is None:
                return None
            self.current = torch.from_numpy(array).to(device).contiguous()  # kept alive until the next batch
            return [int(self.current.data_ptr())]

        def read_calibration_cache(self):
            return None

        def write_calibration_cache(self, cache) -> None:
            pass

    return Calibrator()


def _parsed_network(trt, builder, logger, onnx_path: Path):
    """The ONNX file parsed into a TensorRT network; ExportError with the parser's first error."""
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # TensorRT < 10 needs it, 10 has no other
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        first = parser.get_error(0) if parser.num_errors else "unknown error"
        raise ExportError(f"TensorRT cannot parse {onnx_path.name}: {str(first).splitlines()[0][:200]}")
    return network, parser


def _keep_decoding_float(trt, network, onnx_path: Path) -> None:
    """The layers of the ONNX nodes after the last convolutions (and the first convolution) run in float32."""
    onnx = import_optional("onnx")
    names = set(onnx_float_nodes(onnx.load(str(onnx_path))))
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.name in names or any(layer.name.startswith(f"{n}_") for n in names):
            layer.precision = trt.float32
            for j in range(layer.num_outputs):
                if layer.get_output(j).dtype in (trt.float32, trt.float16):
                    layer.set_output_type(j, trt.float32)


def build_engine(job, onnx_path: Path, path: Path) -> Path:
    """Build the engine from onnx_path into path, with the job's metadata as its header."""
    trt = import_optional("tensorrt")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network, _parser = _parsed_network(trt, builder, logger, onnx_path)
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(job.options.workspace_gb * (1 << 30)))
    profile = builder.create_optimization_profile()
    profile.set_shape(network.get_input(0).name, *_profile_shapes(job, job.metadata["stride"]))
    config.add_optimization_profile(profile)
    if job.options.half or job.options.int8:
        config.set_flag(trt.BuilderFlag.FP16)  # an INT8 engine runs what is not quantized in FP16
    if job.options.half or job.options.int8:
        _keep_decoding_float(trt, network, onnx_path)
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    if job.options.int8:
        config.set_flag(trt.BuilderFlag.INT8)
        h, w = job.options.imgsz
        square = CalibrationImages(job.calibration.files, (h, w), job.metadata["stride"], False, "Calibrating")
        calibration_profile = builder.create_optimization_profile()
        calibration_profile.set_shape(network.get_input(0).name, (1, 3, h, w), (1, 3, h, w), (1, 3, h, w))
        config.set_calibration_profile(calibration_profile)
        config.int8_calibrator = _calibrator(trt, square, job.sample.device)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ExportError("TensorRT could not build the engine (its log above says why)")
    header = json.dumps(job.metadata).encode()
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(4, byteorder="little", signed=True))
        f.write(header)
        f.write(memoryview(serialized))
    return path


class TensorRTBackend(Backend):
    """A TensorRT engine run on a CUDA device, with torch tensors as its buffers."""

    kind = "TensorRT"

    def __init__(self, path: Path, device: torch.device):
        trt = import_optional("tensorrt")
        if device.type != "cuda":
            raise BackendError(f"{path}: TensorRT engines run on CUDA only: pass --device 0")
        raw, offset = read_engine_metadata(path)
        meta = parse_metadata(raw, path)
        super().__init__(path, meta, device)
        self.chunk = meta["batch"]  # the profile's largest batch: larger inputs run in chunks of it
        with open(path, "rb") as f:
            f.seek(offset)
            blob = f.read()
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = runtime.deserialize_cuda_engine(blob)
        if self.engine is None:
            raise BackendError(f"{path} is not a TensorRT engine this TensorRT version and GPU can run")
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        outputs = [n for n in names if n not in inputs]
        if len(inputs) != 1 or len(outputs) != 1:
            raise BackendError(f"{path} is not a YOLO engine: {len(inputs)} inputs and {len(outputs)} outputs")
        self.input_name, self.output_name = inputs[0], outputs[0]
        to_torch = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16}
        self.input_dtype = to_torch[np.dtype(trt.nptype(self.engine.get_tensor_dtype(self.input_name)))]
        self.output_dtype = to_torch[np.dtype(trt.nptype(self.engine.get_tensor_dtype(self.output_name)))]
        self.kind = f"TensorRT ({meta.get('precision', 'fp32')})"
        LOGGER.debug(f"{path}: TensorRT engine, input {self.input_name}, output {self.output_name}")

    def run(self, x: torch.Tensor) -> torch.Tensor:
        stream = torch.cuda.current_stream(self.device)
        outputs = []
        for chunk in x.to(self.device, self.input_dtype).split(self.chunk):
            chunk = chunk.contiguous()
            if not self.context.set_input_shape(self.input_name, tuple(chunk.shape)):
                raise RuntimeError(f"input shape {tuple(chunk.shape)} is outside the engine's profile")
            out = torch.empty(
                tuple(self.context.get_tensor_shape(self.output_name)), dtype=self.output_dtype, device=self.device
            )
            self.context.set_tensor_address(self.input_name, chunk.data_ptr())
            self.context.set_tensor_address(self.output_name, out.data_ptr())
            if not self.context.execute_async_v3(stream.cuda_stream):
                raise RuntimeError("TensorRT failed to run the engine")
            outputs.append(out)
        return torch.cat(outputs)
