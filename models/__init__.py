"""YOLOv5-architecture models and the safe loader for their weights."""

from models.yolo import Model
from utils.checkpoint import load_model

__all__ = ["Model", "load_model"]
