"""INT8 post-training quantization of exports, calibrated on images of a dataset's val split.

OpenVINO IR goes through NNCF (nncf.quantize, mixed preset: symmetric weights, asymmetric activations, fast bias
correction). ONNX goes through NNCF's ONNX backend too by default (a QDQ model that ONNX Runtime runs), or with
quantizer "onnxruntime" through ONNX Runtime's quantize_static (QDQ on the convolutions: per-channel int8 weights,
uint8 activations whose range is a moving average of each image's min and max). yolov5n, COCO128 at 640, batch 16,
mAP50-95 (float32 .pt 0.3701): OpenVINO int8 0.3667, ONNX int8 by NNCF 0.3638, by quantize_static 0.3538 (it has no
bias correction; quantizing every op or the global min/max range lost 0.009 and 0.014 more).
Both see the same calibration inputs: the split's images letterboxed exactly as detect.py prepares them (rectangular
for a dynamic export, the fixed shape for a static one), in [0, 1].

Some nodes stay in float, found from the graph's structure rather than from node names: everything after the last
convolutions (the head's 1x1 convolutions, the sigmoid, the box decoding and the concatenation of pixel coordinates
with confidences, which would otherwise share one int8 scale) and the first convolution, which reads the image. On
yolov5n / COCO128 at 640 keeping those two in float was the difference between 0.357 and 0.367 mAP50-95 (fp32 0.370).
A segment graph (a second output, the prototypes) also keeps in float its head and the neck block that the prototype
branch reads: the masks' outlines lost 0.017 mask mAP50-95 in int8 otherwise (prototype_layers).
"""

import importlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from utils.data.config import load_data_config
from utils.data.verify import list_image_files
from utils.errors import DatasetError, QuantizationError
from utils.images import read_image_checked
from utils.infer.sources import prepare
from utils.log import LOGGER, PROGRESS_BAR

DEFAULT_CALIBRATION_IMAGES = 300  # NNCF's default subset size, as Ultralytics uses
INSTALL_HINT = "pip install -r requirements-export.txt"


def require_quantizer(fmt: str, onnx_quantizer: str = "nncf"):
    """The package that quantizes fmt (nncf for openvino, onnxruntime.quantization or nncf for onnx), or one line."""
    package = {"openvino": "nncf", "onnx": "nncf" if onnx_quantizer == "nncf" else "onnxruntime.quantization"}[fmt]
    try:
        return importlib.import_module(package)
    except ImportError:
        raise QuantizationError(f"--int8 --include {fmt} needs the {package} package: {INSTALL_HINT}") from None


def calibration_files(data: str | Path, count: int) -> list[str]:
    """count images of the data YAML's val split (all when it has fewer), evenly spaced over the sorted split."""
    cfg = load_data_config(data)
    split = cfg["val"] or cfg["train"]
    if not split:
        raise QuantizationError(f"--data {data}: has no val (or train) split to calibrate --int8 on")
    try:
        files = list_image_files(split)
    except DatasetError as e:
        raise QuantizationError(f"--data {data}: no calibration images for --int8: {e}") from None
    if len(files) <= count:
        return files
    return [files[i * len(files) // count] for i in range(count)]


class CalibrationImages:
    """The calibration inputs, read one by one on each pass: (1, 3, H, W) float32 arrays in [0, 1], letterboxed
    as detect.py letterboxes (auto: a rectangle padded to the stride; otherwise the fixed imgsz)."""

    def __init__(self, files: list[str], imgsz: tuple[int, int], stride: int, auto: bool, progress: str = ""):
        self.files, self.imgsz, self.stride, self.auto, self.progress = files, list(imgsz), stride, auto, progress

    def __len__(self) -> int:
        return len(self.files)

    def quiet(self) -> "CalibrationImages":
        """The same inputs without a progress bar (NNCF draws its own)."""
        return CalibrationImages(self.files, self.imgsz, self.stride, self.auto)

    def __iter__(self) -> Iterator[np.ndarray]:
        files = tqdm(self.files, desc=self.progress, bar_format=PROGRESS_BAR) if self.progress else self.files
        for file in files:
            image, problem = read_image_checked(file)
            if image is None:
                LOGGER.warning(f"WARNING: calibration image {file} skipped: {problem}")
                continue
            chw = prepare(image, self.imgsz, self.stride, auto=self.auto)
            yield (chw[None].astype(np.float32) / 255).astype(np.float32)


# torch.onnx names each node by its module's path (/model/model.16/cv2/conv/Conv), which OpenVINO keeps
LAYER = re.compile(r"/model\.(\d+)/")


def float_nodes(
    order: list[str], successors: dict[str, list[str]], convs: set[str], first: set[str], main: str | None = None
) -> set[str]:
    """Nodes kept in float: the first convolutions and every node with no convolution downstream (the last
    convolutions and what follows them); given main, the node giving the first output of a graph with more (a
    segment model's predictions beside its prototypes), prototype_layers too. order is topological; successors maps
    a node to its consumers."""
    feeds_conv: dict[str, bool] = {}
    feeds_main: dict[str, bool] = {}
    for name in reversed(order):
        consumers = successors.get(name, ())
        feeds_conv[name] = any(s in convs or feeds_conv.get(s, False) for s in consumers)
        feeds_main[name] = name == main or any(feeds_main.get(s, False) for s in consumers)
    kept = set(first) | {name for name in order if not feeds_conv[name]}
    return kept if main is None else kept | prototype_layers(order, successors, feeds_main)


def prototype_layers(order: list[str], successors: dict[str, list[str]], feeds_main: dict[str, bool]) -> set[str]:
    """Every node of the layers that hold the prototype branch (the nodes whose results never reach the
    predictions) or give it its input: the segment head and the neck block it reads. yolo11n-seg on shapes at 160,
    mAP50-95 box / mask against the .pt's 0.553 / 0.501: all but float_nodes' in int8 0.542 / 0.484; the prototype
    branch alone in float 0.541 / 0.484; the whole head 0.547 / 0.491; the head and the block 0.548 / 0.494."""
    branch = {name for name in order if not feeds_main[name]}
    readers = {name for name in order if name not in branch and set(successors.get(name, ())) & branch}
    layers = {match[1] for name in branch | readers if (match := LAYER.search(name))}
    return {name for name in order if (match := LAYER.search(name)) and match[1] in layers}


def onnx_float_nodes(proto) -> list[str]:
    """float_nodes of an ONNX graph (its nodes are stored in topological order)."""
    nodes = list(proto.graph.node)
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node.name)
    successors = {n.name: [c for out in n.output for c in consumers.get(out, [])] for n in nodes}
    inputs = {i.name for i in proto.graph.input}
    convs = {n.name for n in nodes if n.op_type == "Conv"}
    first = {n.name for n in nodes if n.op_type == "Conv" and inputs & set(n.input)}
    main = next(n.name for n in nodes if proto.graph.output[0].name in n.output)
    kept = float_nodes([n.name for n in nodes], successors, convs, first, main)
    return sorted(n.name for n in nodes if n.name in kept and n.op_type != "Constant")


def _openvino_float_nodes(model) -> list[str]:
    """float_nodes of an OpenVINO model, by the friendly names NNCF uses."""
    ops = model.get_ordered_ops()
    name = {id(op): op.get_friendly_name() for op in ops}
    successors = {
        name[id(op)]: [t.get_node().get_friendly_name() for out in op.outputs() for t in out.get_target_inputs()]
        for op in ops
    }
    convs = [op for op in ops if op.get_type_name() == "Convolution"]
    first = {name[id(op)] for op in convs if op.input(0).get_source_output().get_node().get_type_name() == "Parameter"}
    main = model.outputs[0].get_node().get_friendly_name()  # the predictions' Result
    kept = float_nodes(list(name.values()), successors, {name[id(op)] for op in convs}, first, main)
    return sorted(name[id(op)] for op in ops if name[id(op)] in kept and op.get_type_name() != "Constant")


def quantize_openvino(model, images: CalibrationImages):
    """An INT8 copy of an OpenVINO model by NNCF post-training quantization on images."""
    nncf = require_quantizer("openvino")
    logging.getLogger("nncf").setLevel(logging.WARNING)  # one INFO line per node it leaves alone is noise here
    ignored = nncf.IgnoredScope(names=_openvino_float_nodes(model), validate=False)
    dataset = nncf.Dataset(images.quiet())
    preset = nncf.QuantizationPreset.MIXED
    return nncf.quantize(model, dataset, preset=preset, subset_size=len(images), ignored_scope=ignored)


ONNX_QUANTIZERS = ("nncf", "onnxruntime")
# Measured (yolov5n, 480x640, 2 threads, AVX-512 VNNI): ONNX Runtime's CPU provider turns DequantizeLinear -> Conv ->
# QuantizeLinear into an int8 QLinearConv only with the quantizer on the convolution's output, which NNCF (placing
# quantizers on convolution inputs, as OpenVINO wants) does not add: all 60 convolutions then run in float after
# dequantizing, 1.6x the float ONNX's time; quantize_static's model runs 56 QLinearConv at 0.96x.
NNCF_ONNX_SPEED = (
    "ONNX INT8 (NNCF): ONNX Runtime's CPU provider runs its convolutions in float, so it is smaller than the float "
    "ONNX but not faster there; for INT8 speed on a CPU export --include openvino --int8"
)


def quantize_onnx(source: Path, destination: Path, images: CalibrationImages, quantizer: str = "nncf") -> None:
    """QDQ quantization of the float ONNX file source into destination, calibrated on images: by ONNX Runtime's
    quantize_static, or by NNCF's ONNX backend (bias correction too: 0.364 against 0.354 mAP50-95 on yolov5n)."""
    onnx = importlib.import_module("onnx")
    if quantizer == "nncf":
        nncf = require_quantizer("openvino")
        logging.getLogger("nncf").setLevel(logging.WARNING)
        model = onnx.load(str(source))
        ignored = nncf.IgnoredScope(names=onnx_float_nodes(model), validate=False)
        dataset = nncf.Dataset(images.quiet(), lambda array: {"images": array})
        preset = nncf.QuantizationPreset.MIXED
        onnx.save(
            nncf.quantize(model, dataset, preset=preset, subset_size=len(images), ignored_scope=ignored),
            str(destination),
        )
        LOGGER.info(NNCF_ONNX_SPEED)
        return
    quantization = require_quantizer("onnx", "onnxruntime")

    class Reader(quantization.CalibrationDataReader):
        """images as ONNX Runtime's calibrator asks for them: one {input name: array} per call, then None."""

        def __init__(self):
            self.arrays = iter(images)

        def get_next(self):
            array = next(self.arrays, None)
            return None if array is None else {"images": array}

    excluded = onnx_float_nodes(onnx.load(str(source)))
    ort_logger = logging.getLogger()  # it warns on the root logger that pre-processing could help: it is optional
    level = ort_logger.level
    ort_logger.setLevel(logging.ERROR)
    try:
        quantization.quantize_static(
            str(source),
            str(destination),
            Reader(),
            quant_format=quantization.QuantFormat.QDQ,
            per_channel=True,
            activation_type=quantization.QuantType.QUInt8,
            weight_type=quantization.QuantType.QInt8,
            nodes_to_exclude=excluded,
            # the calibrator keeps each tensor's min and max per image (its graph reduces them), not the tensors
            calibrate_method=quantization.CalibrationMethod.MinMax,
            op_types_to_quantize=["Conv"],
            extra_options={"CalibMovingAverage": True},
        )
    finally:
        ort_logger.setLevel(level)
