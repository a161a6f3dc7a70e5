"""Export a detector (YOLOv5, YOLOv8, YOLO11 or YOLO26 weights) for deployment: TorchScript, ONNX, OpenVINO IR, and
TensorRT engines on CUDA.

Usage (the flags of YOLOv5's export.py); files are written beside the weights, with YOLOv5's names. A bare name
(yolov5n.pt) missing here is taken from weights/, as detect.py does, so its exports land in weights/ too. An
existing file or folder of those names is replaced only when it is an earlier export of ours; anything else is
refused with one line:
    python export.py --weights yolov5n.pt --include torchscript onnx openvino   # yolov5n.torchscript, yolov5n.onnx,
                                                                                # yolov5n_openvino_model/
    python export.py --weights best.pt --include onnx --static --img 640        # one fixed 1x3x640x640 input
                                                         # (default size: the one the weights were trained at)
    python export.py --weights best.pt --include openvino onnx --int8 --data coco128.yaml  # INT8, calibrated (NNCF)
    python export.py --weights best.pt --include engine --half --device 0       # TensorRT FP16 (CUDA, tensorrt)
    python export.py --weights best.pt --include ncnn litert executorch         # edge runtimes (static shape;
                                                                                # pip install -r requirements-edge.txt)

Exports are dynamic in batch, height and width by default (unlike YOLOv5, whose exports are static unless
--dynamic): detect.py and test.py then feed them the same rectangular letterboxed inputs as the .pt and get the
.pt's detections. --static fixes the input to --img-size and --batch-size, for runtimes that need one shape.
--int8 calibrates on --calib-images images (default 300, all when the split has fewer) of the --data YAML's val
split and writes <stem>_int8.onnx / <stem>_int8_openvino_model/ beside the float exports.
Every export returns the decoded predictions (B, N, 5 + nc), or YOLO26's final detections (B, 300, 6), and carries
the class names, the model family and the stride as metadata. The formats are declared in models/export/formats.py.
onnx, onnxruntime, openvino and nncf are optional: pip install -r requirements-export.txt; the edge formats' packages
(ncnn, pnnx, litert-torch, ai-edge-litert, executorch) are another extra: pip install -r requirements-edge.txt
"""

import argparse
import sys
from dataclasses import dataclass

from models.export.exporter import ExportOptions, export
from models.export.formats import FORMATS
from models.export.quantize import DEFAULT_CALIBRATION_IMAGES, ONNX_QUANTIZERS
from utils.cli import Parser, float_in, int_in, run_cli
from utils.log import LOGGER
from utils.torch_utils import select_device


@dataclass
class ExportCommand:
    """export.py's options: its flags, the same names and defaults (tests/commands/test_options.py checks both
    ways), and run()'s keywords."""

    weights: str = "yolov5s.pt"
    include: list[str] | tuple[str, ...] = ("torchscript", "onnx")
    imgsz: list[int] | tuple[int, ...] | None = None  # None: the size the weights were trained at (else 640)
    batch_size: int = 1
    device: str = "cpu"
    half: bool = False
    dynamic: bool = False  # YOLOv5's flag; exports are dynamic unless static
    static: bool = False
    int8: bool = False
    data: str | None = None
    calib_images: int = DEFAULT_CALIBRATION_IMAGES
    onnx_quantizer: str = "nncf"
    workspace: float = 4.0
    simplify: bool = False
    opset: int | None = None


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (YOLOv5 export.py flags, plus --static, --int8 and its calibration)."""
    parser = Parser(
        prog="export.py",
        description="Export YOLOv5, YOLOv8, YOLO11 or YOLO26 weights to TorchScript, ONNX, OpenVINO, TensorRT, NCNN, "
        "LiteRT or ExecuTorch",
    )
    add = parser.add_argument
    add("--weights", default="yolov5s.pt", help="weights to export: ours, or official YOLOv5/YOLOv8/YOLO11/YOLO26 .pt")
    formats = ", ".join(FORMATS)
    add("--include", nargs="+", choices=list(FORMATS), default=("torchscript", "onnx"), help=f"formats: {formats}")
    size_help = "input size: one value, or h w (multiples of the stride; default: the weights' training size, else 640)"
    add("--img-size", "--img", "--imgsz", dest="imgsz", nargs="+", type=int_in(32, 8192), default=None, help=size_help)
    add("--batch-size", type=int_in(1, 1024), default=1, help="batch size of the exported input")
    add("--device", default="cpu", help="cpu, or a CUDA device: 0")
    add("--half", action="store_true", help="FP16 export (CUDA only; on any device for ncnn and litert)")
    add("--dynamic", action="store_true", help="dynamic batch, height and width: the default, kept for YOLOv5's flag")
    add("--static", action="store_true", help="one fixed input shape (--img-size, --batch-size) instead of dynamic")
    int8_formats = ", ".join(name for name, f in FORMATS.items() if f.int8)
    add("--int8", action="store_true", help=f"INT8 {int8_formats}, calibrated on the --data val images")
    add("--data", default=None, help="data YAML whose val split calibrates --int8")
    add("--calib-images", type=int_in(1, 100_000), default=DEFAULT_CALIBRATION_IMAGES, help="--int8 calibration images")
    quantizers = ", ".join(ONNX_QUANTIZERS)
    add("--onnx-quantizer", choices=ONNX_QUANTIZERS, default="nncf", help=f"--int8 ONNX by: {quantizers}")
    add("--workspace", type=float_in(0.25, 1024), default=4.0, help="TensorRT builder memory, GB")
    add("--simplify", action="store_true", help="simplify the ONNX graph with onnxslim when it is installed")
    add("--opset", type=int_in(11, 23), default=None, help="ONNX opset version (default 17)")
    opt = parser.parse_args(argv)
    if opt.static and opt.dynamic:
        parser.error("--static and --dynamic are exclusive (exports are dynamic by default)")
    if opt.imgsz is not None and len(opt.imgsz) > 2:
        parser.error(f"--img-size takes one or two values, got {len(opt.imgsz)}")
    return opt


def run(weights: str = "yolov5s.pt", include=("torchscript", "onnx"), **options) -> list:
    """Export weights to each format in include (other keywords: ExportCommand's fields); returns one
    models.export.Exported per written file.

    Exports are dynamic unless static (dynamic=True is accepted, as YOLOv5's flag, and changes nothing)."""
    o = ExportCommand(weights=weights, include=include, **options)
    imgsz = None if o.imgsz is None else tuple([o.imgsz] * 2 if isinstance(o.imgsz, int) else o.imgsz)
    engine_options = ExportOptions(
        imgsz=imgsz * 2 if imgsz is not None and len(imgsz) == 1 else imgsz,
        batch=o.batch_size,
        dynamic=not o.static,
        half=o.half,
        simplify=o.simplify,
        opset=o.opset,
        int8=o.int8,
        data=o.data,
        calib_images=o.calib_images,
        workspace_gb=o.workspace,
        onnx_quantizer=o.onnx_quantizer,
    )
    results = export(o.weights, list(o.include), engine_options, select_device(o.device))
    for result in results:
        LOGGER.info(result.line())
    return results


def main(argv: list[str] | None = None) -> int:
    """Export from the command line; 0 on success, 1 with one ERROR line on a bad input."""
    opt = parse_opt(argv)
    return run_cli(lambda: run(**vars(opt)) and None)


if __name__ == "__main__":
    sys.exit(main())
