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


OUTPUT_LAYOUT = "output_layout"  # metadata key: "channels" when an export puts out (B, C, N) predictions


@contextlib.contextmanager
def channel_predictions(model: torch.nn.Module):
    """While tracing an edge export: the anchor-free heads put out (B, C, N) predictions, the layout they compute
    in, so the graph holds no transpose (the backend's rows_of is a view). Yields the metadata to add."""
    heads = [] if is_end2end(model) else [m for m in model.modules() if getattr(m, "rows_output", False)]
    for head in heads:
        head.rows_output = False
    try:
        yield {OUTPUT_LAYOUT: "channels"} if heads else {}
    finally:
        for head in heads:
            head.rows_output = True


def channel_layout(raw_metadata: dict) -> bool:
    """Whether an export's metadata says its predictions come out as (B, C, N) (channel_predictions)."""
    return raw_metadata.get(OUTPUT_LAYOUT) == "channels"


def rows_of(predictions: torch.Tensor, channels: bool) -> torch.Tensor:
    """(B, N, C) predictions from a runtime's output, a view of a (B, C, N) one."""
    return predictions.transpose(1, 2) if channels else predictions


def shape_metadata(sample: torch.Tensor, precision: str, dynamic: bool) -> dict:
    """What an edge export records of its input: dynamic height and width (one image per run, up to the export
    size), or the one shape it takes; and the precision it holds."""
    h, w = sample.shape[2:]
    return {"dynamic": dynamic, "batch": 1 if dynamic else sample.shape[0], "imgsz": [h, w], "precision": precision}


def write_metadata(file: Path, metadata: dict, shape: dict) -> None:
    """An edge export's metadata.yaml: the job's, with its shape_metadata."""
    with open(file, "w", encoding="utf-8") as f:
        yaml.safe_dump({**metadata, **shape}, f, sort_keys=False)


def _half_steps(t: torch.Tensor, dim: int) -> torch.Tensor:
    """0.5, 1.5, ... along dim of t (size 1 in every other dim), computed from t's values: a graph that builds its
    grid this way holds no shape arithmetic (arange, expand), which NCNN lacks and torch.export cannot cache."""
    index = [slice(0, 1)] * t.ndim
    index[dim] = slice(None)
    return (t[tuple(index)] * 0 + 1).cumsum(dim) - 0.5


class _TensorGrids:
    """A head's grids built from its feature maps (_half_steps) instead of arange and a per-shape cache, so one
    exported graph serves every input shape; the values are those of the head's own grids."""

    def __init__(self, head):
        self.head, self.maps = head, None

    def decode(self, i: int, p: torch.Tensor) -> torch.Tensor:  # Detect: keep the map its grid is built from
        self.maps = p[..., :1]
        return type(self.head).decode(self.head, i, p)

    def grid(self, i: int, nx, ny, dtype: torch.dtype, device):  # Detect's (cell offsets, anchor sizes) in pixels
        xs, ys = _half_steps(self.maps, 3), _half_steps(self.maps, 2)
        offsets = torch.cat((xs + ys * 0, ys + xs * 0), 4) - 1  # arange - 0.5, as Detect's
        head = self.head
        return offsets, (head.anchors[i] * head.stride[i]).view(1, head.na, 1, 1, 2).to(dtype)

    def anchor_points(self, maps: list[torch.Tensor], dtype: torch.dtype):  # AnchorFreeDetect's (2, N), (1, N)
        points, strides = [], []
        for stride, m in zip(self.head.stride, maps):
            xs, ys = _half_steps(m[:, :1], 3), _half_steps(m[:, :1], 2)
            xv, yv = xs + ys * 0, ys + xs * 0
            points.append(torch.cat((xv, yv), 1).view(2, -1))
            strides.append((xv * 0 + stride.to(dtype)).view(1, -1))
        return torch.cat(points, 1), torch.cat(strides, 1)


@contextlib.contextmanager
def tensor_grids(model: torch.nn.Module):
    """While exporting a shape-dynamic graph: every detection head of model builds its grids with _TensorGrids;
    the heads are as before afterwards."""
    # each head's own grid method is replaced: _anchor_points (anchor-free heads) or decode and _grid (anchor-based)
    heads = [m for m in model.modules() if hasattr(m, "_anchor_points") or hasattr(m, "_grid")]
    for head in heads:
        grids = _TensorGrids(head)
        if hasattr(head, "_anchor_points"):
            head._anchor_points = grids.anchor_points
        else:
            head.decode, head._grid = grids.decode, grids.grid
    try:
        yield
    finally:
        for head in heads:
            for name in ("decode", "_grid", "_anchor_points"):
                head.__dict__.pop(name, None)
