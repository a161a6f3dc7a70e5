"""Run by tests/models/export/test_int8.py in a pytest process of its own (see there).

INT8 exports (models/export/quantize.py, export.py --int8): calibration images, the nodes kept in float, OpenVINO (NNCF)
and ONNX Runtime (QDQ) exports that detect.py, test.py and the Detector run, and one-line refusals.

The quick tests quantize the real yolov5n at 128 px on 8 COCO128 images; the slow ones check COCO128 mAP at 640."""

import importlib.util
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import yaml
from int8_helpers import NEEDS, data_yaml, needs, run

import detect
import export
from models.export.backends import load_backend
from models.export.quantize import NNCF_ONNX_SPEED, CalibrationImages, calibration_files, float_nodes, onnx_float_nodes
from utils.boxes import non_max_suppression
from utils.data.augment import letterbox
from utils.images import read_image_checked


@pytest.fixture(scope="module")
def int8_exports(tmp_path_factory, shared) -> Path:
    """yolov5n exported at 128 px, float and INT8 (8 calibration images), to every format installed."""
    folder = tmp_path_factory.mktemp("int8")
    shutil.copy(shared / "weights/yolov5n.pt", folder / "yolov5n.pt")
    data = data_yaml(folder, shared, images=8)
    formats = [f for f, packages in NEEDS.items() if all(importlib.util.find_spec(p) for p in packages)]
    if not formats:
        pytest.skip("neither openvino+nncf nor onnx+onnxruntime is installed")
    weights = folder / "yolov5n.pt"
    run("export.py", "--weights", weights, "--include", *formats, "--img", 128)
    output = run("export.py", "--weights", weights, "--include", *formats, "--img", 128, "--int8", "--data", data)
    (folder / "int8_export.log").write_text(output)
    return folder


def onnx_runtime_ops(path: Path, tmp_path: Path) -> Counter:
    """How many nodes of each op type ONNX Runtime's CPU provider runs for the ONNX model at path (its optimized
    graph, after the QDQ fusions that turn DequantizeLinear -> Conv -> QuantizeLinear into QLinearConv)."""
    import onnx
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3  # it warns that the saved graph is specific to this CPU: that is the point here
    onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    nodes = onnx.load(options.optimized_model_filepath).graph.node
    return Counter(n.op_type for n in nodes)


def _bus(shared: Path) -> torch.Tensor:
    image, _ = read_image_checked(str(shared / "images/bus.jpg"))
    boxed = letterbox(image, 128, stride=32, auto=True)[0]
    return torch.from_numpy(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))).float()[None] / 255


@pytest.mark.parametrize("fmt", ["openvino", "onnx"])
def test_int8_export_carries_precision_and_detects_like_float(int8_exports, shared, fmt):
    needs(fmt)
    name = {"openvino": "yolov5n{}_openvino_model", "onnx": "yolov5n{}.onnx"}[fmt]
    float_backend = load_backend(int8_exports / name.format(""))
    backend = load_backend(int8_exports / name.format("_int8"))
    assert float_backend.precision == "fp32" and backend.precision == "int8"
    assert backend.calibration_images == 8 and backend.fixed_shape is None
    x = _bus(shared)
    with torch.no_grad():
        a = non_max_suppression(float_backend(x)[0], 0.25, 0.45)[0]
        b = non_max_suppression(backend(x)[0], 0.25, 0.45)[0]
    assert len(a) > 0 and len(b) > 0
    confident = a[a[:, 4] > 0.5]  # at 128 px with 8 calibration images: the clear detections survive INT8
    assert len(confident) > 0
    iou = torchvision.ops.box_iou(confident[:, :4], b[:, :4])
    for i in range(len(confident)):
        j = int(iou[i].argmax())
        assert iou[i, j] > 0.6 and confident[i, 5] == b[j, 5], (confident, b)
        assert abs(float(confident[i, 4]) - float(b[j, 4])) < 0.15


def test_openvino_int8_keeps_the_decoding_in_float(int8_exports):
    needs("openvino")
    import openvino as ov

    model = ov.Core().read_model(str(int8_exports / "yolov5n_int8_openvino_model/yolov5n.xml"))
    ops = model.get_ordered_ops()
    quantized = [op for op in ops if op.get_type_name() == "FakeQuantize"]
    assert len(quantized) > 40  # the convolutions' inputs and weights
    for op in ops:
        if op.get_type_name() in ("Sigmoid", "Result"):  # nothing quantized feeds the sigmoid or the output
            source = op.input(0).get_source_output().get_node()
            assert source.get_type_name() != "FakeQuantize", op.get_friendly_name()
    first = [op for op in ops if op.get_type_name() == "Convolution"][0]
    assert first.input(0).get_source_output().get_node().get_type_name() == "Parameter"  # the image is not quantized


def test_onnx_int8_keeps_the_decoding_in_float(int8_exports):
    needs("onnx")
    import onnx

    proto = onnx.load(str(int8_exports / "yolov5n_int8.onnx"))
    producers = {out: n for n in proto.graph.node for out in n.output}
    assert sum(n.op_type == "QuantizeLinear" for n in proto.graph.node) > 40
    for node in proto.graph.node:
        if node.op_type == "Sigmoid" and "model.24" in node.name:
            assert producers[node.input[0]].op_type != "DequantizeLinear", node.name
    meta = {p.key: json.loads(p.value) for p in proto.metadata_props}
    assert meta["precision"] == "int8" and meta["calibration_images"] == 8 and meta["dynamic"] is True


def test_float_nodes_follow_the_graph():
    """Convolutions a->b->c, c feeding a decode d->e and b feeding c: the first and last convolutions and the
    decode stay float, the middle convolution does not."""
    order = ["a", "b", "c", "d", "e"]
    successors = {"a": ["b"], "b": ["c"], "c": ["d"], "d": ["e"]}
    assert float_nodes(order, successors, {"a", "b", "c"}, {"a"}) == {"a", "c", "d", "e"}


def test_onnx_float_nodes_of_yolov5n_are_the_first_conv_and_the_head(int8_exports):
    needs("onnx")
    import onnx

    kept = onnx_float_nodes(onnx.load(str(int8_exports / "yolov5n.onnx")))
    assert "/model/model.0/conv/Conv" in kept and "/model/model.24/m.0/Conv" in kept
    assert any("model.24/Sigmoid" in n for n in kept) and not any("model.1/" in n for n in kept)
    assert all(n.startswith(("/model/model.24/", "/model/model.0/conv/Conv")) for n in kept)


def test_calibration_images_are_evenly_spaced_and_letterboxed(tmp_path, shared):
    data = data_yaml(tmp_path, shared)
    files = calibration_files(data, 4)
    every = sorted(str(p) for p in (shared / "datasets/coco128/images/train2017").glob("*.jpg"))
    assert files == [every[0], every[32], every[64], every[96]]
    assert len(calibration_files(data, 1000)) == 128  # all when the split has fewer
    arrays = list(CalibrationImages(files[:2], (640, 640), 32, auto=True))
    assert [a.shape for a in arrays] == [(1, 3, 480, 640), (1, 3, 640, 448)]  # rectangles, as detect.py
    assert arrays[0].dtype == np.float32 and 0 <= arrays[0].min() and arrays[0].max() <= 1


def _one_error_line(log) -> str:
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert len(errors) == 1 and "\n" not in errors[0] and "Traceback" not in log.text, log.text
    return errors[0]


def test_int8_without_data_is_one_line(tmp_path, shared, log):
    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    assert export.main(["--weights", str(tmp_path / "yolov5n.pt"), "--include", "openvino", "--int8"]) == 1
    assert "--int8 needs --data" in _one_error_line(log)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolov5n.pt"]


def test_int8_split_without_images_is_one_line(tmp_path, shared, log):
    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    (tmp_path / "empty").mkdir()
    data = tmp_path / "empty.yaml"
    data.write_text(yaml.safe_dump({"path": str(tmp_path), "train": "empty", "val": "empty", "names": ["a"]}))
    argv = ["--weights", str(tmp_path / "yolov5n.pt"), "--include", "onnx", "--int8", "--data", str(data)]
    assert export.main(argv) == 1
    assert "no calibration images for --int8" in _one_error_line(log)
    assert not (tmp_path / "yolov5n_int8.onnx").exists()


def test_int8_missing_nncf_is_one_line(tmp_path, shared, monkeypatch, log):
    monkeypatch.setitem(sys.modules, "nncf", None)  # as if nncf were not installed
    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    argv = ["--weights", str(tmp_path / "yolov5n.pt"), "--include", "openvino", "--int8"]
    assert export.main([*argv, "--data", str(data_yaml(tmp_path, shared, 2))]) == 1
    assert "needs the nncf package: pip install -r requirements-export.txt" in _one_error_line(log)


def test_int8_torchscript_is_refused(tmp_path, shared, log):
    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    argv = ["--weights", str(tmp_path / "yolov5n.pt"), "--include", "torchscript", "--int8"]
    assert export.main([*argv, "--data", str(data_yaml(tmp_path, shared, 2))]) == 1
    assert "not torchscript" in _one_error_line(log)


def test_corrupt_int8_openvino_folder_is_one_line(int8_exports, shared, tmp_path, log):
    needs("openvino")
    broken = tmp_path / "yolov5n_int8_openvino_model"
    shutil.copytree(int8_exports / broken.name, broken)
    data = (broken / "yolov5n.bin").read_bytes()
    (broken / "yolov5n.bin").write_bytes(data[: len(data) // 2])
    argv = ["--weights", str(broken), "--source", str(shared / "images/bus.jpg"), "--project", str(tmp_path)]
    assert detect.main(argv) == 1
    assert "is truncated" in _one_error_line(log)


def test_detect_runs_an_int8_export(int8_exports, shared, tmp_path, log):
    fmt = "openvino" if importlib.util.find_spec("nncf") else "onnx"
    needs(fmt)
    path = int8_exports / ("yolov5n_int8_openvino_model" if fmt == "openvino" else "yolov5n_int8.onnx")
    argv = ["--weights", str(path), "--source", str(shared / "images/bus.jpg"), "--img", "128"]
    assert detect.main([*argv, "--save-txt", "--nosave", "--project", str(tmp_path)]) == 0
    assert "int8 (calibrated on 8 images)" in log.text and "dynamic input (rectangular letterbox)" in log.text
    labels = np.loadtxt(tmp_path / "exp/labels/bus.txt", ndmin=2)
    assert len(labels) > 0 and 0 in labels[:, 0]  # persons


def test_openvino_int8_on_two_threads_runs_images_side_by_side_with_the_same_outputs(int8_exports, shared):
    needs("openvino")
    path, threads = int8_exports / "yolov5n_int8_openvino_model", torch.get_num_threads()
    x = torch.cat([_bus(shared), _bus(shared).flip(-1), _bus(shared).flip(-2)])
    try:
        torch.set_num_threads(1)
        one = load_backend(path)
        torch.set_num_threads(2)
        two = load_backend(path)
    finally:
        torch.set_num_threads(threads)
    assert one.parallel_runs == 1 and two.parallel_runs == 2
    assert one.compiled[True].get_property("NUM_STREAMS") == 1  # compiled at load, on 1 thread
    with torch.inference_mode():
        expected = torch.cat([one(x[i : i + 1])[0] for i in range(3)])
        batch = two(x)[0]  # test.py's batches: each image in a stream of its own (compiled in the background)
        after = x[1:2]
        two.start(after)  # detect.py's next image, started before this one is collected
        ahead = two(x[:1])[0], two(after)[0]  # x[:1], not started, ran alone: the first time on the two streams
        assert list(two.compiled) == [True] and two.compiled[True].get_property("NUM_STREAMS") == 2
        alone = two(x[2:3])[0]  # a second image alone: on a model of one stream, on all threads
    assert two.started == {}
    assert two.compiled[False].get_property("NUM_STREAMS") == 1
    torch.testing.assert_close(alone, expected[2:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(batch, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat(ahead), expected[:2], atol=1e-4, rtol=1e-4)


# --- acceptance: COCO128 mAP at 640 within 0.01 of the float32 .pt (slow: calibration and validation at 640) ----


def test_onnxruntime_quantizer_writes_a_qdq_model_that_runs(tmp_path, shared):
    needs("onnx")
    import onnx

    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    argv = ["--weights", str(tmp_path / "yolov5n.pt"), "--include", "onnx", "--img", "128", "--int8"]
    argv += ["--data", str(data_yaml(tmp_path, shared, images=4)), "--onnx-quantizer", "onnxruntime"]
    assert export.main(argv) == 0
    path = tmp_path / "yolov5n_int8.onnx"
    nodes = onnx.load(str(path)).graph.node
    convs = [n for n in nodes if n.op_type == "Conv"]
    assert sum(n.op_type == "DequantizeLinear" for n in nodes) >= len(convs)  # weights and inputs of most convs
    backend = load_backend(path)
    assert backend.precision == "int8" and backend.calibration_images == 4
    assert non_max_suppression(backend(_bus(shared))[0], 0.25, 0.45)[0].shape[1] == 6
    ops = onnx_runtime_ops(path, tmp_path)  # its convolutions' outputs are quantized: ONNX Runtime runs them in int8
    assert ops["QLinearConv"] > 40 and ops["Conv"] < 10, ops


def test_onnx_int8_by_nncf_says_onnx_runtime_runs_its_convolutions_in_float(int8_exports, tmp_path):
    needs("onnx")
    needs("openvino")  # NNCF, the default ONNX quantizer
    ops = onnx_runtime_ops(int8_exports / "yolov5n_int8.onnx", tmp_path)
    assert ops["QLinearConv"] == 0 and ops["Conv"] > 40, ops  # what the export's note says
    assert NNCF_ONNX_SPEED in (int8_exports / "int8_export.log").read_text()
