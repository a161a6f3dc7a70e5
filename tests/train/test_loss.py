"""The YOLOv5 loss on hand-checked targets: matching, CIoU, objectness/class BCE, gradients."""

import math

import pytest
import torch
import torchvision
from torch import nn

import utils.train.loss as loss_module
from models.nn.yolo import Model
from utils.train.loss import ComputeLoss, FocalLoss, bbox_iou, smooth_bce

HYP = {"box": 0.05, "obj": 1.0, "cls": 0.5, "cls_pw": 1.0, "obj_pw": 1.0, "anchor_t": 4.0, "fl_gamma": 0.0}
LOG2 = math.log(2)


class _Detect(nn.Module):
    """The attributes ComputeLoss reads from a Detect head, for a hand-sized one-level grid."""

    def __init__(self, anchors, nc=3, stride=8.0):
        super().__init__()
        self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32).view(1, -1, 2))
        self.register_buffer("stride", torch.tensor([stride]))
        self.nl, self.na, self.nc, self.no = 1, self.anchors.shape[1], nc, nc + 5


class _TinyModel(nn.Module):
    def __init__(self, anchors, nc=3):
        super().__init__()
        self.model = nn.ModuleList([_Detect(anchors, nc)])


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


# One target of class 1 centred at grid (2.4, 4.4) on an 8x8 grid, 2x2 cells in size.
TARGET = torch.tensor([[0, 1, 2.4 / 8, 4.4 / 8, 2 / 8, 2 / 8]])
ANCHORS = [[1, 1], [2, 2], [9, 9]]  # ratios to the 2x2 box: 2, 1, 4.5 -> the third exceeds anchor_t = 4


def test_build_targets_assigns_hand_computed_anchors_and_cells():
    loss = ComputeLoss(_TinyModel(ANCHORS), HYP)
    preds = [torch.zeros(1, 3, 8, 8, 8)]
    tcls, tbox, indices, anchors = loss.build_targets(preds, TARGET)
    b, a, gj, gi = indices[0]
    got = sorted(zip(a.tolist(), gj.tolist(), gi.tolist()))
    # Centre fractions (0.4, 0.4) < 0.5: the cell itself, its left neighbour (x-1) and the one above (y-1);
    # the right/down neighbours are not used (fractions from the far edges are 0.6).
    cells = [(4, 2), (4, 1), (3, 2)]
    assert got == sorted((an, y, x) for an in (0, 1) for y, x in cells)
    assert b.tolist() == [0] * 6 and tcls[0].tolist() == [1] * 6
    # Box targets are offsets from each assigned cell's corner, so up to 1.5 from neighbours.
    offsets = {(int(y), int(x)): tuple(round(v, 4) for v in box[:2].tolist()) for y, x, box in zip(gj, gi, tbox[0])}
    assert offsets == {(4, 2): (0.4, 0.4), (4, 1): (1.4, 0.4), (3, 2): (0.4, 1.4)}
    assert torch.allclose(tbox[0][:, 2:], torch.tensor(2.0))
    assert sorted(anchors[0][:, 0].tolist()) == [1.0] * 3 + [2.0] * 3


def test_build_targets_respects_anchor_t_and_grid_edges():
    loss = ComputeLoss(_TinyModel(ANCHORS), {**HYP, "anchor_t": 1.5})
    # Centre at (0.7, 7.6): no left/up neighbour (x, y fractions 0.7/0.6 and x <= 1); the right
    # neighbour is taken (0.3 from the edge), the down one would leave the grid (7.6 > 8 - 1).
    target = torch.tensor([[0, 0, 0.7 / 8, 7.6 / 8, 2 / 8, 2 / 8]])
    _, _, indices, _ = loss.build_targets([torch.zeros(1, 3, 8, 8, 8)], target)
    b, a, gj, gi = indices[0]
    assert a.tolist() == [1, 1]  # only the 2x2 anchor is within a ratio of 1.5
    assert sorted(zip(gj.tolist(), gi.tolist())) == [(7, 0), (7, 1)]


def _perfect_preds(obj_logit: float = 0.0, cls_logit: float = 0.0) -> torch.Tensor:
    """Raw maps whose decoded boxes equal TARGET exactly at every assigned cell."""
    p = torch.zeros(1, 3, 8, 8, 8)
    p[..., 4] = obj_logit
    p[..., 5:] = cls_logit
    for a, anchor in ((0, 1.0), (1, 2.0)):
        s_wh = _logit(math.sqrt(2.0 / anchor) / 2)  # (2 sigmoid)^2 * anchor = 2
        for (y, x), (ox, oy) in {(4, 2): (0.4, 0.4), (4, 1): (1.4, 0.4), (3, 2): (0.4, 1.4)}.items():
            p[0, a, y, x, :4] = torch.tensor([_logit((ox + 0.5) / 2), _logit((oy + 0.5) / 2), s_wh, s_wh])
    return p


def test_perfect_prediction_has_zero_box_loss_and_hand_computed_obj_cls():
    loss_fn = ComputeLoss(_TinyModel(ANCHORS), HYP)
    total, items = loss_fn([_perfect_preds()], TARGET)
    lbox, lobj, lcls = items.tolist()
    assert lbox == pytest.approx(0.0, abs=1e-5)
    # Logits 0 everywhere: BCE is log 2 per element whatever the target (IoU 1 or 0); level balance 4.0.
    assert lobj == pytest.approx(LOG2 * 4.0 * HYP["obj"], rel=1e-5)
    assert lcls == pytest.approx(LOG2 * HYP["cls"], rel=1e-5)
    assert total.shape == (1,) and total.item() == pytest.approx(sum(items.tolist()) * 1, rel=1e-6)


def test_objectness_target_is_the_detached_ciou():
    """Recover the objectness targets from the gradient: d lobj / d logit = balance * (sigmoid(0) - target) / N."""
    p = _perfect_preds()
    # Anchor 0's cells predict a 1x2 box (width halved) at the right centre: CIoU = 0.5 - v^2 / (v + 0.5).
    p[0, 0, :, :, 2] = 0.0  # (2 sigmoid(0))^2 * anchor 1 = width 1
    p.requires_grad_(True)
    total, _ = ComputeLoss(_TinyModel(ANCHORS), HYP)([p], TARGET)
    total.backward()
    target = 0.5 - p.grad[0, ..., 4] * p[..., 4].numel() / 4.0
    v = 4 / math.pi**2 * (math.atan(1.0) - math.atan(0.5)) ** 2
    cells = ((4, 2), (4, 1), (3, 2))
    for y, x in cells:
        assert target[0, y, x].item() == pytest.approx(0.5 - v * v / (v + 0.5), abs=1e-4)
        assert target[1, y, x].item() == pytest.approx(1.0, abs=1e-4)
    others = torch.ones_like(target, dtype=torch.bool)
    for y, x in cells:
        others[:2, y, x] = False
    assert target[others].abs().max() < 1e-4  # every unassigned cell has target 0


def test_label_smoothing_and_pos_weight():
    assert smooth_bce(0.1) == pytest.approx((0.95, 0.05))
    hyp = {**HYP, "label_smoothing": 0.1, "cls_pw": 2.0}
    p = _perfect_preds(cls_logit=1.0)
    _, items = ComputeLoss(_TinyModel(ANCHORS), hyp)([p], TARGET)
    sp, sn = math.log1p(math.exp(-1.0)), math.log1p(math.exp(1.0))  # -log sigmoid(1), -log(1 - sigmoid(1))
    # BCE with pos_weight w: -(w t log s + (1 - t) log(1 - s)); targets 0.95 for class 1, 0.05 for 0 and 2.
    per_elem = [2.0 * 0.95 * sp + 0.05 * sn, 2.0 * 0.05 * sp + 0.95 * sn, 2.0 * 0.05 * sp + 0.95 * sn]
    assert items[2].item() == pytest.approx(sum(per_elem) / 3 * HYP["cls"], rel=1e-5)


def test_batch_scaling_and_empty_targets():
    loss_fn = ComputeLoss(_TinyModel(ANCHORS), HYP)
    preds = [torch.zeros(4, 3, 8, 8, 8, requires_grad=True)]
    total, items = loss_fn(preds, torch.zeros(0, 6))
    assert items[0] == 0 and items[2] == 0
    assert items[1].item() == pytest.approx(LOG2 * 4.0, rel=1e-5)
    assert total.item() == pytest.approx(items.sum().item() * 4, rel=1e-6)  # times batch size
    total.backward()
    assert preds[0].grad[..., 4].abs().sum() > 0 and preds[0].grad[..., :4].abs().sum() == 0


def test_single_class_has_no_class_loss():
    _, items = ComputeLoss(_TinyModel(ANCHORS, nc=1), HYP)([torch.zeros(1, 3, 8, 8, 6)], TARGET[:, :].clone())
    assert items[2] == 0 and items[0] > 0


def test_focal_loss_matches_formula():
    bce = nn.BCEWithLogitsLoss()
    focal = FocalLoss(nn.BCEWithLogitsLoss(), gamma=2.0, alpha=0.25)
    pred, true = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 0.0])
    s = torch.sigmoid(pred)
    expected = (0.25 * (1 - s[0]) ** 2 * bce(pred[:1], true[:1]) + 0.75 * s[1] ** 2 * bce(pred[1:], true[1:])) / 2
    assert focal(pred, true).item() == pytest.approx(expected.item(), rel=1e-5)
    hyp = {**HYP, "fl_gamma": 1.5}
    _, plain = ComputeLoss(_TinyModel(ANCHORS), HYP)([_perfect_preds()], TARGET)
    _, focused = ComputeLoss(_TinyModel(ANCHORS), hyp)([_perfect_preds()], TARGET)
    assert 0 < focused[1] < plain[1] and 0 < focused[2] < plain[2]


def test_ciou_known_values():
    # Same-shape boxes offset by (1, 1): IoU 1/7, centre distance^2 2, enclosing diagonal^2 18 -> 1/7 - 1/9.
    b1, b2 = torch.tensor([[1.0, 1.0, 2.0, 2.0]]), torch.tensor([[2.0, 2.0, 2.0, 2.0]])
    assert bbox_iou(b1, b2).item() == pytest.approx(1 / 7 - 1 / 9, abs=1e-6)
    assert bbox_iou(b1, b2, CIoU=False).item() == pytest.approx(1 / 7, abs=1e-6)
    # 4x2 vs 2x2 sharing a corner: IoU 0.5, rho^2/c^2 = 1/20, v = 4/pi^2 (atan 2 - atan 1)^2, alpha = v/(v + 0.5).
    v = 4 / math.pi**2 * (math.atan(2) - math.atan(1)) ** 2
    expected = 0.5 - 0.05 - v * v / (v + 0.5)
    xyxy1, xyxy2 = torch.tensor([[0.0, 0.0, 4.0, 2.0]]), torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    assert bbox_iou(xyxy1, xyxy2, xywh=False).item() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.446752, abs=1e-6)
    assert bbox_iou(b1, b1).item() == pytest.approx(1.0, abs=1e-6)


def test_ciou_agrees_with_torchvision_except_degenerate_boxes():
    """Why our own bbox_iou: same values as torchvision's CIoU, but finite for zero-height boxes."""
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(200, 2, generator=g) * 10
    wh = torch.rand(200, 2, generator=g) * 5 + 0.1
    b1 = torch.cat((xy, wh), 1)
    b2 = torch.cat((xy + torch.randn(200, 2, generator=g), wh * (torch.rand(200, 2, generator=g) + 0.5)), 1)
    ours = bbox_iou(b1, b2).squeeze(1)
    to_xyxy = torchvision.ops.box_convert
    theirs = 1 - torchvision.ops.complete_box_iou_loss(to_xyxy(b1, "cxcywh", "xyxy"), to_xyxy(b2, "cxcywh", "xyxy"))
    assert torch.allclose(ours, theirs, atol=1e-5)
    flat = torch.tensor([[1.0, 1.0, 0.0, 0.0]])  # a width/height prediction that underflowed to zero
    other = torch.tensor([[1.0, 1.0, 2.0, 2.0]])
    assert torch.isfinite(bbox_iou(flat, other)).all()
    assert not torch.isfinite(
        1 - torchvision.ops.complete_box_iou_loss(to_xyxy(flat, "cxcywh", "xyxy"), to_xyxy(other, "cxcywh", "xyxy"))
    ).all()


def test_gradients_flow_through_a_real_model():
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=3).train()
    loss_fn = ComputeLoss(model, HYP)
    targets = torch.tensor([[0, 0, 0.5, 0.5, 0.3, 0.4], [0, 2, 0.2, 0.3, 0.1, 0.1], [1, 1, 0.7, 0.6, 0.5, 0.2]])
    preds = model(torch.rand(2, 3, 64, 64))
    total, items = loss_fn(preds, targets)
    assert torch.isfinite(total).all() and (items > 0).all()
    total.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.model[0].conv.weight.grad.abs().sum() > 0  # reaches the first layer
    assert all(conv.weight.grad.abs().sum() > 0 for conv in model.model[-1].m)


def test_one_training_step_reduces_the_loss():
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=2).train()
    loss_fn = ComputeLoss(model, HYP)
    images = torch.rand(2, 3, 64, 64)
    targets = torch.tensor([[0, 0, 0.5, 0.5, 0.4, 0.4], [1, 1, 0.3, 0.3, 0.2, 0.3]])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(5):
        total, _ = loss_fn(model(images), targets)
        losses.append(total.item())
        opt.zero_grad()
        total.backward()
        opt.step()
    assert losses[-1] < losses[0]


# A fixed batch whose first two targets share image, anchor and cells: their gradients must add up.
FIXED_TARGETS = torch.tensor(
    [[0, 0, 0.5, 0.5, 0.3, 0.4], [0, 0, 0.5, 0.5, 0.3, 0.4], [0, 2, 0.2, 0.3, 0.1, 0.1], [1, 1, 0.7, 0.6, 0.5, 0.2]]
)


def _fixed_model_and_images():
    """yolov5n (3 classes, seed 0) in NHWC training mode, as the Trainer runs it on the CPU, and 2 random images."""
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=3).train().to(memory_format=torch.channels_last)
    images = torch.rand(2, 3, 64, 64).contiguous(memory_format=torch.channels_last)
    return model, images


def test_loss_and_gradients_equal_values_recorded_before_the_speedups():
    # Recorded with the code before the training-speed changes (contiguous Detect maps, plain indexing, in-place
    # SiLU, plain cat), one thread, this seed and batch.
    model, images = _fixed_model_and_images()
    total, items = ComputeLoss(model, HYP)(model(images), FIXED_TARGETS)
    assert total.item() == pytest.approx(2.462080478668213, rel=1e-5)
    assert items.tolist() == pytest.approx([0.08026283234357834, 0.44915303587913513, 0.70162433385849], rel=1e-5)
    total.backward()
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert norm.item() == pytest.approx(137.56153869628906, rel=1e-4)
    assert model.model[0].conv.weight.grad.abs().sum().item() == pytest.approx(1599.923828125, rel=1e-4)


def _plain_cells_and_objectness(pi, b, a, gj, gi):
    return pi[b, a, gj, gi], pi[..., 4]


def test_one_gradient_buffer_in_the_maps_layout_equals_plain_indexing(monkeypatch):
    model, images = _fixed_model_and_images()
    with torch.no_grad():
        maps = model(images)
    assert not maps[0].is_contiguous()  # training maps are views of the NHWC convolution output

    def loss_and_grads():
        preds = [m.detach().requires_grad_() for m in maps]
        total, items = ComputeLoss(model, HYP)(preds, FIXED_TARGETS)
        total.backward()
        return total, items, [p.grad for p in preds]

    total, items, grads = loss_and_grads()
    assert all(g.stride() == m.stride() for g, m in zip(grads, maps))  # no copy back into the NHWC layout
    monkeypatch.setattr(
        loss_module._CellsAndObjectness, "apply", lambda pi, b, a, gj, gi: (pi[b, a, gj, gi], pi[..., 4])
    )
    plain_total, plain_items, plain_grads = loss_and_grads()
    assert torch.equal(total, plain_total) and torch.equal(items, plain_items)
    assert all(torch.equal(g, p) for g, p in zip(grads, plain_grads))
    assert grads[0].abs().sum() > 0
