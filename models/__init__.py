"""The models of every family (YOLOv5, YOLOv8, YOLO11, YOLO26) by concern: the networks (models.nn), loading their
weights (models.weights), deployment exports and their backends (models.export), and the Python API (models.api).
The names most scripts need are here: ``from models import Detector, load_model``."""

from models.api.detector import Detector, load_detector
from models.api.results import Results
from models.nn.yolo import Model
from models.weights.checkpoint import load_model
from utils.errors import DetectorError

__all__ = ["Detector", "DetectorError", "Model", "Results", "load_detector", "load_model"]
