"""LiteRT exports of anchor-free models (models/export/litert_format.py): FP32 predictions come out as rows (B, N, C),
the layout LiteRT computes in, so the graph holds no transpose but its input's, and the backend's rows equal the .pt's.
Slow (one litert-torch conversion, --static: one signature); skipped, with the reason, without litert-torch and
ai-edge-litert (requirements-edge.txt) or ../shared."""

import shutil

import pytest
import torch

from models.export.backends import load_backend
from models.export.exporter import ExportOptions, export
from models.export.litert_format import litert_metadata
from models.nn.head import set_end2end
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import needs, raw_agreement

SIZE = 128  # three levels of 16, 8 and 4 cells a side: the smallest input that checks each level's grid


@pytest.mark.slow
def test_anchor_free_export_puts_out_rows_without_transposes_and_gives_the_pt_rows(tmp_path, shared):
    needs("litert_torch", "ai_edge_litert")
    weights = tmp_path / "yolov8n_random.pt"
    shutil.copy(shared / "reference/ultralytics/yolov8n_random.pt", weights)
    [result] = export(weights, ["litert"], ExportOptions(imgsz=(SIZE, SIZE), dynamic=False), torch.device("cpu"))
    assert "output_layout" not in litert_metadata(result.path)
    backend = load_backend(result.path)
    assert len(backend.signatures) == 1 and backend.fixed_shape == (SIZE, SIZE)
    assert tuple(backend.interpreter.get_output_details()[0]["shape"]) == (1, 336, 85)
    ops = [op["op_name"] for op in backend.interpreter._get_ops_details()]
    assert ops.count("TRANSPOSE") == 1 and ops[0] == "TRANSPOSE"  # the NCHW input's only (YOLOv8: no attention)
    model = load_model(weights, torch.device("cpu"))
    set_end2end(model, False)
    images = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:2]
    agreement = raw_agreement(model, backend, images, SIZE)
    assert agreement.total == 2 * 336 and agreement.rate == 1.0, agreement.line()
