"""What the NCNN export does to its graph for speed (models/export/ncnn_format.lean_param, edge.channel_predictions):
a Reshape that takes its sizes from a second blob reads a 2-D input (NCNN copies a 3-D one element by element in
that case), and anchor-free predictions come out as (B, C, N), transposed by the backend as a view. Each change keeps
the values: checked by NCNN itself on a small graph and against the model's own rows."""

import shutil

import numpy as np
import pytest
import torch
import yaml

from models.export.backends import load_backend
from models.export.edge import channel_layout, channel_predictions, rows_of, tensor_grids
from models.export.exporter import ExportOptions, export
from models.export.ncnn_format import check_param, lean_param
from models.nn.head import is_end2end, set_end2end
from models.nn.yolo import Model
from models.weights.checkpoint import load_model
from tests.models.export.edge_helpers import needs, raw_agreement

# A data blob and a reference blob whose width and height the Reshape takes (as pnnx writes YOLO11's attention)
RESHAPE_BY_REFERENCE = """7767517
3 3
Input                    in0                      0 1 data
Input                    in1                      0 1 ref
Reshape                  reshape_9                2 1 data ref out 12=0 13=0 6="1w,1h,128,1"
"""


def test_a_reshape_by_reference_reads_a_flattened_input(tmp_path):
    lean = lean_param(RESHAPE_BY_REFERENCE)
    layers = lean.splitlines()[2:]
    assert lean.splitlines()[1] == "4 4"  # one layer and one blob more, counted in the header
    assert layers[2].split()[:6] == ["Reshape", "reshape_9_2d", "1", "1", "data", "data_2d"]
    assert layers[3].split()[4:6] == ["data_2d", "ref"]
    (tmp_path / "lean.param").write_text(lean)
    check_param(tmp_path / "lean.param")  # still reads as an NCNN .param


def test_ncnn_gives_the_same_values_after_the_flattening(tmp_path):
    ncnn = pytest.importorskip("ncnn", reason="the ncnn package (requirements-edge.txt) is not installed")
    data = np.random.default_rng(0).random((2, 64, 500), dtype=np.float32)  # YOLO11's heads x channels x cells
    reference = np.zeros((128, 20, 25), dtype=np.float32)  # a 20x25 map: the sizes the Reshape restores
    outputs = []
    for name, text in (("pnnx", RESHAPE_BY_REFERENCE), ("lean", lean_param(RESHAPE_BY_REFERENCE))):
        (tmp_path / f"{name}.param").write_text(text)
        net = ncnn.Net()
        assert net.load_param(str(tmp_path / f"{name}.param")) == 0
        with net.create_extractor() as extractor:
            extractor.input("data", ncnn.Mat(data).clone())
            extractor.input("ref", ncnn.Mat(reference).clone())
            status, out = extractor.extract("out")
            assert status == 0
            outputs.append(np.array(out))
    assert outputs[0].shape == outputs[1].shape == (128, 20, 25)
    np.testing.assert_array_equal(outputs[1], outputs[0])
    np.testing.assert_array_equal(outputs[1].reshape(-1), data.reshape(-1))


def test_a_graph_without_such_a_reshape_is_left_as_it_is():
    plain = '7767517\n2 2\nInput in0 0 1 in0\nReshape r 1 1 in0 out 6="*(0h,0w),144"\n'
    assert lean_param(plain) == plain


@pytest.mark.parametrize("cfg", ["yolo11n.yaml", "yolo26n.yaml", "yolov5n.yaml"])
def test_channel_predictions_are_the_rows_transposed(cfg):
    model = Model(cfg, nc=3).eval()  # built from its YAML, random weights: no checkpoint needed for equal layouts
    set_end2end(model, False)
    x = torch.rand(1, 3, 96, 128)
    with torch.no_grad():
        expected = model(x)[0]
        with channel_predictions(model) as layout, tensor_grids(model):
            got = model(x)[0]
        after = model(x)[0]
    anchor_free = getattr(model.model[-1], "anchor_free", False)
    assert channel_layout(layout) is anchor_free  # YOLOv5's head keeps its rows and says nothing
    torch.testing.assert_close(rows_of(got, channel_layout(layout)), expected, rtol=0, atol=0)
    torch.testing.assert_close(after, expected, rtol=0, atol=0)  # the heads are switched back


def test_an_end_to_end_head_keeps_its_final_boxes():
    model = Model("yolo26n.yaml", nc=3).eval()
    assert is_end2end(model)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)[0]
        with channel_predictions(model) as layout:
            got = model(x)[0]
    assert layout == {} and got.shape == expected.shape  # (B, max_det, 6) rows: nothing to transpose


@pytest.mark.slow
def test_yolo11n_export_has_neither_transpose_nor_batch_reshape(tmp_path, shared):
    # one export: only pnnx's own graph shows what reached NCNN (128 px, the smallest with all three levels > 1 cell)
    needs("pnnx", "ncnn")
    weights = tmp_path / "yolo11n_random.pt"
    shutil.copy(shared / "reference/ultralytics/yolo11n_random.pt", weights)
    export(weights, ["ncnn"], ExportOptions(imgsz=(128, 128)), torch.device("cpu"))
    folder = tmp_path / "yolo11n_random_ncnn_model"
    layers = [line.split() for line in (folder / "model.ncnn.param").read_text().splitlines()[2:]]
    assert layers[-1][0] == "Concat" and "out0" in layers[-1]  # (5 + nc, N) as concatenated, no Permute after
    by_reference = [fields for fields in layers if fields[0] == "Reshape" and fields[2] == "2"]
    assert by_reference and all(fields[4].endswith("_2d") for fields in by_reference)  # the attention's two
    assert yaml.safe_load((folder / "metadata.yaml").read_text())["output_layout"] == "channels"
    backend, model = load_backend(folder), load_model(weights, torch.device("cpu"))
    set_end2end(model, False)
    images = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:2]
    result = raw_agreement(model, backend, images, 128)
    assert result.total == 2 * 336 and result.rate == 1.0, result.line()
