"""train.py end to end on a tiny shapes set: outputs, checkpoints, resume, atomic saves, bad input; and its helpers."""

import csv
import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import train
from models.nn.yolo import Model
from models.weights.checkpoint import load_model
from utils.torch_utils import cpu_supports_bf16
from utils.train import callbacks, checkpoints
from utils.train import setup as train_setup
from utils.train import step as train_step
from utils.train.callbacks import Callback
from utils.train.config import TrainConfig

FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--batch-size", "8", "--workers", "0"]


def _train(*args, callbacks: list[Callback] | None = None) -> int:
    return train.main(train.parse_opt([str(a) for a in args]), callbacks=callbacks)


class InterruptAfterFirstSave(Callback):
    """Like Ctrl-C (or a kill) right after epoch 0's last.pt is written."""

    def on_checkpoint_saved(self, trainer, path, result):
        raise KeyboardInterrupt


def _epochs(results_csv) -> list[int]:
    with open(results_csv, newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def finished_run(shapes_yaml, tmp_path_factory):
    """A complete 2-epoch run from scratch, with plots."""
    project = tmp_path_factory.mktemp("runs")
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 2, "--project", project, "--name", "e2e") == 0
    return project / "e2e"


@pytest.mark.slow
def test_end_to_end_outputs(finished_run):
    with open(finished_run / "results.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == callbacks.RESULT_COLUMNS
    assert [int(r[0]) for r in rows[1:]] == [0, 1]
    assert all(math.isfinite(float(v)) for r in rows[1:] for v in r)
    assert float(rows[1][1]) > 0  # a training box loss was logged
    for name in ("train_batch0.jpg", "labels.jpg", "results.png", "hyp.yaml", "opt.yaml"):
        assert (finished_run / name).is_file(), name


@pytest.mark.slow
def test_final_checkpoints_are_fp16_weights_only(finished_run):
    for name in ("last.pt", "best.pt"):
        file = finished_run / "weights" / name
        ckpt = torch.load(file, map_location="cpu", weights_only=True)
        assert not set(checkpoints.RESUME_KEYS) & set(ckpt), "resume-only entries must be stripped"
        floats = [v for v in ckpt["model"].values() if v.is_floating_point()]
        assert floats and all(v.dtype == torch.float16 for v in floats)
        fp32_bytes = sum(v.numel() * 4 for v in floats)
        assert file.stat().st_size <= 0.55 * fp32_bytes
        assert ckpt["epoch"] == 1 and ckpt["names"][0] == "circle"
        model = load_model(file)
        with torch.no_grad():
            out = model(torch.rand(1, 3, 64, 64))[0]
        assert out.shape[-1] == 10 and torch.isfinite(out).all()


@pytest.mark.slow
def test_resume_after_interrupt_lists_each_epoch_once(shapes_yaml, tmp_path, log):
    args = ["--data", shapes_yaml, *FAST, "--epochs", 3, "--project", tmp_path, "--noplots"]
    assert _train(*args, callbacks=[InterruptAfterFirstSave()]) == 130
    last = tmp_path / "exp" / "weights" / "last.pt"
    interrupted = torch.load(last, weights_only=True)
    assert interrupted["epoch"] == 0 and "optimizer" in interrupted and interrupted["ema_updates"] > 0

    # --resume alone finds the newest last.pt under --project; run options come from the checkpoint.
    assert _train("--resume", "--project", tmp_path) == 0
    assert "Resuming training from" in log.text and "at epoch 1" in log.text
    assert _epochs(tmp_path / "exp" / "results.csv") == [0, 1, 2]
    assert torch.load(last, weights_only=True)["epoch"] == 2
    assert not (tmp_path / "exp2").exists()  # resumed in place

    # The finished run's checkpoints are stripped: nothing left to resume.
    assert _train("--resume", last) == 1
    assert "nothing to resume" in log.text


@pytest.mark.slow
def test_failed_save_keeps_previous_checkpoint(shapes_yaml, tmp_path, monkeypatch, log):
    real_save, calls = torch.save, []

    def save_then_fail(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) < 4:  # the starting last.pt, then epoch 0's last.pt and best.pt
            return real_save(obj, f, *args, **kwargs)
        f.write(b"PK\x03\x04 half a checkpoint")  # a partial write, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", save_then_fail)
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 2, "--project", tmp_path, "--noplots") == 1
    monkeypatch.setattr(torch, "save", real_save)
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert len(errors) == 1 and "the disk is full (ENOSPC)" in errors[0] and "last.pt" in errors[0]
    weights = tmp_path / "exp" / "weights"
    ckpt = torch.load(weights / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 0 and "optimizer" in ckpt
    assert sorted(p.name for p in weights.iterdir()) == ["best.pt", "last.pt"]  # no temporary file left


@pytest.mark.slow
def test_weights_with_another_class_count_transfer_matching_tensors(shapes_yaml, finished_run, tmp_path, log):
    # Our own 5-class checkpoint into a single-class model: all but the detection head's output convs transfer.
    best = finished_run / "weights" / "best.pt"
    args = [
        "--data",
        shapes_yaml,
        "--weights",
        best,
        "--img",
        64,
        "--batch-size",
        8,
        "--workers",
        0,
        "--epochs",
        1,
        "--project",
        tmp_path,
        "--noplots",
        "--single-cls",
        "--noval",
        "--nosave",
    ]
    assert _train(*args) == 0
    text = log.text
    n_model = len(Model("yolov5n.yaml", nc=1).state_dict())
    assert f"Transferred {n_model - 6}/{n_model} items from {best}" in text  # 3 Detect convs: weight + bias
    assert "Not transferred" in text and "model.24.m.0.weight" in text


@pytest.mark.slow
def test_official_weights_fine_tune(shapes_yaml, shared, tmp_path, log):
    official = shared / "weights" / "yolov5n.pt"
    args = [
        "--data",
        shapes_yaml,
        "--weights",
        official,
        "--img",
        64,
        "--batch-size",
        8,
        "--workers",
        0,
        "--epochs",
        1,
        "--project",
        tmp_path,
        "--noplots",
    ]
    assert _train(*args) == 0
    n_model = len(Model("yolov5n.yaml", nc=5).state_dict())
    assert f"Transferred {n_model - 6}/{n_model} items" in log.text
    assert _epochs(tmp_path / "exp" / "results.csv") == [0]


@pytest.mark.slow
def test_cpu_amp_trains_under_bfloat16(shapes_yaml, tmp_path, log):
    if not cpu_supports_bf16():
        pytest.skip("this CPU has no bfloat16 support")
    args = ["--data", shapes_yaml, *FAST, "--epochs", 1, "--project", tmp_path, "--noplots", "--amp"]
    assert _train(*args) == 0
    assert "bfloat16 autocast" in log.text and "AMP: checks passed" in log.text
    ckpt = torch.load(tmp_path / "exp" / "weights" / "best.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())


class NanLossOnFirstBatch(Callback):
    """Makes the trainer's loss NaN on its first call; records the mean losses each trained batch reports."""

    def __init__(self):
        self.calls, self.batches = 0, []

    def on_train_start(self, trainer):
        real = trainer.parts.train_loss

        def nan_first(preds, targets):
            loss, items = real(preds, targets)
            self.calls += 1
            return (loss * float("nan"), items * float("nan")) if self.calls == 1 else (loss, items)

        trainer.parts.train_loss = nan_first

    def on_batch_end(self, trainer, batch):
        self.batches.append((batch.index, batch.mean_losses))


@pytest.mark.slow
def test_non_finite_loss_skips_the_step(shapes_yaml, tmp_path, log):
    nan = NanLossOnFirstBatch()
    args = ["--data", shapes_yaml, *FAST, "--epochs", 1, "--project", tmp_path, "--noplots", "--noval"]
    assert _train(*args, callbacks=[nan]) == 0
    text = log.text
    assert "non-finite loss [nan, nan, nan] at epoch 0 batch 0, step skipped" in text
    assert "1 steps skipped for non-finite losses or gradients in epoch 0" in text
    # The skipped batch is not reported; the next batch's mean losses are finite (the NaN never entered them).
    assert [i for i, _ in nan.batches] == [1] and all(math.isfinite(x) for x in nan.batches[0][1])
    ckpt = torch.load(tmp_path / "exp" / "weights" / "last.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing_data", "not found"),
        ("unknown_hyp", "unknown hyperparameter"),
        ("nothing_to_resume", "nothing to resume"),
        ("no_model", "--cfg or --weights"),
        ("missing_weights", "not found"),
        ("missing_hyp", "not found"),
    ],
)
def test_bad_input_gives_one_line_error(case, message, shapes_yaml, tmp_path, log):
    base = ["--project", tmp_path, "--noplots", "--epochs", 1]
    if case == "missing_data":
        args = ["--data", tmp_path / "nope.yaml", *FAST]
    elif case == "unknown_hyp":
        hyp = train.load_hyp("hyp.scratch.yaml") | {"lr_typo": 0.1}
        (tmp_path / "hyp.yaml").write_text("\n".join(f"{k}: {v}" for k, v in hyp.items()))
        args = ["--data", shapes_yaml, *FAST, "--hyp", tmp_path / "hyp.yaml"]
    elif case == "nothing_to_resume":
        args = ["--resume"]
    elif case == "no_model":
        args = ["--data", shapes_yaml]
    elif case == "missing_weights":
        args = ["--data", shapes_yaml, "--weights", tmp_path / "missing.pt"]
    else:
        args = ["--data", shapes_yaml, *FAST, "--hyp", tmp_path / "missing_hyp.yaml"]
    assert _train(*args, *base) == 1
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert len(errors) == 1 and message in errors[0]
    assert not list(tmp_path.glob("exp*")), "a failed start must not leave a run folder"


# ---------------------------------------------------------------------------------------------------------------------
# Helpers


def test_optimizer_groups_and_lr_schedule():
    model = Model("yolov5n.yaml", nc=2)
    opt = train_setup.smart_optimizer(model, "SGD", lr=0.01, momentum=0.937, decay=5e-4)
    biases, weights, bn = (g["params"] for g in opt.param_groups)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 5e-4, 0.0]
    assert opt.param_groups[0]["nesterov"]
    assert len(biases) + len(weights) + len(bn) == len(list(model.parameters()))
    bn_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.BatchNorm2d)}
    assert {id(p) for p in bn} == bn_ids and all(p.ndim == 1 for p in biases)
    assert isinstance(train_setup.smart_optimizer(model, "AdamW", 0.001, 0.9, 5e-4), torch.optim.AdamW)

    linear, cos = train_setup.lr_lambda(100, 0.01), train_setup.lr_lambda(100, 0.01, cos=True)
    assert linear(0) == 1 and linear(100) == pytest.approx(0.01) and linear(50) == pytest.approx(0.505)
    assert cos(0) == pytest.approx(1) and cos(100) == pytest.approx(0.01) and cos(50) == pytest.approx(0.505)
    assert cos(25) > linear(25)


def test_early_stopping():
    stopper = train_setup.EarlyStopping(patience=2)
    assert [stopper(e, f) for e, f in enumerate([0.1, 0.3, 0.2, 0.25])] == [False, False, False, True]
    assert stopper.best_epoch == 1 and stopper.best_fitness == 0.3
    never = train_setup.EarlyStopping(patience=0)
    assert not any(never(e, 0.0 if e else 1.0) for e in range(50))


def test_truncate_results_drops_epochs_to_redo(tmp_path):
    file = tmp_path / "results.csv"
    for epoch in range(4):
        callbacks.write_results_row(file, [epoch] + [0.5] * 13)
    callbacks.truncate_results(file, 2)
    assert _epochs(file) == [0, 1]


def test_saved_options_and_weight_transfer():
    config = TrainConfig.from_namespace(train.parse_opt(["--img", "320", "--freeze", "10"]))
    plain = config.saved_options(save_dir=Path("runs/train/exp"), batch_size=8)
    assert plain["imgsz"] == 320 and plain["freeze"] == [10] and plain["amp"] is None and plain["batch_size"] == 8
    assert plain["save_dir"] == "runs/train/exp" and plain["hyp"] == config.hyp and plain["hyp"]["lr0"] == 0.01
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 4  # the Trainer keeps what it resolves as its own state
    src = {"a": torch.zeros(2), "b": torch.zeros(3), "anchors": torch.zeros(1)}
    dst = {"a": torch.ones(2), "b": torch.ones(4), "anchors": torch.ones(1)}
    assert list(train_setup.intersect_state_dicts(src, dst)) == ["a", "anchors"]
    assert list(train_setup.intersect_state_dicts(src, dst, exclude=("anchor",))) == ["a"]


def test_freeze_layers():
    model = Model("yolov5n.yaml", nc=2)
    train_setup.freeze_layers(model, [3])
    frozen = {n.split(".")[1] for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"0", "1", "2"}


def test_amp_policy_on_cpu():
    cpu = torch.device("cpu")
    assert train_step.resolve_amp(None, cpu) is None and train_step.resolve_amp(False, cpu) is None
    if not cpu_supports_bf16():
        assert train_step.resolve_amp(True, cpu) is None
        pytest.skip("this CPU has no bfloat16 support")
    assert train_step.resolve_amp(True, cpu) == torch.bfloat16
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=2)
    assert train_step.check_amp(model, torch.rand(1, 3, 64, 64), torch.bfloat16)
    assert not train_step.check_amp(_DisagreesUnderAutocast(), torch.rand(1, 3, 64, 64), torch.bfloat16)


class _DisagreesUnderAutocast(nn.Module):
    """Outputs that change under CPU autocast, as a model with precision trouble would."""

    def forward(self, x):
        y = torch.zeros(x.shape[0], 4, 10)
        if torch.is_autocast_enabled("cpu"):
            y[..., 4] = 0.5
        return y, None


def test_all_finite_guards_checkpoints():
    model = Model("yolov5n.yaml", nc=2)
    assert train_setup.all_finite(model)
    model.model[0].conv.weight.data[0, 0, 0, 0] = float("nan")
    assert not train_setup.all_finite(model)
