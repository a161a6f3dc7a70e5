"""YOLOv5-architecture models, the safe loader for their weights, and the Python detection API (Detector)."""

from models.checkpoint import load_model
from models.detector import Detector, load_detector
from models.results import Results
from models.yolo import Model
from utils.errors import DetectorError

__all__ = ["Detector", "DetectorError", "Model", "Results", "load_detector", "load_model"]
