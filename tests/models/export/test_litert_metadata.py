"""A LiteRT export's shape metadata (models/export/litert_format.py): imgsz is the --img-size it was exported at,
which detect.py and test.py default to, whatever its signatures' shapes. Needs no edge package: nothing is
converted."""

import torch

from models.export.exporter import ExportJob, ExportOptions
from models.export.litert_format import shape_metadata, signature_shapes


def _job(size: int, dynamic: bool) -> ExportJob:
    options = ExportOptions(imgsz=(size, size), dynamic=dynamic)
    sample = torch.zeros(1, 3, size, size)
    return ExportJob(torch.nn.Identity(), sample, {"stride": 32}, weights=None, options=options)


def test_a_640_export_holds_test_py_rectangles_and_records_640():
    job = _job(640, dynamic=True)
    shapes = signature_shapes(job)
    assert shapes[0] == (448, 672)  # the smallest signature is a rectangle, not the --img-size square
    assert {(640, 640), (672, 672)} <= set(shapes)
    meta = shape_metadata(job, shapes)
    assert meta["imgsz"] == [640, 640] and meta["dynamic"] is True and meta["batch"] == 1


def test_a_static_export_records_its_one_shape():
    job = _job(320, dynamic=False)
    shapes = signature_shapes(job)
    assert shapes == [(320, 320)]
    assert shape_metadata(job, shapes) == {"dynamic": False, "batch": 1, "imgsz": [320, 320], "precision": "fp32"}
