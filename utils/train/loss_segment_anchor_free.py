"""The segment losses of the anchor-free models: YOLOv8 and YOLO11 ("anchor_free-segment") and YOLO26
("end2end-segment"), as Ultralytics 8.4 computes them.

AnchorFreeSegmentLoss: AnchorFreeLoss's box, class and DFL terms, plus the mask term (utils.train.loss_segment) of
every positive point of the task-aligned assignment against its assigned object's mask, summed and divided by the
number of positive points, times the box gain. Items (box, seg, cls, dfl).

EndToEndSegmentLoss (YOLO26): the same on both branches, weighted as EndToEndLoss weighs them; the one-to-one branch
sees the prototypes detached (its coefficients come from detached features: it trains only its own layers), as
Ultralytics' head hands them over. YOLO26's prototype module also predicts per-class maps at stride 8 in training:
their BCE + Dice loss (0.5 each) against the classes of the objects' masks (where objects overlap, the smallest
one's class) is a fifth item, sem, also at the box gain. Items (box, seg, cls, dfl, sem): the one-to-one branch's.
Its assignment also scores each candidate's predicted mask (utils.train.loss_segment_assigner).
"""

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from utils.train.loss_anchor_free import ONE2ONE_TOPK, TOPK, AnchorFreeLoss, EndToEndLoss, pad_targets
from utils.train.loss_segment import object_mask_losses, segment_inputs, unused
from utils.train.loss_segment_assigner import MaskAwareAssigner

DICE_SMOOTH = 1.0  # Ultralytics' smoothing of the semantic Dice loss


class _RecordingAssigner:
    """Calls the loss's assigner and keeps its latest assignment: the mask term needs the points and objects it
    matched, which AnchorFreeLoss.losses uses inside."""

    def __init__(self, assigner):
        self.assigner, self.last = assigner, None

    def __call__(self, *args):
        self.last = self.assigner(*args)
        return self.last


def target_rows(targets: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(B, M) the row in targets of each image's m-th object, in the padded layout pad_targets gives the assigner."""
    numbered = targets.clone()
    numbered[:, 1] = torch.arange(len(targets), device=targets.device, dtype=targets.dtype)
    return pad_targets(numbered, batch_size, (1, 1))[0][..., 0].long()


def padded_masks(masks: torch.Tensor, targets: torch.Tensor, protos: torch.Tensor) -> torch.Tensor:
    """The objects' masks (B, M, h, w) bool at the prototypes' size (nearest), in the assigner's padded layout."""
    if tuple(masks.shape[1:]) != tuple(protos.shape[2:]) and len(masks):
        masks = F.interpolate(masks[None].float(), protos.shape[2:], mode="nearest")[0]
    bs = protos.shape[0]
    _, _, real = pad_targets(targets, bs, (1, 1))
    return masks.bool()[target_rows(targets, bs)] & real[..., None]


def flat_coefficients(coefficients: list[torch.Tensor]) -> torch.Tensor:
    """Per-level coefficient maps (B, nm, H, W) as (B, N, nm), points in the order the detection maps are flattened."""
    bs, channels = coefficients[0].shape[:2]
    return torch.cat([c.reshape(bs, channels, -1) for c in coefficients], 2).transpose(1, 2)


class AnchorFreeSegmentLoss(AnchorFreeLoss):
    """Box (CIoU), mask (BCE in the box), class (BCE) and distance (DFL) losses of an AnchorFreeSegment head."""

    LOSS_NAMES = ("box", "seg", "cls", "dfl")

    def __init__(self, model: nn.Module, hyp: dict, topk=TOPK, final_topk: int | None = None, mask_aware=False):
        super().__init__(model, hyp, topk, final_topk)
        box = self.assigner
        if mask_aware:  # YOLO26: the overlap is the mean of box and mask IoU
            box = MaskAwareAssigner(box.nc, box.topk, box.alpha, box.beta, box.min_side, box.final_topk)
        self.assigner = _RecordingAssigner(box)

    def __call__(self, preds, targets: torch.Tensor, masks: torch.Tensor | None = None):
        maps, protos, coefficients = segment_inputs(preds)
        if isinstance(coefficients, list):
            coefficients = flat_coefficients(coefficients)
        if protos is None or masks is None:  # detection maps alone: no mask term
            box, cls, dfl = self.losses(maps, targets)
            losses = torch.stack((box, box.new_zeros(()), cls, dfl))
        else:
            losses = self.segment_losses(maps, coefficients, protos, targets, masks)
        return (losses.sum() * maps[0].shape[0]).reshape(1), losses.detach()

    def segment_losses(self, maps, coefficients, protos, targets, masks) -> torch.Tensor:
        """The four gain-scaled losses (box, seg, cls, dfl) of a batch, before the batch-size factor; coefficients
        (B, N, nm), per-level maps or flat."""
        if isinstance(coefficients, list):
            coefficients = flat_coefficients(coefficients)
        stride = int(self.head.stride[0])
        image_hw = (maps[0].shape[2] * stride, maps[0].shape[3] * stride)
        if isinstance(self.assigner.assigner, MaskAwareAssigner):
            self.assigner.assigner.with_masks(
                coefficients, protos, padded_masks(masks, targets, protos), protos.shape[2] / image_hw[0]
            )
        box, cls, dfl = self.losses(maps, targets)
        seg = self.mask_term(self.assigner.last, coefficients, protos, targets, masks, image_hw)
        return torch.stack((box, seg * self.hyp["box"], cls, dfl))

    @staticmethod
    def mask_term(assigned, coefficients, protos, targets, masks, image_hw) -> torch.Tensor:
        """Sum of the positive points' mask losses over their number; coefficients (B, N, nm), protos (B, nm, h, w)."""
        foreground = assigned.foreground
        if not foreground.any():
            return unused(protos, coefficients)
        if tuple(masks.shape[1:]) != tuple(protos.shape[2:]):  # Ultralytics resizes the prototypes to the masks
            protos = F.interpolate(protos, masks.shape[1:], mode="bilinear", align_corners=False)
        images, points = foreground.nonzero(as_tuple=True)
        rows = target_rows(targets, foreground.shape[0])[images, assigned.gt_index[images, points]]
        h, w = image_hw
        boxes = assigned.boxes[images, points] / torch.tensor([w, h, w, h], device=protos.device)
        losses = object_mask_losses(coefficients[images, points], protos, images, boxes, masks[rows])
        return losses.sum() / len(points)


def semantic_targets(masks: torch.Tensor, targets: torch.Tensor, batch_size: int, nc: int) -> torch.Tensor:
    """(B, nc, h, w) one-hot class of each pixel an object's mask covers (the smallest such object's, by mask pixels),
    zero where none does."""
    h, w = masks.shape[1:]
    out = torch.zeros(batch_size, nc, h, w, device=masks.device)
    covered = masks.bool()
    size = covered.flatten(1).sum(1).float()
    for image in targets[:, 0].long().unique().tolist():
        rows = (targets[:, 0] == image).nonzero().squeeze(1)
        area = torch.where(covered[rows], size[rows, None, None], torch.inf)  # (n, h, w)
        smallest = rows[area.argmin(0)]  # (h, w)
        present = covered[rows].any(0)
        out[image].scatter_(0, targets[smallest, 1].long()[None], present[None].float())
    return out


def bce_dice_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0.5 x BCE + 0.5 x (1 - Dice) of per-class logits (B, nc, h, w), the target resized (nearest) to theirs."""
    if tuple(target.shape[2:]) != tuple(logits.shape[2:]):
        target = F.interpolate(target, logits.shape[2:], mode="nearest")
    bce = F.binary_cross_entropy_with_logits(logits, target)
    p = logits.sigmoid()
    dice = (2 * (p * target).sum((2, 3)) + DICE_SMOOTH) / (p.sum((2, 3)) + target.sum((2, 3)) + DICE_SMOOTH)
    return 0.5 * bce + 0.5 * (1 - dice).mean()


class EndToEndSegmentLoss(EndToEndLoss):
    """YOLO26's segment loss: one-to-many and one-to-one AnchorFreeSegmentLoss, weighted o2m : 1 - o2m (set_epoch),
    each with the semantic term; the items are the one-to-one branch's (box, seg, cls, dfl, sem)."""

    LOSS_NAMES = (*AnchorFreeSegmentLoss.LOSS_NAMES, "sem")

    def __init__(self, model: nn.Module, hyp: dict, epochs: int = 1):  # not super()'s: it builds detection losses
        self.one2many = AnchorFreeSegmentLoss(model, hyp, topk=TOPK, mask_aware=True)
        self.one2one = AnchorFreeSegmentLoss(model, hyp, topk=ONE2ONE_TOPK, final_topk=1, mask_aware=True)
        self.head, self.epochs, self.hyp = self.one2many.head, epochs, hyp
        self.set_epoch(0)

    def __call__(self, preds, targets: torch.Tensor, masks: torch.Tensor | None = None):
        if not (isinstance(preds, dict) and "semantic" in preds) or masks is None:
            # An eval output (validation) or detection maps: the branch the head outputs in eval, without semantics;
            # the one-to-one branch's eval coefficients are its final rows' only, so its mask term is not known.
            if self.head.end2end:
                loss, items = self.one2one(segment_inputs(preds)[0], targets)
            else:
                loss, items = self.one2many(preds, targets, masks)
            return loss, torch.cat((items, items.new_zeros(1)))
        maps, bs = preds["detect"], preds["protos"].shape[0]
        protos, semantic = preds["protos"], preds["semantic"]
        many = self.branch(self.one2many, maps["one2many"], preds["coefficients"], protos, semantic, targets, masks)
        one = self.branch(
            self.one2one,
            maps["one2one"],
            preds["one2one_coefficients"],
            protos.detach(),
            semantic.detach(),
            targets,
            masks,
        )
        loss = (many.sum() * self.o2m + one.sum() * (1 - self.o2m)) * bs
        return loss.reshape(1), one.detach()

    def branch(self, loss, maps, coefficients, protos, semantic, targets, masks) -> torch.Tensor:
        """One branch's five gain-scaled losses; the semantic term only when the branch has positive points."""
        losses = loss.segment_losses(maps, coefficients, protos, targets, masks)
        if loss.assigner.last.foreground.any():
            classes = semantic_targets(masks, targets, semantic.shape[0], semantic.shape[1])
            sem = bce_dice_loss(semantic.float(), classes) * self.hyp["box"]
        else:
            sem = unused(semantic)
        return torch.cat((losses, sem.reshape(1)))
