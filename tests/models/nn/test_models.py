"""Model construction from YAML: parameter counts, official state-dict layout, fusion, outputs."""

import re

import pytest
import torch
import yaml

from models.nn.config import CFG_DIR, load_cfg
from models.nn.yolo import Model, count_parameters, parse_model
from models.weights.checkpoint import load_checkpoint

# Official YOLOv5 v6+ parameter counts, unfused and fused (Conv+BN folded).
PARAMS = {
    "n": (1_872_157, 1_867_405),
    "s": (7_235_389, 7_225_885),
    "m": (21_190_557, 21_172_173),
    "l": (46_563_709, 46_533_693),
    "x": (86_749_405, 86_705_005),
}


@pytest.mark.slow
@pytest.mark.parametrize("size", list(PARAMS))
def test_parameter_counts(size):
    model = Model(f"yolov5{size}.yaml")
    assert count_parameters(model) == PARAMS[size][0]
    assert count_parameters(model.fuse()) == PARAMS[size][1]


def test_strides_and_anchor_units():
    model = Model("yolov5n.yaml")
    assert model.stride.tolist() == [8.0, 16.0, 32.0]
    # Anchors are stored in grid units of their level: (10, 13) px at stride 8.
    assert torch.allclose(model.model[-1].anchors[0, 0], torch.tensor([10 / 8, 13 / 8]))


def test_state_dict_matches_official_checkpoint(shared):
    official = load_checkpoint(shared / "weights" / "yolov5n.pt")["model"]
    ours = Model("yolov5n.yaml").state_dict()
    assert list(ours) == list(official)
    assert all(ours[k].shape == official[k].shape for k in ours)
    assert "model.24.anchors" in ours and "model.24.m.2.bias" in ours


def test_forward_shapes_train_and_eval():
    model = Model("yolov5n.yaml", nc=3)
    x = torch.rand(2, 3, 128, 96)
    maps = model(x)
    assert [m.shape for m in maps] == [(2, 3, 16, 12, 8), (2, 3, 8, 6, 8), (2, 3, 4, 3, 8)]
    model.eval()
    with torch.no_grad():
        decoded, raw = model(x)
    assert decoded.shape == (2, 3 * (16 * 12 + 8 * 6 + 4 * 3), 8)
    assert ((decoded[..., 4:] >= 0) & (decoded[..., 4:] <= 1)).all()  # scores after sigmoid
    # Box centres fall inside the padded input (within one stride-32 cell of it).
    assert decoded[..., 0].min() > -32 and decoded[..., 0].max() < 96 + 32


def test_fused_model_gives_same_outputs():
    torch.manual_seed(0)
    model = Model("yolov5n.yaml").eval()
    for m in model.modules():  # non-trivial BatchNorm statistics
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.rand(1, 3, 160, 160)
    with torch.no_grad():
        before = model(x)[0]
        after = model.fuse()(x)[0]
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-3)


def test_yaml_parsing():
    cfg = load_cfg("yolov5s.yaml")
    assert cfg["depth_multiple"] == 0.33 and cfg["width_multiple"] == 0.5 and len(cfg["anchors"]) == 3
    layers, save = parse_model(cfg)
    assert len(layers) == 25 and save == [4, 6, 10, 14, 17, 20, 23]
    assert layers[2].m.__len__() == 1 and layers[8].m.__len__() == 1  # 3 x 0.33 rounds to 1 repeat
    assert layers[4].m.__len__() == 2 and layers[6].m.__len__() == 3
    bad = load_cfg("yolov5n.yaml")
    bad["backbone"][0][2] = "__import__('os').system"
    with pytest.raises(ValueError, match="unknown layer type"):
        parse_model(bad)
    with pytest.raises(FileNotFoundError):
        load_cfg("no_such_model.yaml")


def test_nc_override_changes_head_only():
    model = Model("yolov5n.yaml", nc=5)
    assert model.model[-1].m[0].out_channels == 3 * 10
    assert model.yaml["nc"] == 5 and len(model.names) == 5


def _bad_cfg(old: str, new: str) -> dict:
    text = (CFG_DIR / "yolov5n.yaml").read_text()
    assert old in text
    return yaml.safe_load(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("[[-1, 6], 1, Concat, [1]]", "[[-1, 2], 1, Concat, [1]]", "layer 12 (Concat) cannot take its inputs"),
        ("[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv, [-128, 3, 2]]", "output channels (first arg) must be"),
        ("[[-1, 6], 1, Concat, [1]]", "[[-1, 30], 1, Concat, [1]]", "input 30 is not an earlier layer"),
        ("[[-1, 6], 1, Concat, [1]]", "[[-1, 12], 1, Concat, [1]]", "input 12 is not an earlier layer"),
        ("[-1, 3, C3, [128]]", "[-1, -3, C3, [128]]", "repeats must be a whole number >= 1"),
        ("[-1, 3, C3, [128]]", "[-1, 0, C3, [128]]", "repeats must be a whole number >= 1"),
        ("SPPF", "Foo", "unknown layer type 'Foo'"),
        ("nc: 80", "nc: 0", "'nc' must be a whole number >= 1"),
        ("width_multiple: 0.25", "width_multiple: -1", "'width_multiple' must be a positive number"),
        ("[[17, 20, 23], 1, Detect", "[[17, 20], 1, Detect", "3 anchor levels for 2 inputs"),
        ("[[-1, 6], 1, Concat, [1]]", "[-1, 1, Concat, [1]]", "'from' must be a list of layer indices"),
        ("[-1, 1, SPPF, [1024, 5]]", "[[4, 6], 1, Detect, [nc, anchors]]", "only it, must be Detect"),
        ("[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv, [128, x, 2]]", "layer 1 (Conv) cannot be built"),
    ],
)
def test_config_whose_layers_do_not_fit_is_a_value_error(old, new, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Model(_bad_cfg(old, new))


def test_unreadable_config_files_are_value_errors(tmp_path):
    (tmp_path / "syntax.yaml").write_text("nc: [80\nbackbone: :\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    for cfg, message in (
        (tmp_path / "syntax.yaml", "not readable as YAML"),
        (tmp_path, "is a folder"),
        (tmp_path / "list.yaml", "must hold a YAML mapping"),
    ):
        with pytest.raises(ValueError, match=message):
            Model(cfg)
