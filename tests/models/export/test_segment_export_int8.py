"""INT8 of segment exports: which nodes quantize.py keeps in float. Beyond a detection graph's (the first
convolution, the last convolutions and the decoding), a segment graph keeps the layers of its prototype branch and
the neck block that branch reads; a graph with one output keeps exactly what it kept before."""

import onnx
import pytest
import torch

from models.export.exporter import ExportOptions
from models.export.exporter import export as export_weights
from models.export.quantize import LAYER, float_nodes, onnx_float_nodes
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint

# a toy graph named as torch.onnx names nodes: two stem convs (layer 0), a neck block (layer 1) read by the head
# (layer 2), whose prototype convolutions end in a second output and whose prediction convolutions in the first
STEM, STEM2 = "/model/model.0/conv/Conv", "/model/model.0/conv2/Conv"
BLOCK1, BLOCK2 = "/model/model.1/cv1/conv/Conv", "/model/model.1/cv2/conv/Conv"
PROTO1, PROTO2 = "/model/model.2/proto/cv1/conv/Conv", "/model/model.2/proto/cv2/conv/Conv"
HEAD1, HEAD2, CONCAT = "/model/model.2/m/Conv", "/model/model.2/m/Conv2", "/model/model.2/Concat"
ORDER = [STEM, STEM2, BLOCK1, BLOCK2, PROTO1, PROTO2, HEAD1, HEAD2, CONCAT, "output1", "output0"]
SUCCESSORS = {
    STEM: [STEM2],
    STEM2: [BLOCK1],
    BLOCK1: [BLOCK2],
    BLOCK2: [PROTO1, HEAD1],
    PROTO1: [PROTO2],
    PROTO2: ["output1"],
    HEAD1: [HEAD2],
    HEAD2: [CONCAT],
    CONCAT: ["output0"],
}
CONVS = {name for name in ORDER if "Conv" in name}


def test_a_second_output_keeps_the_head_and_the_block_it_reads_in_float():
    kept = float_nodes(ORDER, SUCCESSORS, CONVS, {STEM}, main="output0")
    assert kept == set(ORDER) - {STEM2}  # layers 1 and 2 whole, the first convolution of layer 0


def test_one_output_keeps_what_it_kept_before():
    """A detection graph: everything feeds its single output, so naming it changes nothing."""
    successors = {**SUCCESSORS, PROTO2: [CONCAT]}  # the 'prototypes' joined into the predictions
    before = float_nodes(ORDER, successors, CONVS, {STEM})
    assert float_nodes(ORDER, successors, CONVS, {STEM}, main="output0") == before
    assert before == {STEM, PROTO2, HEAD2, CONCAT, "output1", "output0"}


@pytest.mark.parametrize(
    ("cfg", "layers"), [("yolov5n-seg.yaml", {"0", "17", "24"}), ("yolo11n-seg.yaml", {"0", "16", "23"})]
)
def test_a_segment_onnx_keeps_its_stem_head_and_the_stride_8_block_in_float(tmp_path, cfg, layers):
    """One ONNX export at 64 per family (the graph's names and outputs are what is under test; nothing cheaper has
    them): the layers of the nodes kept in float are the stem, the neck's stride-8 block and the segment head."""
    torch.manual_seed(0)
    weights = tmp_path / "seg.pt"
    save_checkpoint(checkpoint_dict(Model(cfg, nc=2)), weights)
    (result,) = export_weights(weights, ["onnx"], ExportOptions(imgsz=(64, 64)), torch.device("cpu"))
    kept = onnx_float_nodes(onnx.load(str(result.path)))
    assert {match[1] for name in kept if (match := LAYER.search(name))} == layers
    assert any("/proto/" in name for name in kept) and any("/model.0/" in name for name in kept)
