"""The anchor-free family (YOLOv8, YOLO11, YOLO26; issue 18): our models from Ultralytics' checkpoints give their
outputs, our YAMLs build their parameter counts, and the engines run them through one contract.

The reference files (../shared/reference/ultralytics) are random-initialised models in the layout of Ultralytics'
released checkpoints, with the package's own outputs on a fixed input.
"""

import copy
import socket
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from models.api.detector import Detector
from models.api.ensemble import Ensemble
from models.api.tta import TTAModel
from models.nn.config import config_parameters, load_cfg
from models.nn.yolo import Model, count_parameters
from models.weights.checkpoint import checkpoint_dict, load_model, save_checkpoint
from utils import downloads
from utils.boxes import end2end_detections, non_max_suppression, xywh2xyxy
from utils.errors import CheckpointError, DownloadError, ModelConfigError

# Ultralytics' parameter counts of the models as built (their YAMLs' summaries; the reference README for yolo26n)
PUBLISHED = {
    "yolov8n": 3_157_200,
    "yolov8s": 11_166_560,
    "yolov8m": 25_902_640,
    "yolov8l": 43_691_520,
    "yolov8x": 68_229_648,
    "yolo11n": 2_624_080,
    "yolo11s": 9_458_752,
    "yolo11m": 20_114_688,
    "yolo11l": 25_372_160,
    "yolo11x": 56_966_176,
    "yolo26n": 2_572_280,
}
REFERENCE_MODELS = ("yolov8n", "yolo11n", "yolo26n")


@pytest.fixture(scope="module")
def reference(shared) -> Path:
    folder = shared / "reference" / "ultralytics"
    if not (folder / "yolo26n_random.pt").is_file():
        pytest.skip(f"Ultralytics reference checkpoints not found in {folder}")
    return folder


def _load(reference: Path, name: str) -> tuple[Model, dict]:
    outputs = dict(np.load(reference / f"{name}_random_outputs.npz"))
    return load_model(reference / f"{name}_random.pt", fuse=False), outputs


def _as_ultralytics(predictions: torch.Tensor) -> np.ndarray:
    """Our (B, N, 5 + nc) predictions in Ultralytics' layout (B, 4 + nc, N): the objectness column dropped."""
    return torch.cat((predictions[..., :4], predictions[..., 5:]), -1).transpose(1, 2).numpy()


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_reference_checkpoint_gives_ultralytics_outputs(reference, name):
    model, data = _load(reference, name)
    assert count_parameters(model) == PUBLISHED[name]
    model.end2end = False  # YOLO26's 'y' is its one-to-many branch
    with torch.no_grad():
        predictions = model(torch.from_numpy(data["x"]))[0]
    assert predictions.shape[2] == 85 and bool((predictions[..., 4] == 1).all())  # objectness 1: conf = class score
    ours, theirs = _as_ultralytics(predictions), data["y"]
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= 1e-3 * np.abs(theirs).max()


def test_reference_checkpoint_fused_gives_the_same_outputs(reference):
    model, data = _load(reference, "yolo11n")
    x = torch.from_numpy(data["x"])
    with torch.no_grad():
        plain = model(x)[0]
        fused = model.fuse()(x)[0]
    assert (fused - plain).abs().max() <= 1e-3 * plain.abs().max()


def test_yolo26_end_to_end_output_is_ultralytics_top_300_as_a_set(reference):
    model, data = _load(reference, "yolo26n")
    assert model.end2end
    with torch.no_grad():
        ours = model(torch.from_numpy(data["x"]))[0].numpy()
    theirs = data["y_end2end"]
    assert ours.shape == theirs.shape == (2, 300, 6)
    tolerance = 1e-3 * np.abs(theirs).max()
    for mine, ref in zip(ours, theirs):
        np.testing.assert_allclose(np.sort(mine[:, 4]), np.sort(ref[:, 4]), atol=1e-6)  # the same scores
        # Rows above the lowest kept score are the same set; at the cut-off, equal scores may pick other rows.
        above = ref[:, 4] > ref[:, 4].min() + 1e-7
        distance = np.abs(ref[above][:, None] - mine[None]).max(-1).min(1)
        assert above.sum() > 200 and distance.max() <= tolerance


def test_ultralytics_layout_names_an_unknown_class_one_line(reference, tmp_path):
    """A class this code does not build (here a renamed C2PSA) is refused by name; nothing is imported or run."""
    src, dst = reference / "yolo11n_random.pt", tmp_path / "renamed.pt"
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename.endswith("data.pkl"):
                assert b"block\nC2PSA\n" in data
                data = data.replace(b"block\nC2PSA\n", b"block\nC2fAttn\n")
            out.writestr(info.filename, data)
    with pytest.raises(CheckpointError) as err:
        load_model(dst)
    message = str(err.value)
    assert "ultralytics.nn.modules.block.C2fAttn" in message and "\n" not in message


@pytest.mark.parametrize("name", ("yolo11n", "yolo26n"))
def test_our_checkpoint_of_a_new_model_loads_back_with_equal_outputs(reference, tmp_path, name):
    model, data = _load(reference, name)
    path = tmp_path / f"{name}_ours.pt"
    save_checkpoint(checkpoint_dict(model), path)
    assert torch.load(path, weights_only=True)["format"] == "yolo-checkpoint-v1"  # plain data, no pickled modules
    again = load_model(path, fuse=False)
    x = torch.from_numpy(data["x"])
    with torch.no_grad():
        assert torch.equal(model(x)[0], again(x)[0])  # FP16 weights in both files: the same numbers


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_our_yamls_price_ultralytics_parameter_counts(name):
    """Every scale, priced from the YAML without building it ('yolo11s.yaml' is yolo11.yaml at scale s)."""
    cfg = load_cfg(f"{name}.yaml")
    assert cfg["scale"] == name[-1]
    assert config_parameters(cfg) == PUBLISHED[name]


@pytest.mark.parametrize("name", ("yolov8n", "yolo11n", "yolo26n", "yolo11s", "yolo26m"))
def test_built_models_have_the_priced_parameters(name):
    model = Model(f"{name}.yaml")
    assert count_parameters(model) == config_parameters(model.yaml)
    assert [float(s) for s in model.stride] == [8.0, 16.0, 32.0]
    if name in PUBLISHED:
        assert count_parameters(model) == PUBLISHED[name]


def test_larger_scales_use_c3k_inner_blocks():
    small, medium = (Model(f"yolo11{s}.yaml") for s in "sm")
    assert type(small.model[2].m[0]).__name__ == "Bottleneck3"
    assert type(medium.model[2].m[0]).__name__ == "C3k"


def test_train_and_eval_outputs():
    model = Model("yolo11n.yaml", nc=3)
    x = torch.zeros(2, 3, 64, 96)
    maps = model(x)
    assert [tuple(m.shape) for m in maps] == [(2, 67, 8, 12), (2, 67, 4, 6), (2, 67, 2, 3)]  # 4 x 16 bins + 3
    model.eval()
    with torch.no_grad():
        predictions, raw = model(x)
    assert predictions.shape == (2, 8 * 12 + 4 * 6 + 2 * 3, 8) and len(raw) == 3
    e2e = Model("yolo26n.yaml", nc=3)
    assert set(e2e(x)) == {"one2many", "one2one"}
    with torch.no_grad():
        detections = e2e.eval()(x)[0]
    assert detections.shape == (2, 300, 6)  # always max_det rows: the top (cell, class) pairs, then placeholders
    assert (detections[..., 4] >= 0).all()  # 126 cells x 3 classes: 378 pairs to choose the top 300 from


@pytest.mark.parametrize("cfg", ["yolo11n.yaml", "yolo26n.yaml"])
def test_the_export_layouts_give_predicts_rows(cfg):
    """The heads' export paths (LiteRT's NHWC rows, the (B, C, N) channels, DFL over the last dim as ExecuTorch
    traces it) give predict's rows, up to float rounding; YOLO26's one-to-many rows (reg_max 1: no DFL)."""
    model = Model(cfg, nc=3).eval()
    head = model.model[-1]
    head.end2end = False
    x = [
        torch.randn(2, c, s, s + 2, generator=torch.Generator().manual_seed(s))
        for c, s in ((64, 8), (128, 4), (256, 2))
    ]
    with torch.no_grad():
        expected = head.predict(x)[0]
        rows, channels = head._row_predictions(x), head._channel_predictions(x)
        head.dfl.forward = getattr(head.dfl, "forward_last_dim", head.dfl.forward)
        last_dim = head._channel_predictions(x)
    assert rows.shape == expected.shape == (2, 8 * 10 + 4 * 6 + 2 * 4, 8) and channels.shape == (2, 8, 112)
    for got in (rows, channels.transpose(1, 2), last_dim.transpose(1, 2)):
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_end_to_end_rows_do_not_depend_on_the_traced_size():
    """A traced YOLO26 (what a dynamic export holds) gives max_det rows at any input size: at its trace size's
    cell count k was once baked in, failing smaller inputs and leaving larger ones uncapped."""
    model = Model("yolo26n.yaml", nc=3).eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.zeros(1, 3, 320, 320), strict=False, check_trace=False)
        small, large = traced(torch.rand(1, 3, 64, 64))[0], traced(torch.rand(1, 3, 640, 640))[0]
    assert small.shape == large.shape == (1, 300, 6)
    assert int((small[..., 4] >= 0).sum()) == 84 * 3  # (8x8 + 4x4 + 2x2 cells) x 3 classes; then placeholders
    assert (small[0, 84 * 3 :, 4] == -1).all() and (large[..., 4] >= 0).all()


def test_nms_of_our_contract_equals_nms_on_class_scores(reference):
    """YOLOv5's NMS on (xywh, objectness 1, classes) keeps the boxes Ultralytics' NMS keeps on (xywh, classes):
    confidence = objectness x class = class score exactly. Both run on the same numbers here (near-equal scores of
    a random model would let float noise pick between overlapping boxes); the outputs' parity is tested above."""
    model, data = _load(reference, "yolo11n")
    with torch.no_grad():
        predictions = model(torch.from_numpy(data["x"]))[0]
    conf, iou = 0.0001, 0.7
    ours = non_max_suppression(predictions, conf, iou, max_det=300)
    for image, det in zip(torch.from_numpy(_as_ultralytics(predictions)).transpose(1, 2), ours):
        scores, classes = image[:, 4:].max(1)  # the best class of each cell, as on class scores alone
        keep = scores > conf
        boxes, scores, classes = xywh2xyxy(image[keep, :4]), scores[keep], classes[keep]
        kept = torchvision.ops.batched_nms(boxes, scores, classes, iou)[:300]
        theirs = torch.cat((boxes[kept], scores[kept, None], classes[kept, None].float()), 1)
        assert det.shape == theirs.shape and det.shape[0] > 0
        assert torch.equal(det, theirs)


def test_end2end_detections_threshold_without_nms():
    pred = torch.tensor([[[0, 0, 10, 10, 0.9, 1], [0, 0, 10, 10, 0.8, 1], [5, 5, 9, 9, 0.1, 2], [1, 1, 2, 2, 0.5, 0]]])
    det = end2end_detections(pred, conf_thres=0.2)[0]
    assert det[:, 4].tolist() == pytest.approx([0.9, 0.8, 0.5])  # overlapping boxes both kept: no NMS
    assert end2end_detections(pred, 0.2, classes=[0])[0][:, 5].tolist() == [0.0]
    assert len(end2end_detections(pred, 0.0, max_det=2)[0]) == 2


def test_tta_and_ensembles_give_end_to_end_models_nms_predictions():
    a, b = Model("yolo26n.yaml").eval(), Model("yolo26n.yaml").eval()
    x = torch.zeros(1, 3, 64, 64)
    with torch.no_grad():
        assert TTAModel(a)(x)[0].shape[2] == 85 and not a.end2end
        assert Ensemble([Model("yolo26n.yaml").eval(), b])(x)[0].shape[2] == 85 and not b.end2end


@pytest.mark.parametrize("name", ("yolo11n", "yolo26n"))
def test_detector_runs_the_reference_models(reference, shared, name):
    detector = Detector(reference / f"{name}_random.pt", conf_thres=0.0001)
    result = detector(shared / "images" / "bus.jpg")[0]
    boxes = result.boxes if hasattr(result, "boxes") else None
    assert boxes is not None and 0 < len(boxes) <= 1000
    if name == "yolo26n":
        assert len(boxes) <= 300  # the end-to-end top 300 above the threshold, no NMS


def _no_building(monkeypatch):
    def spy(*args, **kwargs):
        raise AssertionError("a layer was built before the config was checked")

    monkeypatch.setattr(torch.nn.Conv2d, "__init__", spy)


def _yolo11(**changes) -> dict:
    cfg = load_cfg("yolo11n.yaml")
    cfg.update(changes)
    return cfg


def _yolo11_layer(index: int, layer: list) -> dict:
    cfg = _yolo11()
    cfg["backbone"][index] = layer
    return cfg


def _yolo11_head(layer: list) -> dict:
    cfg = _yolo11()
    cfg["head"][-1] = layer
    return cfg


HOSTILE = {
    "attention at full resolution": (lambda: _yolo11_layer(1, [-1, 1, "C2PSA", [64]]), "activations"),
    "C3k2 expansion 10^6": (lambda: _yolo11_layer(2, [-1, 2, "C3k2", [256, False, 1e6]]), "(0, 4]"),
    "negative pooling count": (lambda: _yolo11_layer(9, [-1, 1, "SPPF", [1024, 5, -(10**9)]]), "whole number >= 0"),
    "reg_max 10^6": (lambda: _yolo11(reg_max=10**6), "'reg_max' must be a whole number in 1..64"),
    "unknown scale": (lambda: _yolo11(scale="q"), "scale 'q' is not one of the config's scales"),
    "scale of 10^3 width": (lambda: _yolo11(scales={"n": [0.5, 1000, 1024]}), "must be [depth, width, max_channels]"),
    "a head with anchors": (lambda: _yolo11_head([[16, 19, 22], 1, "Detect", ["nc", 3]]), "takes [nc]"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_anchor_free_configs_are_refused_before_building(case, monkeypatch):
    cfg = HOSTILE[case][0]()
    _no_building(monkeypatch)
    with pytest.raises(ModelConfigError) as err:
        Model(cfg)
    message = str(err.value)
    assert HOSTILE[case][1] in message and "\n" not in message and len(message) < 400, message


def test_scale_comes_from_the_name_and_missing_names_stay_missing(tmp_path):
    assert Model("yolov8s.yaml").yaml["scale"] == "s"
    with pytest.raises(FileNotFoundError):
        load_cfg("yolo11q.yaml")
    with pytest.raises(FileNotFoundError):  # a path with a folder part is never swapped for models/yolo11.yaml
        load_cfg(tmp_path / "yolo11s.yaml")


def test_official_anchor_free_names_download_from_their_release(tmp_path):
    assert downloads.release_folder("yolo11n.pt").endswith("/ultralytics/assets/releases/download/v8.3.0")
    assert downloads.release_folder("yolov8x.pt").endswith("/v8.3.0")
    assert downloads.release_folder("yolo26s.pt").endswith("/v8.4.0")
    assert downloads.release_folder("yolov8n-seg.pt") is None and downloads.release_folder("yolo12n.pt") is None
    with socket.socket() as s:  # a port nothing listens on: offline, quickly
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v8.3.0"
    with pytest.raises(DownloadError) as err:
        downloads.attempt_download_weights("yolo11n.pt", tmp_path, base_url=closed, timeout=5)
    assert "yolo11n.pt" in str(err.value) and "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())  # no partial file left behind


def test_a_bfloat16_model_decodes_its_boxes_in_float32():
    torch.manual_seed(0)
    model = Model("yolo11n.yaml").eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = model(x)[0]
        low = copy.deepcopy(model).to(torch.bfloat16)(x.to(torch.bfloat16))[0]  # the DFL's bins follow the input
    assert low.dtype == torch.float32 and low.shape == ref.shape
    assert (low[..., :4] - ref[..., :4]).abs().max() < 2.0 and (low[..., 5:] - ref[..., 5:]).abs().max() < 0.05
