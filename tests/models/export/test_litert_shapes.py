"""A LiteRT export's input shapes (models/export/litert_format.py): one signature per shape, sharing one copy of the
weights; an input runs in the smallest signature that holds it (test.py's rectangular batches in their own shape give
the .pt's rows), a smaller one padded at the top left with only its own cells' rows kept, a larger one refused in one
line. Slow (one litert-torch conversion of four shapes); skipped, with the reason, without litert-torch and
ai-edge-litert (requirements-edge.txt) or ../shared."""

import re
import shutil

import numpy as np
import pytest
import torch

from models.export.backends import load_backend
from models.export.exporter import ExportOptions, export
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import needs
from utils.data.augment import letterbox
from utils.errors import BackendError
from utils.images import read_image_checked

SIZE = 64  # signatures 64x64, 64x96, 96x64 and 96x96 (test.py's rectangles at 64 reach 96)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, shared):
    needs("litert_torch", "ai_edge_litert")
    folder = tmp_path_factory.mktemp("litert_shapes")
    shutil.copy(shared / "weights/yolov5n.pt", folder / "yolov5n.pt")
    [result] = export(folder / "yolov5n.pt", ["litert"], ExportOptions(imgsz=(SIZE, SIZE)), torch.device("cpu"))
    model = load_model(folder / "yolov5n.pt", torch.device("cpu"))
    return load_backend(result.path), model, result.path


def _batch(shared, shape: tuple[int, int], count: int) -> torch.Tensor:
    """count COCO128 images letterboxed into shape (h, w), as test.py's rectangular batches are."""
    images = []
    for path in sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:count]:
        image, _ = read_image_checked(str(path))
        boxed = letterbox(image, shape, auto=False, scaleup=False)[0]
        images.append(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1)))
    return torch.from_numpy(np.stack(images)).float() / 255


@pytest.mark.slow
def test_signatures_share_the_weights(exported):
    backend, model, path = exported
    shapes = [s.shape[2:] for s in backend.signatures]
    assert shapes == [(64, 64), (64, 96), (96, 64), (96, 96)] and backend.fixed_shape is None
    weight_bytes = 4 * sum(p.numel() for p in model.parameters())  # float32
    assert path.stat().st_size < 1.3 * weight_bytes  # four copies would be 4x


@pytest.mark.slow
def test_a_rectangular_batch_in_its_own_shape_gives_the_pt_rows(exported, shared):
    backend, model, _ = exported
    x = _batch(shared, (64, 96), 3)  # three images through a batch-1 signature
    with torch.no_grad():
        expected, got = model(x)[0], backend(x)[0]
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < 0.05  # pixels and scores


@pytest.mark.slow
def test_a_smaller_input_keeps_its_own_rows_and_a_larger_one_is_refused(exported, shared):
    backend, model, path = exported
    x = _batch(shared, (32, 64), 2)  # runs at the top left of 64x64
    canvas = torch.full((2, 3, 64, 64), 114 / 255)
    canvas[..., :32, :64] = x
    with torch.no_grad():
        got, whole, own = backend(x)[0], model(canvas)[0], model(x)[0]
    # the rows of the 32x64 input's cells: level by level, each anchor's cells over the input's part of the grid
    kept, start = [], 0
    for stride in (8, 16, 32):
        cells = whole[:, start : start + 3 * (64 // stride) ** 2].view(2, 3, 64 // stride, 64 // stride, -1)
        kept.append(cells[:, :, : 32 // stride].reshape(2, -1, whole.shape[-1]))
        start += 3 * (64 // stride) ** 2
    expected = torch.cat(kept, 1)
    assert got.shape == expected.shape == own.shape
    assert (got - expected).abs().max() < 0.05
    with pytest.raises(BackendError, match=re.escape(f"{path} takes inputs up to 96x96 but got a 128x64 input")):
        backend(torch.zeros(1, 3, 128, 64))
