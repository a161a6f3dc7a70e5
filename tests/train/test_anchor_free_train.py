"""Training the anchor-free models: the task-aligned assigner, the loss, their hyperparameters, close_mosaic, no
AutoAnchor, and train.py end to end with --cfg yolo11n.yaml (AMP, FP16 checkpoints, resume, --evolve,
--image-weights, TensorBoard)."""

import argparse
import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import train
from models.nn.family import YOLOV5, YOLOV8
from models.nn.yolo import Model
from utils.data.hyp import ANCHOR_FREE_HYP_KEYS, HYP_KEYS, load_hyp
from utils.errors import DatasetError, TrainError
from utils.files import DATA_DIR
from utils.torch_utils import cpu_supports_bf16
from utils.train import evolve as evolve_module
from utils.train.assigner import TaskAlignedAssigner
from utils.train.autoanchor import check_anchors
from utils.train.callbacks import Callback
from utils.train.loss import ComputeLoss
from utils.train.loss_anchor_free import AnchorFreeLoss, EndToEndLoss, distribution_focal_loss, pad_targets
from utils.train.options import default_hyp
from utils.train.setup import build_loss, check_hyp_fits, choose_optimizer, freeze_layers
from utils.train.step import loss_gains

REPO = Path(__file__).resolve().parents[2]
AF_HYP = {"box": 7.5, "cls": 0.5, "dfl": 1.5}
FAST = ["--cfg", "yolo11n.yaml", "--img", "64", "--batch-size", "8", "--workers", "0", "--noplots"]


def _grid_points(size: int, stride: float) -> torch.Tensor:
    """Cell centres (N, 2) of a size x size grid, in pixels."""
    c = (torch.arange(size, dtype=torch.float32) + 0.5) * stride
    yv, xv = torch.meshgrid(c, c, indexing="ij")
    return torch.stack((xv, yv), 2).view(-1, 2)


def _assign(assigner, gt_boxes, gt_labels, scores=None, pred=None, points=None):
    points = _grid_points(8, 8.0) if points is None else points
    n = len(points)
    b, m = gt_boxes.shape[:2]
    scores = torch.full((b, n, assigner.nc), 0.5) if scores is None else scores
    pred = gt_boxes[:, :1].expand(b, n, 4).clone() if pred is None else pred
    mask = torch.ones(b, m, 1, dtype=torch.bool)
    return assigner(scores, pred, points, gt_labels, gt_boxes, mask), points


# The assigner ----------------------------------------------------------------------------------------------------


def test_assigner_picks_topk_points_inside_the_box():
    assigner = TaskAlignedAssigner(nc=3, topk=5)
    gt = torch.tensor([[[4.0, 4.0, 44.0, 44.0]]])  # a 5 x 5 block of cell centres lies inside
    out, points = _assign(assigner, gt, torch.tensor([[[2.0]]]))
    chosen = points[out.foreground[0]]
    assert out.foreground.sum() == 5
    assert ((chosen > 4) & (chosen < 44)).all()
    assert (out.labels[0][out.foreground[0]] == 2).all()
    assert torch.equal(out.boxes[0][out.foreground[0]], gt[0].expand(5, 4))
    # Predictions equal the box, so every IoU is 1 and the best soft target is the box's best IoU (1).
    assert math.isclose(float(out.scores[0, :, 2].max()), 1.0, rel_tol=1e-6)
    assert float(out.scores[..., :2].abs().sum()) == 0 and float(out.scores[0][~out.foreground[0]].sum()) == 0


def test_assigner_prefers_better_predictions():
    """Among the points inside a box, those whose predicted box overlaps it most win."""
    assigner = TaskAlignedAssigner(nc=1, topk=2)
    points = _grid_points(8, 8.0)
    gt = torch.tensor([[[0.0, 0.0, 64.0, 64.0]]])
    pred = torch.tensor([[10.0, 10.0, 20.0, 20.0]]).expand(1, 64, 4).clone()
    pred[0, 9] = gt[0, 0]
    pred[0, 40] = torch.tensor([1.0, 1.0, 63.0, 63.0])
    out, _ = _assign(assigner, gt, torch.zeros(1, 1, 1), pred=pred, points=points)
    assert out.foreground[0].nonzero().flatten().tolist() == [9, 40]
    assert float(out.scores[0, 9, 0]) > float(out.scores[0, 40, 0]) > 0


def test_assigner_gives_a_shared_point_to_the_box_it_overlaps_most():
    assigner = TaskAlignedAssigner(nc=2, topk=64)
    gt = torch.tensor([[[0.0, 0.0, 40.0, 40.0], [8.0, 8.0, 64.0, 64.0]]])
    pred = torch.tensor([[10.0, 10.0, 62.0, 62.0]]).expand(1, 64, 4).clone()  # closer to the second box
    out, points = _assign(assigner, gt, torch.tensor([[[0.0], [1.0]]]), pred=pred)
    shared = (points > 8).all(1) & (points < 40).all(1)
    assert shared.any() and (out.gt_index[0][shared] == 1).all() and (out.labels[0][shared] == 1).all()
    only_first = (points < 8).any(1) & (points < 40).all(1)
    assert (out.gt_index[0][only_first] == 0).all() and out.foreground[0][only_first].all()


def test_assigner_without_boxes_and_with_tiny_boxes():
    assigner = TaskAlignedAssigner(nc=2, topk=10, min_side=16.0)
    empty = torch.zeros(2, 0, 4)
    out = assigner(torch.rand(2, 64, 2), torch.rand(2, 64, 4), _grid_points(8, 8.0), torch.zeros(2, 0, 1), empty,
                   torch.zeros(2, 0, 1, dtype=torch.bool))  # fmt: skip
    assert not out.foreground.any() and (out.labels == 2).all() and float(out.scores.sum()) == 0
    tiny = torch.tensor([[[30.0, 30.0, 31.0, 31.0]]])  # no cell centre inside, but within 16 px of four
    floored, _ = _assign(assigner, tiny, torch.zeros(1, 1, 1))
    plain, _ = _assign(TaskAlignedAssigner(nc=2, topk=10), tiny, torch.zeros(1, 1, 1))
    assert int(floored.foreground.sum()) == 4 and not plain.foreground.any()


def test_assigner_final_topk_keeps_one_point_per_box():
    gt = torch.tensor([[[0.0, 0.0, 32.0, 32.0], [32.0, 32.0, 64.0, 64.0]]])
    points = _grid_points(8, 8.0)
    first = (points < 32).all(1)
    pred = torch.where(first[:, None], gt[0, 0], gt[0, 1])[None].clone()
    pred[0, 1] += 2  # one point per box predicts it best
    pred[0, 63] -= 2
    assigner = TaskAlignedAssigner(nc=1, topk=7, final_topk=1)
    out, _ = _assign(assigner, gt, torch.zeros(1, 2, 1), scores=torch.rand(1, 64, 1), pred=pred, points=points)
    assert int(out.foreground.sum()) == 2 and sorted(out.gt_index[0][out.foreground[0]].tolist()) == [0, 1]
    many, _ = _assign(TaskAlignedAssigner(nc=1, topk=7), gt, torch.zeros(1, 2, 1), pred=pred, points=points)
    assert int(many.foreground.sum()) == 14


def test_padding_masked_boxes_get_no_points():
    assigner = TaskAlignedAssigner(nc=1, topk=10)
    gt = torch.tensor([[[0.0, 0.0, 64.0, 64.0], [0.0, 0.0, 64.0, 64.0]]])
    mask = torch.tensor([[[True], [False]]])
    out = assigner(
        torch.rand(1, 64, 1), gt[:, :1].expand(1, 64, 4), _grid_points(8, 8.0), torch.zeros(1, 2, 1), gt, mask
    )
    assert int(out.foreground.sum()) == 10 and (out.gt_index[0][out.foreground[0]] == 0).all()


# The loss --------------------------------------------------------------------------------------------------------


def test_pad_targets_groups_boxes_by_image():
    t = torch.tensor([[1, 2, 0.5, 0.5, 0.5, 0.5], [0, 1, 0.25, 0.5, 0.5, 1.0], [1, 0, 0.5, 0.25, 0.2, 0.1]])
    labels, boxes, mask = pad_targets(t, 3, (100, 200))  # h 100, w 200
    assert labels.shape == (3, 2, 1) and mask[:, :, 0].tolist() == [[True, False], [True, True], [False, False]]
    assert labels[1, :, 0].tolist() == [2, 0] and labels[0, 0, 0] == 1
    assert torch.allclose(boxes[0, 0], torch.tensor([0.0, 0.0, 100.0, 100.0]))
    assert torch.allclose(boxes[1, 1], torch.tensor([80.0, 20.0, 120.0, 30.0]))
    assert pad_targets(torch.zeros(0, 6), 2, (64, 64))[1].shape == (2, 0, 4)


def test_dfl_is_the_cross_entropy_of_the_two_nearest_bins():
    logits = torch.randn(3, 4, 16)
    log_p = logits.log_softmax(2)
    exact = torch.tensor([[2.0, 5.0, 0.0, 14.0]] * 3)
    expected = -log_p.gather(2, exact.long()[..., None])[..., 0].mean(1, keepdim=True)
    assert torch.allclose(distribution_focal_loss(logits, exact), expected, atol=1e-6)
    half = exact + 0.5
    mid = -(0.5 * log_p.gather(2, exact.long()[..., None]) + 0.5 * log_p.gather(2, exact.long()[..., None] + 1))
    assert torch.allclose(distribution_focal_loss(logits, half), mid[..., 0].mean(1, keepdim=True), atol=1e-6)


def _targets(n: int = 12, batch: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    t = torch.zeros(n, 6)
    t[:, 0] = torch.arange(n) % batch
    t[:, 1] = torch.randint(0, 3, (n,), generator=g)
    t[:, 2:4] = torch.rand(n, 2, generator=g) * 0.6 + 0.2
    t[:, 4:6] = torch.rand(n, 2, generator=g) * 0.3 + 0.05
    return t


ANCHOR_FREE_HYP = DATA_DIR / YOLOV8.hyp_file


@pytest.fixture(scope="module")
def yolo11_model():
    torch.manual_seed(0)
    return Model("yolo11n.yaml", nc=3).train()


def test_loss_has_the_compute_loss_contract(yolo11_model):
    loss_fn = build_loss(yolo11_model, AF_HYP)
    assert isinstance(loss_fn, AnchorFreeLoss)
    maps = yolo11_model(torch.rand(2, 3, 64, 96))
    loss, items = loss_fn(maps, _targets())
    assert loss.shape == (1,) and items.shape == (3,) and torch.isfinite(items).all() and (items > 0).all()
    assert math.isclose(float(loss.detach()), float(items.sum()) * 2, rel_tol=1e-5)  # gains applied, times the batch
    loss.backward()
    grads = [p.grad for p in yolo11_model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    yolo11_model.zero_grad()
    # Without boxes only the class loss is left (every point a negative), and the gains scale each term.
    _, empty = loss_fn([m.detach() for m in maps], torch.zeros(0, 6))
    assert float(empty[0]) == 0 and float(empty[2]) == 0 and float(empty[1]) > 0
    _, doubled = build_loss(yolo11_model, {"box": 15.0, "cls": 1.0, "dfl": 3.0})([m.detach() for m in maps], _targets())
    assert torch.allclose(doubled, items.detach() * 2, rtol=1e-5)


def test_build_loss_follows_the_head():
    assert isinstance(build_loss(Model("yolov5n.yaml", nc=2), {**load_hyp("hyp.scratch.yaml")}), ComputeLoss)
    e2e = build_loss(Model("yolo26n.yaml", nc=2), AF_HYP, epochs=11)
    assert isinstance(e2e, EndToEndLoss)
    e2e.set_epoch(0)
    assert math.isclose(e2e.o2m, 0.8)
    e2e.set_epoch(10)
    assert math.isclose(e2e.o2m, 0.1)
    e2e.set_epoch(5)
    assert math.isclose(e2e.o2m, 0.45)


def test_end_to_end_loss_trains_both_branches():
    torch.manual_seed(0)
    model = Model("yolo26n.yaml", nc=3).train()
    loss_fn = EndToEndLoss(model, AF_HYP, epochs=3)
    out = model(torch.rand(2, 3, 64, 64))
    loss, items = loss_fn(out, _targets())
    assert loss.shape == (1,) and items.shape == (3,) and torch.isfinite(loss).all()
    loss.backward()
    head = model.model[-1]
    for branch in (head.cv2, head.cv3, head.one2one_cv2, head.one2one_cv3):
        assert branch[0][-1].weight.grad is not None and branch[0][-1].weight.grad.abs().sum() > 0
    model.eval()  # validation: the eval maps are the one-to-one branch's
    with torch.no_grad():
        _, maps = model(torch.rand(2, 3, 64, 64))
    assert torch.isfinite(loss_fn(maps, _targets())[1]).all()


@pytest.mark.slow
def test_a_few_steps_lower_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    model = Model("yolo11n.yaml", nc=3).train()
    loss_fn = AnchorFreeLoss(model, AF_HYP)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, targets = torch.rand(4, 3, 64, 64), _targets(16, 4)
    first = None
    for _ in range(20):
        loss, _ = loss_fn(model(images), targets)
        first = float(loss) if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss_fn(model(images), targets)[0]) < 0.8 * first


# Hyperparameters, gains, AutoAnchor ------------------------------------------------------------------------------


def test_anchor_free_hyp_file():
    hyp = load_hyp("hyp.anchor_free.yaml")
    assert set(hyp) == set(ANCHOR_FREE_HYP_KEYS) | {"close_mosaic"}
    assert (hyp["box"], hyp["cls"], hyp["dfl"], hyp["lr0"], hyp["momentum"]) == (7.5, 0.5, 1.5, 0.01, 0.937)
    assert hyp["close_mosaic"] == 10 and hyp["mosaic"] == 1.0 and hyp["mixup"] == 0.0
    assert tuple(load_hyp("hyp.scratch.yaml")) == HYP_KEYS  # YOLOv5's still load, with their own keys


@pytest.mark.parametrize(
    "change, message",
    [
        ({"obj": 1.0}, "unknown hyperparameter(s) obj for the anchor_free key set"),
        ({"close_mosaic": 2.5}, "close_mosaic must be a whole number"),
        ({"box": None}, "missing hyperparameter(s) box"),
    ],
)
def test_bad_anchor_free_hyp_files(change, message, tmp_path):
    hyp = yaml.safe_load(ANCHOR_FREE_HYP.read_text())
    hyp.update(change)
    hyp = {k: v for k, v in hyp.items() if v is not None}
    file = tmp_path / "hyp.yaml"
    file.write_text(yaml.safe_dump(hyp))
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_hyp(file)


def test_default_hyp_follows_the_model(tmp_path, monkeypatch):
    monkeypatch.setattr("utils.downloads.WEIGHTS_DIR", tmp_path)
    pick = lambda cfg, weights="": default_hyp(argparse.Namespace(cfg=cfg, weights=weights))  # noqa: E731
    assert pick("yolo11n.yaml") == str(ANCHOR_FREE_HYP) and pick("yolov8s.yaml") == str(ANCHOR_FREE_HYP)
    assert pick("yolo26n.yaml") == str(ANCHOR_FREE_HYP)
    assert pick("yolov5n.yaml").endswith("hyp.scratch.yaml")
    assert pick("", "yolo11n.pt") == str(ANCHOR_FREE_HYP)  # an official name not downloaded yet
    assert pick("", "yolov5n.pt").endswith("hyp.scratch.yaml")
    assert pick("no_such.yaml").endswith("hyp.scratch.yaml")  # the Trainer reports the missing config


def test_gains_are_not_rescaled_for_anchor_free_and_yolov5_keeps_its_scaling():
    af = load_hyp("hyp.anchor_free.yaml")
    assert loss_gains(af, 3, 5, 256, scaled=YOLOV8.anchors) == af
    v5 = load_hyp("hyp.scratch.yaml")
    scaled = loss_gains(v5, 3, 5, 256, scaled=YOLOV5.anchors)
    assert math.isclose(scaled["box"], 0.05) and math.isclose(scaled["cls"], 0.5 * 5 / 80)
    assert math.isclose(scaled["obj"], (256 / 640) ** 2)


def test_hyp_of_the_other_family_is_refused(yolo11_model):
    with pytest.raises(TrainError, match="hyp.anchor_free.yaml"):
        check_hyp_fits(yolo11_model.family, load_hyp("hyp.scratch.yaml"), "data/hyp.scratch.yaml")
    with pytest.raises(TrainError, match="hyp.scratch.yaml"):
        check_hyp_fits(YOLOV5, load_hyp("hyp.anchor_free.yaml"), "data/hyp.anchor_free.yaml")


def test_optimizer_auto_chooses_as_ultralytics_for_anchor_free_and_sgd_for_yolov5():
    hyp = load_hyp(ANCHOR_FREE_HYP)
    name, short = choose_optimizer(
        "auto", hyp, YOLOV8, n_images=400, batch_size=16, epochs=20, nc=5
    )  # 140 batches of 64
    assert name == "AdamW" and short == {**hyp, "lr0": 0.001111, "momentum": 0.9, "warmup_bias_lr": 0.0}
    name, long = choose_optimizer("auto", hyp, YOLOV8, n_images=118287, batch_size=64, epochs=100, nc=80)
    assert name == "SGD" and (long["lr0"], long["momentum"], long["warmup_bias_lr"]) == (0.01, 0.9, 0.0)
    yolov5_hyp = load_hyp("hyp.scratch.yaml")
    assert choose_optimizer("auto", yolov5_hyp, YOLOV5, 400, 16, 20, 5) == ("SGD", yolov5_hyp)  # YOLOv5 as before
    assert choose_optimizer("AdamW", hyp, YOLOV8, 400, 16, 20, 5) == ("AdamW", hyp)  # a named one keeps the hyp's lr0


def test_freezing_keeps_the_dfl_bins_fixed(yolo11_model, log):
    model = Model("yolo11n.yaml", nc=5)
    dfl = model.model[-1].dfl.conv.weight
    freeze_layers(model, [0])  # nothing listed: every layer trains, but the DFL's fixed bins never do
    assert not dfl.requires_grad and all(p.requires_grad for n, p in model.named_parameters() if ".dfl." not in n)
    assert "freeze:" not in log.text  # no line when nothing was frozen
    freeze_layers(model, [10])
    assert not dfl.requires_grad and not model.model[9].cv1.conv.weight.requires_grad
    assert model.model[10].cv1.conv.weight.requires_grad and "layers 0-9 of 0-23 frozen" in log.text


def test_autoanchor_skips_anchor_free_models(yolo11_model, log):
    check_anchors(dataset=None, model=yolo11_model, imgsz=64)  # no dataset needed: nothing to fit
    assert "skipped: YOLOv8/YOLO11 models have no anchors" in log.text


def test_evolve_searches_anchor_free_gains_in_their_own_range():
    hyp = load_hyp("hyp.anchor_free.yaml")
    keys = evolve_module.evolvable_keys(hyp)
    assert "dfl" in keys and "obj" not in keys and "close_mosaic" not in keys
    assert evolve_module.constrain(hyp, keys)["box"] == 7.5  # YOLOv5's range would clip it to 0.2
    child = evolve_module.mutate(hyp, keys, __import__("numpy").random.default_rng(0))
    assert 1.0 <= child["box"] <= 20.0 and 0.4 <= child["dfl"] <= 6.0


# train.py end to end ---------------------------------------------------------------------------------------------


def _train(*args, callbacks=None) -> int:
    return train.main(train.parse_opt([str(a) for a in args]), callbacks=callbacks)


class InterruptAfterFirstSave(Callback):
    def on_checkpoint_saved(self, trainer, path, result):
        raise KeyboardInterrupt


class MosaicSeen(Callback):
    """Records, per epoch, whether the training dataset still makes mosaics."""

    def __init__(self):
        self.mosaic = []

    def on_epoch_start(self, trainer, epoch):
        self.mosaic.append(trainer.dataset.mosaic)


@pytest.mark.slow
def test_yolo11n_trains_end_to_end_with_its_hyp_and_close_mosaic(shapes_yaml, tmp_path, log):
    hyp = yaml.safe_load(ANCHOR_FREE_HYP.read_text())
    hyp["close_mosaic"] = 1
    hyp_file = tmp_path / "hyp_close1.yaml"
    hyp_file.write_text(yaml.safe_dump(hyp))
    seen = MosaicSeen()
    args = ["--data", shapes_yaml, *FAST, "--epochs", 2, "--project", tmp_path, "--hyp", hyp_file]
    assert _train(*args, "--workers", 1, callbacks=[seen]) == 0
    assert seen.mosaic == [True, False] and "close_mosaic: epochs 1-1" in log.text
    assert "optimizer: auto chose AdamW(lr0=0.001111, momentum=0.9)" in log.text  # the shapes data has 5 classes
    assert "AutoAnchor" not in log.text or "anchor-free" in log.text
    run = tmp_path / "exp"
    with open(run / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(math.isfinite(float(r["metrics/mAP50-95"])) for r in rows)
    losses = [c for c in rows[0] if c.endswith("_loss")]  # the columns name this family's loss items
    assert losses == [f"{split}/{item}_loss" for split in ("train", "val") for item in ("box", "cls", "dfl")]
    assert " dfl_loss " in log.text and " obj_loss " not in log.text  # the console's header too
    for name in ("last.pt", "best.pt"):
        ckpt = torch.load(run / "weights" / name, map_location="cpu", weights_only=True)
        floats = [v for v in ckpt["model"].values() if v.is_floating_point()]
        assert floats and all(v.dtype == torch.float16 for v in floats)


@pytest.mark.slow
def test_default_hyp_recorded_and_resume_after_interrupt(shapes_yaml, tmp_path, log):
    args = ["--data", shapes_yaml, *FAST, "--epochs", 2, "--project", tmp_path]
    assert _train(*args, callbacks=[InterruptAfterFirstSave()]) == 130
    opt = yaml.safe_load((tmp_path / "exp" / "opt.yaml").read_text())
    assert opt["hyp_file"] == str(ANCHOR_FREE_HYP) and opt["hyp"]["dfl"] == 1.5 and "obj" not in opt["hyp"]
    assert _train("--resume", "--project", tmp_path) == 0
    assert "at epoch 1" in log.text
    assert torch.load(tmp_path / "exp" / "weights" / "last.pt", weights_only=True)["epoch"] == 1


@pytest.mark.slow
def test_yolo11n_resumes_after_sigkill(shapes_yaml, tmp_path, log):
    """A train.py killed outright (SIGKILL: no handler runs) after its first epoch resumes from its last.pt."""
    run = tmp_path / "kill"
    cmd = [sys.executable, str(REPO / "train.py"), "--data", str(shapes_yaml), *FAST, "--epochs", "6"]
    proc = subprocess.Popen([*cmd, "--project", str(tmp_path), "--name", "kill"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 300
    while not ((run / "results.csv").is_file() and len((run / "results.csv").read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first epoch was listed"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer and its loader workers
    assert proc.wait(timeout=60) == -signal.SIGKILL
    killed_at = torch.load(run / "weights" / "last.pt", map_location="cpu", weights_only=True)["epoch"]
    # a whole checkpoint (written atomically): of an epoch before the last, or of the start (-1) when the kill came
    # between epoch 0's results.csv row and its checkpoint
    assert -1 <= killed_at < 5
    assert _train("--resume", run / "weights" / "last.pt") == 0
    assert f"at epoch {killed_at + 1}" in log.text
    with open(run / "results.csv", newline="") as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == list(range(6))  # each epoch listed once
    ckpt = torch.load(run / "weights" / "last.pt", map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == 5 and all(v.dtype == torch.float16 for v in ckpt["model"].values() if v.is_floating_point())


@pytest.mark.slow
def test_yolo11n_image_weights_and_evolve(shapes_yaml, tmp_path):
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 1, "--project", tmp_path, "--image-weights") == 0
    project = tmp_path / "evolve"
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 1, "--project", project, "--evolve", 2) == 0
    rows = evolve_module.read_evolve_csv(next(project.rglob("evolve.csv")))
    assert len(rows) == 2 and all("dfl" in r.hyp and "obj" not in r.hyp for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(not cpu_supports_bf16(), reason="this CPU has no bfloat16 support for --amp")
def test_yolo11n_cpu_amp(shapes_yaml, tmp_path, log):
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 1, "--project", tmp_path, "--amp") == 0
    assert "bfloat16" in log.text
