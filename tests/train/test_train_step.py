"""utils.train.step: the pure warmup and loss-gain functions, and what the one training step does."""

import pytest
import torch
from torch import nn

import models.nn.common as common
from models.nn.yolo import Model
from utils.torch_utils import ModelEMA
from utils.train.loss import ComputeLoss
from utils.train.step import NBS, TrainingParts, apply_warmup, loss_gains, train_step, warmup_values

HYP = {"warmup_bias_lr": 0.1, "warmup_momentum": 0.8, "momentum": 0.937}


def test_warmup_starts_and_ends_where_yolov5_does():
    start = warmup_values(0, 100, [0.01, 0.01, 0.01], HYP, batch_size=16)
    assert start.lrs == [0.1, 0.0, 0.0] and start.momentum == 0.8 and start.accumulate == 1
    end = warmup_values(100, 100, [0.01, 0.02, 0.03], HYP, batch_size=16)
    assert end.lrs == pytest.approx([0.01, 0.02, 0.03]) and end.momentum == pytest.approx(0.937)
    assert end.accumulate == NBS // 16
    half = warmup_values(50, 100, [0.01, 0.01, 0.01], HYP, batch_size=16)
    assert half.lrs == pytest.approx([0.055, 0.005, 0.005]) and half.momentum == pytest.approx(0.8685)
    assert half.accumulate == 2  # 2.5 rounds to even, as numpy rounds
    assert all(type(x) is float for x in half.lrs)  # plain floats: checkpoints load with weights_only
    assert warmup_values(100, 100, [0.01] * 3, HYP, batch_size=128).accumulate == 1  # never below one


def test_apply_warmup_sets_momentum_only_where_the_optimizer_has_it():
    p = nn.Parameter(torch.zeros(1))
    values = warmup_values(10, 100, [0.01, 0.01], HYP, batch_size=16)
    sgd = torch.optim.SGD([{"params": [p]}, {"params": [nn.Parameter(torch.zeros(1))]}], lr=1.0, momentum=0.9)
    apply_warmup(sgd, values)
    assert [g["lr"] for g in sgd.param_groups] == values.lrs
    assert all(g["momentum"] == values.momentum for g in sgd.param_groups)
    adam = torch.optim.Adam([p], lr=1.0)
    apply_warmup(adam, values)
    assert adam.param_groups[0]["lr"] == values.lrs[0] and "momentum" not in adam.param_groups[0]


def test_loss_gains_scale_with_levels_classes_and_image_size():
    hyp = {"box": 0.05, "cls": 0.5, "obj": 1.0, "lr0": 0.01}
    assert loss_gains(hyp, n_layers=3, nc=80, imgsz=640) == pytest.approx(hyp)
    scaled = loss_gains(hyp, n_layers=4, nc=5, imgsz=320)
    assert scaled["box"] == pytest.approx(0.05 * 3 / 4)
    assert scaled["cls"] == pytest.approx(0.5 * 5 / 80 * 3 / 4)
    assert scaled["obj"] == pytest.approx(1.0 * 0.25 * 3 / 4)
    assert scaled["lr0"] == 0.01 and hyp["box"] == 0.05  # the input is not changed


class _Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x):
        return self.linear(x)


def _squared_error(pred, targets):
    loss = ((pred - targets) ** 2).mean()
    return loss, torch.stack([loss, loss * 0, loss * 0]).detach()


def _parts(compute_loss=_squared_error, scaler_enabled=False) -> TrainingParts:
    torch.manual_seed(0)
    model = _Regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=scaler_enabled)
    return TrainingParts(model, optimizer, compute_loss, scaler, ModelEMA(model))


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def test_step_updates_weights_and_ema_only_when_asked():
    parts = _parts()
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    before = _weights(parts.model)
    accumulated = train_step(parts, x, y, update=False)
    assert not accumulated.stepped and accumulated.skipped is None and parts.ema.updates == 0
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(parts.model)))
    assert parts.model.linear.weight.grad is not None  # the gradient is kept for the next step
    stepped = train_step(parts, x, y, update=True)
    assert stepped.stepped and parts.ema.updates == 1
    assert not torch.equal(before[0], parts.model.linear.weight)
    assert parts.model.linear.weight.grad is None or not parts.model.linear.weight.grad.any()


def test_step_clips_the_gradient_norm_to_ten():
    parts = _parts()
    x, y = torch.full((8, 4), 100.0), torch.full((8, 1), -1000.0)  # a huge gradient
    before = _weights(parts.model)
    train_step(parts, x, y, update=True)
    moved = torch.cat([(a - b).flatten() for a, b in zip(_weights(parts.model), before)])
    assert moved.norm() == pytest.approx(0.1 * 10.0, rel=1e-4)  # lr * clipped norm


def test_non_finite_loss_skips_the_step_and_drops_its_gradient():
    def nan_loss(pred, targets):
        loss = pred.sum() * float("nan")
        return loss, torch.full((3,), float("nan"))

    parts = _parts(nan_loss)
    before = _weights(parts.model)
    result = train_step(parts, torch.randn(8, 4), torch.randn(8, 1), update=True)
    assert result.skipped == "loss" and not result.stepped and parts.ema.updates == 0
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(parts.model)))
    assert all(torch.isfinite(p).all() for p in parts.ema.ema.parameters())


def test_non_finite_gradient_without_a_scaler_is_dropped():
    def sqrt_at_zero(pred, targets):  # a finite loss (0) whose gradient is infinite
        loss = torch.sqrt((pred * 0).sum().abs())
        return loss, torch.stack([loss, loss, loss]).detach()

    parts = _parts(sqrt_at_zero)
    before = _weights(parts.model)
    result = train_step(parts, torch.randn(8, 4), torch.randn(8, 1), update=True)
    assert result.skipped == "gradient" and not result.stepped and parts.ema.updates == 0
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(parts.model)))


def test_ema_update_blends_every_float_tensor_as_the_per_tensor_formula():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    ema = ModelEMA(model, updates=100)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model[1].running_mean.add_(1.0)
    model[1].num_batches_tracked += 7  # an integer buffer: not averaged
    before = {k: v.clone() for k, v in ema.ema.state_dict().items()}
    ema.update(model)
    d = ema.decay(101)
    current = model.state_dict()
    for k, v in ema.ema.state_dict().items():
        if v.dtype.is_floating_point:
            assert torch.equal(v, before[k].mul(d).add_(current[k], alpha=1 - d)), k
        else:
            assert torch.equal(v, before[k]), k
    assert ema.updates == 101


def _model_gradients(model, images, targets) -> list[torch.Tensor]:
    model.zero_grad()
    hyp = {"box": 0.05, "obj": 1.0, "cls": 0.5, "cls_pw": 1.0, "obj_pw": 1.0, "anchor_t": 4.0}
    ComputeLoss(model, hyp)(model(images), targets)[0].backward()
    return [p.grad.clone() for p in model.parameters()]


def _plain_conv_forward(self, x):
    return self.act(self.bn(self.conv(x)))  # in-place SiLU, as before


def test_training_speedups_leave_the_gradients_unchanged(monkeypatch):
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=3).train().to(memory_format=torch.channels_last)
    images = torch.rand(2, 3, 64, 64).contiguous(memory_format=torch.channels_last)
    targets = torch.tensor([[0, 0, 0.5, 0.5, 0.3, 0.4], [1, 2, 0.3, 0.6, 0.2, 0.1]])
    dense = []
    c3 = model.model[2]  # its cat's inputs now get dense NHWC gradients: vectorised SiLU backward
    c3.cv2.register_full_backward_hook(
        lambda m, grad_in, grad_out: dense.append(grad_out[0].is_contiguous(memory_format=torch.channels_last))
    )
    grads = _model_gradients(model, images, targets)
    assert dense == [True]
    monkeypatch.setattr(common, "cat", torch.cat)
    monkeypatch.setattr(common.Conv, "forward", _plain_conv_forward)
    plain = _model_gradients(model, images, targets)
    # Float rounding only: vectorised and scalar SiLU backward kernels round differently in the last bits.
    assert all((g - p).abs().max() <= 1e-5 * p.abs().max() for g, p in zip(grads, plain))
    assert sum(torch.equal(g, p) for g, p in zip(grads, plain)) > len(grads) // 2  # most are bit-identical
