"""YOLOv5-architecture models and the safe loader for their weights."""

from models.checkpoint import load_model
from models.yolo import Model

__all__ = ["Model", "load_model"]
