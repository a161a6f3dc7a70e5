"""Segment models: the task declared once and decided from the YAML, the segment heads' outputs, their configs
priced exactly and checked."""

import pytest
import torch
import yaml

from models.nn.config import config_parameters, load_cfg
from models.nn.family import YOLO26, YOLOV5, YOLOV8
from models.nn.segment import MaskOutputs
from models.nn.task import DETECT, SEGMENT, task_named, task_of_checkpoint, task_of_config, task_of_export
from models.nn.yolo import Model, count_parameters
from utils.errors import ModelConfigError

SEG_YAMLS = {
    "yolov5n-seg.yaml": YOLOV5,
    "yolov8n-seg.yaml": YOLOV8,
    "yolo11n-seg.yaml": YOLOV8,
    "yolo26n-seg.yaml": YOLO26,
}


@pytest.mark.parametrize("name", ["yolov5s.yaml", "yolov8n.yaml", "yolo11n.yaml", "yolo26n.yaml"])
def test_detect_yamls_are_detect(name):
    assert task_of_config(load_cfg(name)) is DETECT


@pytest.mark.parametrize("scale", "nsmlx")
@pytest.mark.parametrize("stem", ["yolov5", "yolov8", "yolo11", "yolo26"])
def test_every_seg_yaml_is_a_segment_config_of_its_family(stem, scale):
    cfg = load_cfg(f"{stem}{scale}-seg.yaml")
    assert task_of_config(cfg) is SEGMENT
    params = config_parameters(cfg)  # planned and priced without building
    detect = config_parameters(load_cfg(f"{stem}{scale}.yaml"))
    assert params > detect  # the prototypes and coefficients on top of the detector


@pytest.mark.parametrize("name", SEG_YAMLS)
def test_seg_model_is_priced_exactly_and_outputs_masks(name):
    torch.manual_seed(0)
    model = Model(name, nc=3)
    assert model.task is SEGMENT and model.family is SEG_YAMLS[name]
    assert count_parameters(model) == config_parameters(model.yaml)
    x = torch.rand(2, 3, 128, 160)
    out = model.eval()(x)
    assert isinstance(out, MaskOutputs) and len(out) == 2  # (predictions, maps): detection engines read boxes
    predictions = out[0]
    rows = 6 if model.end2end else 5 + 3  # end-to-end: final x1 y1 x2 y2 score class
    assert predictions.shape[0] == 2 and predictions.shape[2] == rows
    assert out.coefficients.shape == (2, predictions.shape[1], 32)
    assert out.protos.shape == (2, 32, 32, 40)  # a quarter of the input
    train = model.train()(x)
    assert set(train) >= {"detect", "protos"} and train["protos"].shape == (2, 32, 32, 40)


def test_detect_part_of_a_seg_model_is_the_detectors():
    """A Segment head's predictions are its Detect's, channel for channel: the coefficients only follow them."""
    torch.manual_seed(0)
    seg = Model("yolov5n-seg.yaml", nc=2).eval()
    head = seg.model[-1]
    x = torch.rand(1, 3, 64, 64)
    out = seg(x)
    raw = out[1][0]  # level 0 raw map (B, na, ny, nx, 5 + nc + nm)
    assert raw.shape[-1] == 5 + 2 + 32
    level0 = out[0][:, : raw[..., 0].numel()]
    assert torch.allclose(level0[..., 4:], raw[..., 4 : 5 + 2].sigmoid().reshape(1, -1, 3))
    assert torch.equal(out.coefficients[:, : raw[..., 0].numel()], raw[..., 5 + 2 :].reshape(1, -1, 32))
    assert head.nm == 32


def test_end_to_end_rows_carry_their_own_cells_coefficients():
    torch.manual_seed(0)
    model = Model("yolo26n-seg.yaml", nc=4).eval()
    head = model.model[-1]
    x = torch.rand(1, 3, 96, 128)
    out = model(x)
    features = []
    hook = head.register_forward_pre_hook(lambda m, args: features.append(args[0]))
    with torch.no_grad():
        model(x)
    hook.remove()
    detections, _, cells = head.predict(features[0])
    assert torch.equal(detections, out[0])
    maps = [b(f).flatten(2) for b, f in zip(head.one2one_cv4, features[0])]
    coefficients = torch.cat(maps, 2)[0].T  # (N, nm), the one-to-one branch's
    real = cells[0] < coefficients.shape[0]
    assert real.any()
    assert torch.allclose(out.coefficients[0][real], coefficients[cells[0][real]], atol=1e-6)
    assert not out.coefficients[0][~real].any()  # placeholder rows get zeros
    model.end2end = False  # the one-to-many predictions for NMS, one row per cell
    assert model(x).coefficients.shape == (1, (12 * 16 + 6 * 8 + 3 * 4), 32)


def test_task_of_checkpoint_and_export():
    seg, det = load_cfg("yolo11n-seg.yaml"), load_cfg("yolo11n.yaml")
    assert task_of_checkpoint({"yaml": det}) is DETECT  # written before tasks were recorded
    assert task_of_checkpoint({"yaml": seg}) is SEGMENT  # an official -seg file: its config says
    assert task_of_checkpoint({"yaml": seg, "task": "segment"}) is SEGMENT
    with pytest.raises(ModelConfigError, match="records the task 'detect' but its model config has a segment head"):
        task_of_checkpoint({"yaml": seg, "task": "detect"})
    with pytest.raises(ModelConfigError, match="unknown model task 'pose'"):
        task_named("pose")
    assert task_of_export({}) is DETECT and task_of_export({"task": "segment"}) is SEGMENT
    with pytest.raises(ModelConfigError, match="not a detect one"):
        Model(seg, task=DETECT)


def test_task_declares_what_engines_need():
    assert SEGMENT.head(YOLOV5) == "Segment" and SEGMENT.head(YOLO26) == "AnchorFreeSegment26"
    assert DETECT.head(YOLOV8) == "AnchorFreeDetect"
    assert DETECT.loss_key(YOLOV8) == YOLOV8.loss and SEGMENT.loss_key(YOLOV5) == "yolov5-segment"
    assert SEGMENT.masks and not DETECT.masks and SEGMENT.metrics == ("bbox", "segm")


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        ("[[16, 19, 22], 1, Segment, [nc, 32]]", "must be \\[masks, prototype channels\\]"),
        ("[[16, 19, 22], 1, Segment, [nc, 0, 256]]", "must be \\[masks, prototype channels\\]"),
        ("[[16, 19, 22], 1, Segment, [nc, 5000, 256]]", "masks <= 1024"),
        ("[[16, 19, 22], 1, Segment, [nc, 32, 99999999]]", "prototype channels, more than"),
        ("[[16, 19, 22], 1, Segment, [nc, 32, x]]", "must be \\[masks, prototype channels\\]"),
    ],
)
def test_bad_segment_heads_are_one_line_errors(head, reason):
    cfg = load_cfg("yolo11n-seg.yaml")
    f, n, name, args = yaml.safe_load(head)
    cfg["head"][-1] = [f, n, name, args]
    with pytest.raises(ModelConfigError, match=reason) as error:
        Model(cfg)
    assert "\n" not in str(error.value)


def test_a_segment_entry_must_be_last():
    cfg = load_cfg("yolov8n-seg.yaml")
    cfg["head"].insert(0, [[-1], 1, "Segment", ["nc", 32, 256]])
    with pytest.raises(ModelConfigError, match="only it, must be Detect or Segment"):
        Model(cfg)
