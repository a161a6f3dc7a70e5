"""torch.hub entry points: `torch.hub.load(repo_dir, 'custom', path='best.pt', source='local')` -> a Detector.

The named models (yolov5n ... yolov5x, yolov8n ... yolov8x, yolo11n ... yolo11x, yolo26n ... yolo26x) load the
official release weights, downloaded into weights/ when online;
offline, a missing file is a DownloadError with a one-line message. Every entry returns models.api.detector.Detector.
"""

from pathlib import Path

from models.api.detector import Detector
from models.nn.yolo import Model
from utils.downloads import attempt_download_weights

dependencies = ["torch", "torchvision", "numpy", "cv2", "yaml", "PIL"]  # module names torch.hub checks

MODELS_DIR = Path(__file__).resolve().parent / "models"


def custom(path: str | Path | list = "best.pt", device: str = "", **kwargs) -> Detector:
    """A Detector of your weights file (or a list of files: an ensemble); kwargs as Detector's (conf_thres, ...)."""
    return Detector(path, device=device, **kwargs)


def _official(name: str, pretrained: bool, device: str, kwargs: dict) -> Detector:
    """A Detector of the official weights name.pt (downloaded into weights/), or the untrained name.yaml model."""
    if not pretrained:  # models/<name>.yaml where the size has a file (YOLOv5's), else yolo11s: yolo11.yaml at scale s
        own = MODELS_DIR / f"{name}.yaml"
        return Detector(Model(own if own.is_file() else f"{name}.yaml"), device=device, **kwargs)
    return Detector(attempt_download_weights(f"{name}.pt"), device=device, **kwargs)


def yolov5n(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv5n (1.9M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov5n", pretrained, device, kwargs)


def yolov5s(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv5s (7.2M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov5s", pretrained, device, kwargs)


def yolov5m(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv5m (21.2M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov5m", pretrained, device, kwargs)


def yolov5l(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv5l (46.5M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov5l", pretrained, device, kwargs)


def yolov5x(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv5x (86.7M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov5x", pretrained, device, kwargs)


def yolov8n(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv8n (3.2M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov8n", pretrained, device, kwargs)


def yolov8s(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv8s (11.2M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov8s", pretrained, device, kwargs)


def yolov8m(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv8m (25.9M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov8m", pretrained, device, kwargs)


def yolov8l(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv8l (43.7M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov8l", pretrained, device, kwargs)


def yolov8x(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLOv8x (68.2M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolov8x", pretrained, device, kwargs)


def yolo11n(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO11n (2.6M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo11n", pretrained, device, kwargs)


def yolo11s(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO11s (9.5M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo11s", pretrained, device, kwargs)


def yolo11m(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO11m (20.1M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo11m", pretrained, device, kwargs)


def yolo11l(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO11l (25.4M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo11l", pretrained, device, kwargs)


def yolo11x(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO11x (57.0M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo11x", pretrained, device, kwargs)


def yolo26n(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO26n (2.6M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo26n", pretrained, device, kwargs)


def yolo26s(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO26s (10.0M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo26s", pretrained, device, kwargs)


def yolo26m(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO26m (21.9M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo26m", pretrained, device, kwargs)


def yolo26l(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO26l (26.3M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo26l", pretrained, device, kwargs)


def yolo26x(pretrained: bool = True, device: str = "", **kwargs) -> Detector:
    """YOLO26x (59.0M parameters), COCO-pretrained unless pretrained=False."""
    return _official("yolo26x", pretrained, device, kwargs)
