"""The segment losses on hand-built batches: the mask term's value, its equality with the detection loss plus the
mask term, gradients into the prototype branch, empty batches, eval outputs, YOLO26's semantic term, and a tiny model
overfitting one image with one mask."""

import math

import pytest
import torch
from torch.nn import functional as F  # noqa: N812

from models.nn.yolo import Model
from utils.data.hyp import load_hyp
from utils.files import DATA_DIR
from utils.train.loss import ComputeLoss
from utils.train.loss_anchor_free import AnchorFreeLoss
from utils.train.loss_segment import crop_to_boxes, object_mask_losses
from utils.train.loss_segment_anchor_free import (
    bce_dice_loss,
    semantic_targets,
)
from utils.train.loss_segment_assigner import MaskAwareAssigner
from utils.train.setup import build_loss
from utils.train.step import loss_gains

SIZE = 64  # input pixels: prototypes and masks at 16 x 16
CONFIGS = ("yolov5n-seg.yaml", "yolo11n-seg.yaml", "yolo26n-seg.yaml")


def _disc(cx: float, cy: float, r: float, size: int = SIZE // 4) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    return ((xx - cx) ** 2 + (yy - cy) ** 2 <= r**2).to(torch.uint8)


def _batch():
    """Two images: the first with a disc and a square of classes 0 and 1, the second with one disc of class 1."""
    targets = torch.tensor(
        [[0, 0, 0.3, 0.3, 0.4, 0.4], [0, 1, 0.75, 0.75, 0.375, 0.375], [1, 1, 0.5, 0.5, 0.5, 0.5]], dtype=torch.float32
    )
    square = torch.zeros(SIZE // 4, SIZE // 4, dtype=torch.uint8)
    square[9:15, 9:15] = 1
    masks = torch.stack((_disc(4.8, 4.8, 3.2), square, _disc(8, 8, 4)))
    images = torch.zeros(2, 3, SIZE, SIZE)
    for row, mask in zip(targets.tolist(), masks):
        images[int(row[0])] += torch.nn.functional.interpolate(mask[None, None].float(), scale_factor=4)[0]
    return images.clamp(0, 1), targets, masks


def _model_and_loss(cfg: str, nc: int = 2):
    torch.manual_seed(0)
    model = Model(cfg, nc=nc)
    hyp_file = "hyp.scratch.yaml" if model.family.anchors else "hyp.anchor_free.yaml"
    hyp = loss_gains(load_hyp(DATA_DIR / hyp_file), model.model[-1].nl, nc, SIZE, model.family.anchors)
    return model.train(), build_loss(model, {**hyp, "label_smoothing": 0.0}, epochs=10), hyp


def test_crop_keeps_the_pixels_whose_index_is_inside_the_box():
    values = torch.ones(2, 4, 5)
    boxes = torch.tensor([[1.0, 0.5, 3.0, 2.0], [0.0, 0.0, 5.0, 4.0]])
    cropped = crop_to_boxes(values, boxes)
    assert cropped[0].nonzero().tolist() == [[1, 1], [1, 2]]  # columns 1, 2 (< 3); row 1 (>= 0.5, < 2)
    assert cropped[1].sum() == 20


def test_zero_coefficients_give_log2_per_object_whatever_its_box():
    """Logits 0 everywhere: the BCE is log 2 at every pixel, so the mean inside the box (the mean over the map of the
    cropped loss over the box's area) is log 2 for a box on whole pixels, large or small."""
    protos = torch.randn(2, 4, 8, 8)
    boxes = torch.tensor([[0.0, 0.0, 0.5, 0.25], [0.25, 0.25, 1.0, 1.0], [0.125, 0.5, 0.25, 0.625]])
    gt = torch.randint(0, 2, (3, 8, 8))
    losses = object_mask_losses(torch.zeros(3, 4), protos, torch.tensor([0, 1, 1]), boxes, gt)
    assert torch.allclose(losses, torch.full((3,), math.log(2)), atol=1e-6)


def test_the_windowed_mask_loss_equals_the_whole_map_s_cropped_bce():
    """box_windows' BCE equals the whole map's BCE cropped to the box (crop_to_boxes), averaged over the map and
    divided by the box's area, in value and gradient: boxes large and small, past the map's edges, and empty."""
    torch.manual_seed(0)
    n, h, w = 60, 12, 16
    images = torch.randint(0, 3, (n,))
    centres, sizes = torch.rand(n, 2) * 1.4 - 0.2, torch.rand(n, 2) * 0.6
    sizes[:5] = 0  # empty boxes
    boxes = torch.cat((centres - sizes / 2, centres + sizes / 2), 1)
    gt = torch.randint(0, 2, (n, h, w)).float()
    coefficients, protos = torch.randn(n, 4, requires_grad=True), torch.randn(3, 4, h, w, requires_grad=True)
    windowed = object_mask_losses(coefficients, protos, images, boxes, gt)
    gradients = torch.autograd.grad(windowed.sum(), (coefficients, protos))
    logits = torch.einsum("nc,nchw->nhw", coefficients, protos[images])
    bce = F.binary_cross_entropy_with_logits(logits, gt, reduction="none")
    scale = torch.tensor([w, h, w, h])
    areas = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).clamp(min=1e-9)
    whole = crop_to_boxes(bce, boxes * scale).mean((1, 2)) / areas
    assert torch.allclose(windowed, whole, rtol=1e-5, atol=1e-6) and windowed[:5].eq(0).all()
    for found, expected in zip(gradients, torch.autograd.grad(whole.sum(), (coefficients, protos))):
        assert torch.allclose(found, expected, rtol=1e-5, atol=1e-6)


def test_a_perfect_mask_costs_less_than_its_inverse():
    gt = _disc(4, 4, 2.5, size=8)[None]
    protos = (gt.float() * 2 - 1)[None] * 10  # one prototype: +10 on the object, -10 elsewhere
    box = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    good = object_mask_losses(torch.ones(1, 1), protos, torch.tensor([0]), box, gt)
    bad = object_mask_losses(-torch.ones(1, 1), protos, torch.tensor([0]), box, gt)
    assert good < 1e-3 < 9 < bad


@pytest.mark.parametrize("cfg", CONFIGS)
def test_segment_loss_items_and_gradient_into_the_prototypes(cfg):
    model, loss, _ = _model_and_loss(cfg)
    images, targets, masks = _batch()
    total, items = loss(model(images), targets, masks)
    names = {"yolov5": ("box", "seg", "obj", "cls"), "anchor_free": ("box", "seg", "cls", "dfl")}
    names["end2end"] = (*names["anchor_free"], "sem")
    assert loss.LOSS_NAMES == names[model.family.loss] and items.shape == (len(loss.LOSS_NAMES),)
    assert torch.isfinite(total) and total.shape == (1,) and (items[:2] > 0).all()
    total.backward()
    proto_grads = [p.grad for n, p in model.named_parameters() if ".proto." in n]
    assert proto_grads and all(g is not None for g in proto_grads) and sum(float(g.abs().sum()) for g in proto_grads)


def test_yolov5_segment_loss_is_the_detection_loss_plus_the_mask_term():
    model, loss, hyp = _model_and_loss("yolov5n-seg.yaml")
    images, targets, masks = _batch()
    outputs = model(images)
    detection = ComputeLoss(model, {**hyp, "label_smoothing": 0.0})
    det_total, det_items = detection([m[..., : 5 + 2] for m in outputs["detect"]], targets)
    total, items = loss(outputs, targets, masks)
    assert torch.allclose(items[[0, 2, 3]], det_items)
    assert torch.allclose(total, det_total + items[1] * len(images))
    # The mask term alone: hand-computed from the same matches (each level and image: the mean of its matches).
    numbered = targets.clone()
    numbered[:, 1] = torch.arange(3.0)
    rows, _, indices, _ = detection.build_targets(outputs["detect"], numbered)
    expected = 0.0
    for level, (b, a, gj, gi) in enumerate(indices):
        for image in b.unique():
            j = b == image
            coefficients = outputs["detect"][level][b[j], a[j], gj[j], gi[j], 7:]
            xywh = targets[rows[level][j], 2:]
            boxes = torch.cat((xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2), 1)
            protos = outputs["protos"][image][None].expand(len(coefficients), -1, -1, -1)
            values = object_mask_losses(
                coefficients, protos, torch.arange(len(coefficients)), boxes, masks[rows[level][j]]
            )
            expected += values.mean()
    assert torch.allclose(items[1], expected * hyp["box"] / len(images), rtol=1e-5)


def test_anchor_free_segment_loss_is_the_detection_loss_plus_the_mask_term():
    model, loss, hyp = _model_and_loss("yolo11n-seg.yaml")
    images, targets, masks = _batch()
    outputs = model(images)
    total, items = loss(outputs, targets, masks)
    detection = AnchorFreeLoss(model, hyp)
    det_total, det_items = detection(outputs["detect"], targets)
    assert torch.allclose(items[[0, 2, 3]], det_items)
    assert torch.allclose(total, det_total + items[1] * len(images))
    assert loss.assigner.last.foreground.sum() > 0 and items[1] > 0


def test_yolo26_segment_loss_weighs_its_branches_and_scores_masks_in_its_assignment():
    model, loss, hyp = _model_and_loss("yolo26n-seg.yaml")
    images, targets, masks = _batch()
    outputs = model(images)
    total, items = loss(outputs, targets, masks)
    maps, protos = outputs["detect"], outputs["protos"]
    many = loss.one2many.segment_losses(maps["one2many"], outputs["coefficients"], protos, targets, masks)
    one = loss.one2one.segment_losses(maps["one2one"], outputs["one2one_coefficients"], protos, targets, masks)
    sem = items[4]
    expected = ((many.sum() + sem) * loss.o2m + (one.sum() + sem) * (1 - loss.o2m)) * len(images)
    assert torch.allclose(total, expected, rtol=1e-5) and torch.allclose(items[:4], one)
    # The box-only assignment (the detection loss's) gives other box, class and distance terms.
    box_only = AnchorFreeLoss(model, hyp).losses(maps["one2many"], targets)
    assert not torch.allclose(many[[0, 2, 3]], box_only)


def test_rows_of_the_assignment_pick_each_objects_own_mask():
    """With every other object's mask swapped in, the loss of a model that predicts the true masks rises."""
    model, loss, _ = _model_and_loss("yolo11n-seg.yaml")
    images, targets, masks = _batch()
    outputs = model(images)
    right = loss.segment_losses(outputs["detect"], outputs["coefficients"], outputs["protos"], targets, masks)
    shuffled = masks[[1, 0, 2]]  # the first image's two objects swap masks
    wrong = loss.segment_losses(outputs["detect"], outputs["coefficients"], outputs["protos"], targets, shuffled)
    assert not torch.allclose(right[1], wrong[1])
    assert torch.allclose(right[[0, 2, 3]], wrong[[0, 2, 3]])


@pytest.mark.parametrize("cfg", CONFIGS)
def test_a_batch_without_objects_keeps_every_layer_in_the_graph(cfg):
    model, loss, _ = _model_and_loss(cfg)
    images = torch.zeros(2, 3, SIZE, SIZE)
    total, items = loss(model(images), torch.zeros(0, 6), torch.zeros(0, SIZE // 4, SIZE // 4, dtype=torch.uint8))
    assert torch.isfinite(total) and items[1] == 0
    total.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if ".proto." in n or "cv4" in n)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_eval_outputs_give_the_same_number_of_items(cfg):
    """Validation calls the loss with the model's eval outputs and the masks: the mask term is scored where the eval
    output holds every prediction's coefficients (YOLOv5, YOLOv8/YOLO11), zero for YOLO26's final rows."""
    model, loss, _ = _model_and_loss(cfg)
    images, targets, masks = _batch()
    model.eval()
    with torch.no_grad():
        total, items = loss(model(images), targets, masks)
        plain, plain_items = loss(model(images)[1], targets)
    assert items.shape == plain_items.shape == (len(loss.LOSS_NAMES),) and torch.isfinite(total)
    assert (items[1] > 0) != model.family.end2end and plain_items[1] == 0


def test_masks_of_another_size_are_scored_at_one_size():
    """--multi-scale resizes the images, not the loader's masks. YOLOv5 resizes the masks to the prototypes (nearest:
    a 2x larger copy gives the same loss); Ultralytics resizes the prototypes to the masks (bilinear: close)."""
    images, targets, masks = _batch()
    big = torch.nn.functional.interpolate(masks[None].float(), scale_factor=2)[0].to(torch.uint8)
    for cfg, rtol in (("yolov5n-seg.yaml", 1e-6), ("yolo11n-seg.yaml", 0.25)):
        model, loss, _ = _model_and_loss(cfg)
        outputs = model(images)
        _, small_items = loss(outputs, targets, masks)
        _, big_items = loss(outputs, targets, big)
        assert torch.allclose(small_items, big_items, rtol=rtol), cfg
        assert torch.equal(small_items[[0, 2, 3]], big_items[[0, 2, 3]])


def test_semantic_targets_give_overlaps_to_the_smallest_object():
    masks = torch.zeros(2, 4, 4, dtype=torch.uint8)
    masks[0, :, :3] = 1  # class 2, 12 pixels
    masks[1, 1:3, 1:4] = 1  # class 0, 6 pixels: its pixels are class 0
    targets = torch.tensor([[0, 2, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.float32)
    sem = semantic_targets(masks, targets, 2, 3)
    assert sem.shape == (2, 3, 4, 4) and sem[1].sum() == 0  # nothing in the second image
    assert torch.equal(sem[0, 0], masks[1].float())
    assert torch.equal(sem[0, 2], (masks[0].bool() & ~masks[1].bool()).float())
    assert sem[0, 1].sum() == 0 and sem[0].sum(0).max() == 1


def test_bce_dice_of_a_perfect_and_a_wrong_prediction():
    target = torch.zeros(1, 2, 4, 4)
    target[0, 0, :2] = 1
    target[0, 1, 2:] = 1
    perfect = bce_dice_loss((target * 2 - 1) * 20, target)
    wrong = bce_dice_loss((1 - target * 2) * 20, target)
    assert perfect < 1e-3 and wrong > 10  # BCE 20 x 0.5, Dice 1 x 0.5
    # The target is resized (nearest) to the logits' size: a 2x finer target of the same classes gives the same.
    fine = torch.nn.functional.interpolate(target, scale_factor=2)
    assert torch.allclose(bce_dice_loss(target * 4 - 2, fine), bce_dice_loss(target * 4 - 2, target))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", CONFIGS)
def test_a_tiny_model_overfits_one_image_with_one_mask(cfg):
    model, loss, _ = _model_and_loss(cfg, nc=1)
    images, targets, masks = _batch()
    images, targets, masks = images[1:], targets[2:].clone(), masks[2:]
    targets[:, :2] = 0
    optimizer = torch.optim.Adam(model.parameters(), 2e-3)
    seg = []
    for _ in range(12):
        total, items = loss(model(images), targets, masks)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        seg.append(float(items[1]))
    assert seg[-1] < 0.6 * seg[0], seg


def test_yolo26_assignment_prefers_the_point_whose_mask_is_right():
    """Two points predict the object's box equally well; only one predicts its mask (the other its inverse): the
    one-to-one assignment picks the first, and its soft target is its mean of box and mask IoU (1)."""
    centres = (torch.arange(8, dtype=torch.float32) + 0.5) * 8
    yv, xv = torch.meshgrid(centres, centres, indexing="ij")
    points = torch.stack((xv, yv), 2).view(-1, 2)  # 8 x 8 points of stride 8: a 64 px image
    gt_boxes = torch.tensor([[[16.0, 16.0, 48.0, 48.0]]])
    gt = torch.zeros(1, 1, 16, 16, dtype=torch.bool)
    gt[..., 5:11, 4:12] = True  # the object's mask at 1/4, inside its box
    protos = (gt.float() * 2 - 1)[:, :1]  # one prototype: +1 on the object, -1 elsewhere
    right, wrong = 3 * 8 + 3, 4 * 8 + 4  # two points inside the box
    coefficients = torch.zeros(1, 64, 1)
    coefficients[0, right], coefficients[0, wrong] = 1.0, -1.0
    assigner = MaskAwareAssigner(1, topk=10, final_topk=1)
    assigner.with_masks(coefficients, protos, gt, scale=16 / 64)
    scores = torch.full((1, 64, 1), 0.5)
    boxes = gt_boxes.expand(1, 64, 4).clone()
    mask = torch.ones(1, 1, 1, dtype=torch.bool)
    assigned = assigner(scores, boxes, points, torch.zeros(1, 1, 1), gt_boxes, mask)
    assert assigned.foreground[0].nonzero().squeeze(1).tolist() == [right]
    assert torch.isclose(assigned.scores[0, right, 0], torch.tensor(1.0))
    # Without the masks it is the box assigner: the two points tie, and the soft target is the box IoU alone.
    assigner.masks = None
    plain = assigner(scores, boxes, points, torch.zeros(1, 1, 1), gt_boxes, mask)
    assert plain.foreground.sum() == 1 and torch.isclose(plain.scores.max(), torch.tensor(1.0))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_under_autocast_the_losses_are_computed_in_float32(cfg):
    """--amp: the forward pass in bfloat16 (CUDA's float16 alike); the mask term decodes the masks in float32, so the
    items stay close to a float32 step's and the gradient reaches the prototypes."""
    model, loss, _ = _model_and_loss(cfg)
    images, targets, masks = _batch()
    _, reference = loss(model(images), targets, masks)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        total, items = loss(model(images), targets, masks)
    assert total.dtype == torch.float32 and items.dtype == torch.float32
    # YOLO26's one-to-one branch keeps one point per object: bfloat16 rounding may pick a neighbour of the float32
    # choice, whose mask differs more than its box.
    seg_rtol = 0.3 if model.family.end2end else 0.1
    others = [i for i in range(len(items)) if i != 1]
    assert torch.allclose(items[others], reference[others], rtol=0.1, atol=0.02), (items, reference)
    assert torch.allclose(items[1], reference[1], rtol=seg_rtol), (items, reference)
    total.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if ".proto.cv3" in n)
