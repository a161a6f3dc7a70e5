"""torch.hub entry points: `torch.hub.load(repo_dir, 'custom', path='best.pt', source='local')` -> a Detector.

The named models (yolov5n ... yolov5x) load the official release weights, downloaded into weights/ when online;
offline, a missing file is a DownloadError with a one-line message. Every entry returns models.detector.Detector.
"""

from pathlib import Path

from models.detector import Detector
from models.yolo import Model
from utils.downloads import attempt_download_weights

dependencies = ["torch", "torchvision", "numpy", "cv2", "yaml", "PIL"]  # module names torch.hub checks

MODELS_DIR = Path(__file__).resolve().parent / "models"


def custom(path: str | Path | list = "best.pt", device: str = "", **kwargs) -> Detector:
    """A Detector of your weights file (or a list of files: an ensemble); kwargs as Detector's (conf_thres, ...)."""
    return Detector(path, device=device, **kwargs)


def _official(name: str, pretrained: bool, device: str, kwargs: dict) -> Detector:
    """A Detector of the official weights name.pt (downloaded into weights/), or the untrained name.yaml model."""
    if not pretrained:
        return Detector(Model(MODELS_DIR / f"{name}.yaml"), device=device, **kwargs)
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
