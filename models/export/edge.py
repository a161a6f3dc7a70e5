"""What the edge exports (NCNN, LiteRT, ExecuTorch, CoreML) share: their packages are an extra of their own,
requirements-edge.txt, and a missing one is one line naming it, at export (ExportError) or at load (BackendError)."""

import contextlib
import importlib
import importlib.util
from pathlib import Path

import torch
import yaml

from models.export.runtime import import_optional
from models.nn.head import is_end2end, set_end2end
from utils.errors import BackendError, ExportError
from utils.log import LOGGER

EDGE_INSTALL = "pip install -r requirements-edge.txt"


def require_converter(module: str, what: str):
    """The converter package `module` of an export, or ExportError naming the extra to install."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise ExportError(f"{what} export needs the {module.split('.')[0]} package: {EDGE_INSTALL}")
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ExportError(f"{what} export: the {module} package is installed but cannot be imported: {e}") from None


def import_runtime(module: str):
    """The runtime package `module` of an edge export, or BackendError naming the extra to install."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise BackendError(f"running this export needs the {module.split('.')[0]} package: {EDGE_INSTALL}")
    return import_optional(module)


@contextlib.contextmanager
def without_top_k(job, runtime: str):
    """For a runtime that has no top-k (NCNN, ExecuTorch's XNNPACK): an end-to-end head (YOLO26) exports its
    one-to-many predictions instead, recorded as end2end: false so that they are run with NMS, as Ultralytics does;
    the job's model is switched back afterwards. Yields the metadata to write."""
    end2end = is_end2end(job.model)
    if end2end:
        LOGGER.info(f"{runtime} has no top-k: the end-to-end head exports its one-to-many predictions (NMS after)")
        set_end2end(job.model, False)
    try:
        yield {**job.metadata, "end2end": False} if end2end else dict(job.metadata)
    finally:
        if end2end:
            set_end2end(job.model, True)


def write_static_metadata(file: Path, metadata: dict, sample: torch.Tensor, precision: str) -> None:
    """An edge export's metadata.yaml: the job's, with the one input shape it takes and the precision it holds."""
    h, w = sample.shape[2:]
    static = {"dynamic": False, "batch": sample.shape[0], "imgsz": [h, w], "precision": precision}
    with open(file, "w", encoding="utf-8") as f:
        yaml.safe_dump({**metadata, **static}, f, sort_keys=False)
