"""What an export's output may be, given its metadata: real YOLO26 and YOLOv5 outputs pass as what they are, and are
refused as what a lying metadata says they are (fewer names than classes, end2end: false for final detections)."""

import pytest
import torch

from models.export.output_checks import anchor_rows, output_problem
from models.nn.yolo import Model

STRIDES = [8.0, 16.0, 32.0]


@pytest.fixture(scope="module")
def yolo26_outputs() -> dict[str, torch.Tensor]:
    """A random YOLO26n's eval outputs on a 96x128 image: final detections (end-to-end) and the raw one-to-many."""
    torch.manual_seed(0)
    model = Model("yolo26.yaml", nc=80).eval()
    x = torch.rand(2, 3, 96, 128)
    with torch.no_grad():
        end2end = model(x)
        model.end2end = False
        raw = model(x)
    pick = lambda y: y[0] if isinstance(y, (tuple, list)) else y  # noqa: E731
    return {"end2end": pick(end2end), "raw": pick(raw)}


def test_real_outputs_pass_as_what_they_are(yolo26_outputs, small_model):
    assert yolo26_outputs["end2end"].shape[-1] == 6
    assert output_problem(yolo26_outputs["end2end"], (96, 128), 80, True, STRIDES) is None
    assert output_problem(yolo26_outputs["raw"], (96, 128), 80, False, STRIDES) is None
    with torch.no_grad():
        v5 = small_model.eval()(torch.rand(1, 3, 96, 128))[0]  # YOLOv5: 3 anchors per cell, real objectness
    assert v5.shape[1] == anchor_rows(96, 128, STRIDES)[1]
    assert output_problem(v5, (96, 128), 2, False, STRIDES) is None


@pytest.mark.parametrize("names", [1, 3, 79])
def test_fewer_names_than_an_end2end_model_predicts(yolo26_outputs, names):
    out = yolo26_outputs["end2end"]
    if int(out[..., 5].max()) < names:
        pytest.skip(f"this random model's detections use classes below {names} only")
    problem = output_problem(out, (96, 128), names, True, STRIDES)
    assert problem and f"names {names} classes" in problem


def test_final_detections_claimed_raw_are_refused(yolo26_outputs):
    """end2end: false with 1 name: a (B, k, 6) output passes the width check as '5 + 1 class'."""
    problem = output_problem(yolo26_outputs["end2end"], (96, 128), 1, False, STRIDES)
    assert problem and "end2end: false" in problem


def test_each_sign_of_final_detections_on_its_own():
    rows = anchor_rows(64, 64, STRIDES)[0]  # 84: an end-to-end output may have as many rows as the raw one
    scores = torch.linspace(0.9, 0.1, rows)
    sorted_rows = torch.zeros(1, rows, 6)
    sorted_rows[0, :, 4], sorted_rows[0, :, 5] = scores, 0.5
    assert "sorted by score" in output_problem(sorted_rows, (64, 64), 1, False, STRIDES)
    ids_as_scores = sorted_rows.flip(1).clone()
    ids_as_scores[0, :, 5] = torch.arange(rows) % 7
    assert "not probabilities" in output_problem(ids_as_scores, (64, 64), 1, False, STRIDES)
    assert "rows for a 64x64 input" in output_problem(torch.rand(1, 300, 6), (64, 64), 1, False, STRIDES)


def test_constant_objectness_of_an_anchor_free_raw_output_is_not_taken_for_sorted():
    out = torch.rand(1, anchor_rows(64, 64, STRIDES)[0], 85)
    out[..., 4] = 1.0
    assert output_problem(out, (64, 64), 80, False, STRIDES) is None


def test_class_ids_must_be_whole_and_in_range():
    out = torch.zeros(1, 5, 6)
    out[0, :, 5] = torch.tensor([0, 1, 2, 2.5, 1])
    assert "class 2.5" in output_problem(out, (64, 64), 80, True, STRIDES)
    out[0, 3, 5] = -1
    assert "class -1" in output_problem(out, (64, 64), 80, True, STRIDES)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_outputs_are_refused(value):
    out = torch.zeros(1, 5, 6)
    out[0, 2, 1] = value
    assert "NaN or infinite" in output_problem(out, (64, 64), 80, True, STRIDES)


def test_rows_per_cell_must_be_the_recorded_familys(yolo26_outputs, small_model):
    """An export whose metadata names another family than its network is refused by its rows per grid cell: one per
    cell is an anchor-free network (YOLOv8/YOLO11, YOLO26's one-to-many), three is YOLOv5's anchors (issue 35)."""
    raw = yolo26_outputs["raw"]
    with torch.no_grad():
        v5 = small_model.eval()(torch.rand(1, 3, 96, 128))[0]
    assert output_problem(raw, (96, 128), 80, False, STRIDES, anchors=False) is None
    assert output_problem(v5, (96, 128), 2, False, STRIDES, anchors=True) is None
    said = output_problem(raw, (96, 128), 80, False, STRIDES, anchors=True)
    assert said and f"its {raw.shape[1]} rows for a 96x128 input are one per grid cell" in said
    said = output_problem(v5, (96, 128), 2, False, STRIDES, anchors=False)
    assert said and f"its {v5.shape[1]} rows for a 96x128 input are three per grid cell" in said
