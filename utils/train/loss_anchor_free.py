"""The training loss of the anchor-free models (YOLOv8, YOLO11; YOLO26 through EndToEndLoss).

Targets come from the task-aligned assigner (utils.train.assigner). Three terms, each normalised by the sum of the
soft class targets: BCE of every point's class logits against those targets; for the positive points CIoU of the
decoded box and, per box side, the distribution focal loss (DFL) of the distance bins (with reg_max 1, YOLO26's
direct distances, an L1 loss on the distances in image fractions instead). Gains box, cls and dfl from the hyp
(Ultralytics' 7.5, 0.5, 1.5 in data/hyp.anchor_free.yaml), not rescaled to the model or image size.

Same call as utils.train.loss.ComputeLoss: (per-level maps, targets (n, 6) image, class, x, y, w, h normalised)
-> (loss x batch size, detached (box, cls, dfl)).
"""

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from utils.torch_utils import de_parallel
from utils.train.assigner import TaskAlignedAssigner
from utils.train.loss import bbox_iou

TOPK, ALPHA, BETA = 10, 0.5, 6.0  # Ultralytics' task-aligned assignment for detection
ONE2ONE_TOPK = 7  # YOLO26's one-to-one branch: candidates from the top 7, then the single best point per box
O2M_START, O2M_END = 0.8, 0.1  # YOLO26: the one-to-many loss weight, decayed linearly over the epochs


def pad_targets(targets: torch.Tensor, batch_size: int, image_hw: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    """YOLO targets (n, 6) as per-image padded (labels (B, M, 1), boxes (B, M, 4) xyxy pixels, mask (B, M, 1))."""
    device = targets.device
    image = targets[:, 0].long()
    counts = torch.zeros(batch_size, dtype=torch.long, device=device).index_add_(0, image, torch.ones_like(image))
    m = int(counts.max()) if len(image) else 0
    order = torch.sort(image, stable=True).indices  # each image's boxes keep their order
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty_like(image)
    slot[order] = torch.arange(len(image), dtype=torch.long, device=device) - starts[image[order]]
    h, w = image_hw
    xywh = targets[:, 2:6].float() * torch.tensor([w, h, w, h], device=device, dtype=torch.float32)
    xyxy = torch.cat((xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2), 1)
    labels = torch.zeros((batch_size, m, 1), device=device)
    boxes = torch.zeros((batch_size, m, 4), device=device)
    mask = torch.zeros((batch_size, m, 1), dtype=torch.bool, device=device)
    labels[image, slot, 0] = targets[:, 1].float()
    boxes[image, slot] = xyxy
    mask[image, slot] = True
    return labels, boxes, mask


def distribution_focal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """DFL (Generalized Focal Loss): cross-entropy on the two bins either side of each target distance, weighted by
    nearness. logits (n, 4, reg_max), target (n, 4) in bins, already within [0, reg_max - 1); mean over the sides."""
    left = target.long()
    weight_left = (left + 1).float() - target
    log_p = F.log_softmax(logits, dim=2)
    near = log_p.gather(2, left[..., None])[..., 0]
    far = log_p.gather(2, (left + 1)[..., None])[..., 0]
    return -(near * weight_left + far * (1 - weight_left)).mean(1, keepdim=True)


class AnchorFreeLoss:
    """Box (CIoU), class (BCE) and distance (DFL, or L1 for reg_max 1) losses of an AnchorFreeDetect head."""

    LOSS_NAMES = ("box", "cls", "dfl")  # the loss items' names, as Ultralytics reports them

    def __init__(self, model: nn.Module, hyp: dict, topk: int = TOPK, final_topk: int | None = None):
        head = de_parallel(model).model[-1]
        self.head, self.hyp = head, hyp
        self.nc, self.reg_max = head.nc, head.reg_max
        strides = head.stride.tolist()
        # Ultralytics floors tiny boxes' sides at the middle stride when choosing the points inside them.
        min_side = strides[1] if len(strides) > 1 else strides[0]
        self.assigner = TaskAlignedAssigner(self.nc, topk, ALPHA, BETA, min_side=min_side, final_topk=final_topk)

    def __call__(self, preds: list[torch.Tensor], targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        losses = self.losses(preds, targets)
        return (losses.sum() * preds[0].shape[0]).reshape(1), losses.detach()

    def losses(self, preds: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        """The three gain-scaled losses (box, cls, dfl) of a batch, before the batch-size factor."""
        bs = preds[0].shape[0]
        # Float32 here: under autocast the soft targets and distance bins need the precision.
        flat = torch.cat([p.float().reshape(bs, self.head.no, -1) for p in preds], 2).transpose(1, 2)  # (B, N, no)
        distances, logits = flat.split((4 * self.reg_max, self.nc), 2)
        points, strides = self._anchor_points(preds)
        image_hw = (preds[0].shape[2] * int(self.head.stride[0]), preds[0].shape[3] * int(self.head.stride[0]))
        gt_labels, gt_boxes, gt_mask = pad_targets(targets.to(flat.device), bs, image_hw)
        sides = self._sides(distances)  # (B, N, 4) in strides
        boxes = torch.cat((points - sides[..., :2], points + sides[..., 2:]), 2)  # xyxy in strides
        assigned = self.assigner(
            logits.detach().sigmoid(), boxes.detach() * strides, points * strides, gt_labels, gt_boxes, gt_mask
        )
        score_sum = assigned.scores.sum().clamp(min=1)
        loss_cls = F.binary_cross_entropy_with_logits(logits, assigned.scores, reduction="none").sum() / score_sum
        loss_box, loss_dist = self._box_losses(distances, sides, boxes, points, strides, assigned, score_sum, image_hw)
        gains = (self.hyp["box"], self.hyp["cls"], self.hyp["dfl"])
        return torch.stack((loss_box * gains[0], loss_cls * gains[1], loss_dist * gains[2]))

    def _sides(self, distances: torch.Tensor) -> torch.Tensor:
        """Distances from the anchor point to the left, top, right, bottom sides, in strides: the expectation of
        each side's softmax over its reg_max bins (DFL), or the raw values for reg_max 1."""
        if self.reg_max == 1:
            return distances
        b, n, _ = distances.shape
        bins = torch.arange(self.reg_max, device=distances.device, dtype=distances.dtype)
        return distances.view(b, n, 4, self.reg_max).softmax(3) @ bins

    def _box_losses(self, distances, sides, boxes, points, strides, assigned, score_sum, image_hw):
        """(CIoU loss, DFL or L1 loss) over the positive points, weighted by their soft class targets."""
        fg = assigned.foreground
        weight = assigned.scores.sum(2)[fg][:, None]  # (P, 1)
        target_boxes = assigned.boxes / strides  # back to strides
        iou = bbox_iou(boxes[fg], target_boxes[fg], xywh=False, CIoU=True)
        loss_box = ((1.0 - iou) * weight).sum() / score_sum
        target_sides = torch.cat((points - target_boxes[..., :2], target_boxes[..., 2:] - points), 2)
        if self.reg_max > 1:
            target = target_sides[fg].clamp(0, self.reg_max - 1 - 0.01)
            logits = distances[fg].view(-1, 4, self.reg_max)
            loss_dist = (distribution_focal_loss(logits, target) * weight).sum() / score_sum
        else:  # L1 on the distances as fractions of the image width (left, right) and height (top, bottom)
            h, w = image_hw
            scale = strides.expand(fg.shape[0], -1, -1)[fg] / torch.tensor([w, h, w, h], device=strides.device)
            l1 = F.l1_loss(sides[fg] * scale, target_sides[fg] * scale, reduction="none").mean(1, keepdim=True)
            loss_dist = (l1 * weight).sum() / score_sum
        return loss_box, loss_dist

    def _anchor_points(self, preds: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Cell centres (N, 2) in strides and each one's stride (N, 1), levels in order, cells row-major."""
        points, strides = [], []
        for i, p in enumerate(preds):
            h, w = p.shape[2:]
            ys = torch.arange(h, device=p.device, dtype=torch.float32) + 0.5
            xs = torch.arange(w, device=p.device, dtype=torch.float32) + 0.5
            yv, xv = torch.meshgrid(ys, xs, indexing="ij")
            points.append(torch.stack((xv, yv), 2).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(self.head.stride[i]), device=p.device))
        return torch.cat(points), torch.cat(strides)


class EndToEndLoss:
    """YOLO26's loss: one-to-many (top 10, as YOLOv8) on the main branch plus one-to-one (one point per box, what
    its NMS-free output needs) on the second, weighted o2m : 1 - o2m with o2m falling from 0.8 to 0.1 over the
    epochs (set_epoch). The loss items are the one-to-one branch's. Given plain maps (validation), the branch the
    head outputs in eval is scored: one-to-one when end-to-end, else one-to-many."""

    LOSS_NAMES = AnchorFreeLoss.LOSS_NAMES

    def __init__(self, model: nn.Module, hyp: dict, epochs: int = 1):
        self.one2many = AnchorFreeLoss(model, hyp, topk=TOPK)
        self.one2one = AnchorFreeLoss(model, hyp, topk=ONE2ONE_TOPK, final_topk=1)
        self.head, self.epochs = self.one2many.head, epochs
        self.o2m = O2M_START

    def set_epoch(self, epoch: int) -> None:
        """The weights of the two branches for this (0-based) epoch."""
        progress = max(1 - epoch / max(self.epochs - 1, 1), 0)
        self.o2m = progress * (O2M_START - O2M_END) + O2M_END

    def __call__(self, preds, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(preds, dict):
            return (self.one2one if self.head.end2end else self.one2many)(preds, targets)
        bs = preds["one2many"][0].shape[0]
        many = self.one2many.losses(preds["one2many"], targets)
        one = self.one2one.losses(preds["one2one"], targets)
        loss = (many.sum() * self.o2m + one.sum() * (1 - self.o2m)) * bs
        return loss.reshape(1), one.detach()
