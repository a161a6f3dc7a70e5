"""The YOLOv5 training loss: target-to-anchor matching, CIoU box loss, objectness and class BCE."""

import math

import torch
from torch import nn

from utils.torch_utils import de_parallel

# Objectness weight per output level, from the finest (P3) to the coarsest: small-object levels see many
# more negative cells, so their objectness loss is weighted up.
BALANCE = {3: [4.0, 1.0, 0.4]}
BALANCE_DEFAULT = [4.0, 1.0, 0.25, 0.06, 0.02]

# Cell offsets a target may also be assigned to: itself, then left, up, right, down neighbours.
_NEIGHBOURS = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], dtype=torch.float32)
_BIAS = 0.5  # a neighbour is used when the centre lies within half a cell of the shared edge


def bbox_iou(
    box1: torch.Tensor,
    box2: torch.Tensor,
    xywh: bool = True,
    CIoU: bool = True,  # noqa: N803
    eps: float = 1e-7,
) -> torch.Tensor:
    """Element-wise IoU (or Complete IoU) of two (..., 4) box sets; returns (..., 1).

    Same formula as torchvision.ops.complete_box_iou_loss (1 - loss), except that eps is added to the heights,
    so zero-height boxes (e.g. an fp16 width/height prediction that underflowed) give a finite value.
    """
    if xywh:
        (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
        b1x1, b1x2, b1y1, b1y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
        b2x1, b2x2, b2y1, b2y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    else:
        b1x1, b1y1, b1x2, b1y2 = box1.chunk(4, -1)
        b2x1, b2y1, b2x2, b2y2 = box2.chunk(4, -1)
    w1, h1 = b1x2 - b1x1, b1y2 - b1y1 + eps
    w2, h2 = b2x2 - b2x1, b2y2 - b2y1 + eps

    inter = (torch.min(b1x2, b2x2) - torch.max(b1x1, b2x1)).clamp(0) * (
        torch.min(b1y2, b2y2) - torch.max(b1y1, b2y1)
    ).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    if not CIoU:
        return iou

    # Penalties: squared centre distance over the enclosing box's squared diagonal, and aspect-ratio mismatch.
    cw = torch.max(b1x2, b2x2) - torch.min(b1x1, b2x1)
    ch = torch.max(b1y2, b2y2) - torch.min(b1y1, b2y1)
    diag2 = cw**2 + ch**2 + eps
    rho2 = ((b2x1 + b2x2 - b1x1 - b1x2) ** 2 + (b2y1 + b2y2 - b1y1 - b1y2) ** 2) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():  # the trade-off weight is treated as a constant, as in the CIoU paper
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / diag2 + v * alpha)


def smooth_bce(eps: float = 0.0) -> tuple[float, float]:
    """Positive and negative class targets under label smoothing eps."""
    return 1.0 - 0.5 * eps, 0.5 * eps


class FocalLoss(nn.Module):
    """Focal loss wrapped around a BCEWithLogitsLoss: down-weights well-classified elements."""

    def __init__(self, bce: nn.BCEWithLogitsLoss, gamma: float = 1.5, alpha: float = 0.25):
        super().__init__()
        self.bce = bce
        self.gamma, self.alpha = gamma, alpha
        self.reduction = bce.reduction
        self.bce.reduction = "none"  # the focal factor is applied element-wise

    def forward(self, pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
        loss = self.bce(pred, true)
        prob = torch.sigmoid(pred)
        p_t = true * prob + (1 - true) * (1 - prob)
        alpha_factor = true * self.alpha + (1 - true) * (1 - self.alpha)
        loss = loss * alpha_factor * (1.0 - p_t) ** self.gamma
        if self.reduction == "mean":
            return loss.mean()
        if self.reduction == "sum":
            return loss.sum()
        return loss


class _CellsAndObjectness(torch.autograd.Function):
    """From one level's map (B, na, ny, nx, no): the rows of the matched cells and the objectness channel.

    Same values as pi[b, a, gj, gi] and pi[..., 4]. Autograd would give each its own zero-filled gradient of the
    whole map, in row-major layout, which then has to be added and copied back into the convolution's layout
    (NHWC on the CPU). This backward fills one gradient in the map's own layout, with the same sums."""

    @staticmethod
    def forward(ctx, pi: torch.Tensor, b: torch.Tensor, a: torch.Tensor, gj: torch.Tensor, gi: torch.Tensor):
        ctx.save_for_backward(b, a, gj, gi)
        ctx.layout = (pi.shape, pi.stride(), pi.dtype, pi.device)
        return pi[b, a, gj, gi], pi[..., 4]

    @staticmethod
    def backward(ctx, grad_cells: torch.Tensor | None, grad_obj: torch.Tensor | None):
        shape, stride, dtype, device = ctx.layout
        grad = torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()
        if grad_cells is not None:  # duplicate cells add up, in index order, as the index backward does
            grad.index_put_(ctx.saved_tensors, grad_cells, accumulate=True)
        if grad_obj is not None:
            grad[..., 4] += grad_obj
        return grad, None, None, None, None


class ComputeLoss:
    """YOLOv5 loss for a Model: call with (per-level raw maps, targets (n, 6)) -> (loss * batch, [box, obj, cls])."""

    LOSS_NAMES = ("box", "obj", "cls")  # the loss items' names: results.csv, the console, TensorBoard

    def __init__(self, model: nn.Module, hyp: dict):
        detect = de_parallel(model).model[-1]
        device = detect.anchors.device
        self.detect = detect  # anchors are read at call time, so autoanchor updates are seen
        self.hyp = hyp
        self.na, self.nl, self.nc = detect.na, detect.nl, detect.nc
        self.bce_cls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["cls_pw"]], device=device))
        self.bce_obj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([hyp["obj_pw"]], device=device))
        if hyp.get("fl_gamma", 0.0) > 0:
            self.bce_cls = FocalLoss(self.bce_cls, hyp["fl_gamma"])
            self.bce_obj = FocalLoss(self.bce_obj, hyp["fl_gamma"])
        self.cp, self.cn = smooth_bce(hyp.get("label_smoothing", 0.0))
        self.balance = BALANCE.get(self.nl, BALANCE_DEFAULT)
        self.gr = 1.0  # objectness target = gr * IoU + (1 - gr)

    def __call__(self, preds: list[torch.Tensor], targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        device = targets.device
        lbox = torch.zeros(1, device=device)
        lobj = torch.zeros(1, device=device)
        lcls = torch.zeros(1, device=device)
        tcls, tbox, indices, anchors = self.build_targets(preds, targets)

        for i, pi in enumerate(preds):
            b, a, gj, gi = indices[i]
            tobj = torch.zeros(pi.shape[:4], dtype=torch.float32, device=device)
            cells, pobj = _CellsAndObjectness.apply(pi, b, a, gj, gi)
            n = b.shape[0]
            if n:
                # Float32 here: under fp16 autocast the width/height terms can underflow.
                pxy, pwh, _, pcls = cells.float().split((2, 2, 1, self.nc), 1)
                pxy = pxy.sigmoid() * 2 - 0.5
                pwh = (pwh.sigmoid() * 2) ** 2 * anchors[i]
                iou = bbox_iou(torch.cat((pxy, pwh), 1), tbox[i], CIoU=True).squeeze(1)
                lbox = lbox + (1.0 - iou).mean()

                iou = iou.detach().clamp(0)
                tobj[b, a, gj, gi] = (1.0 - self.gr) + self.gr * iou

                if self.nc > 1:  # a single class needs no class loss: objectness says it all
                    t = torch.full_like(pcls, self.cn)
                    t[torch.arange(n, device=device), tcls[i]] = self.cp
                    lcls = lcls + self.bce_cls(pcls, t)

            lobj = lobj + self.bce_obj(pobj.float(), tobj) * self.balance[i]

        lbox = lbox * self.hyp["box"]
        lobj = lobj * self.hyp["obj"]
        lcls = lcls * self.hyp["cls"]
        batch_size = preds[0].shape[0]
        return (lbox + lobj + lcls) * batch_size, torch.cat((lbox, lobj, lcls)).detach()

    def build_targets(self, preds: list[torch.Tensor], targets: torch.Tensor):
        """Assign each target to anchors (by size ratio) and up to 3 cells per level.

        Returns per level: class ids, boxes (x, y offsets within the cell, w, h in grid units),
        (image, anchor, grid y, grid x) indices, and the matched anchors (grid units).
        """
        device = targets.device
        na, nt = self.na, targets.shape[0]
        tcls, tbox, indices, anch = [], [], [], []
        # One copy of every target per anchor, with the anchor index appended: (na, nt, 7).
        anchor_idx = torch.arange(na, device=device, dtype=torch.float32).view(na, 1).repeat(1, nt)
        targets = torch.cat((targets.float().repeat(na, 1, 1), anchor_idx[..., None]), 2)
        offsets_table = _NEIGHBOURS.to(device) * _BIAS
        gain = torch.ones(7, device=device)

        for i in range(self.nl):
            anchors = self.detect.anchors[i].float()
            ny, nx = preds[i].shape[2:4]
            gain[2:6] = torch.tensor([nx, ny, nx, ny], device=device, dtype=torch.float32)
            t = targets * gain  # boxes in grid units
            if nt:
                ratio = t[..., 4:6] / anchors[:, None]
                t = t[torch.max(ratio, 1 / ratio).max(2)[0] < self.hyp["anchor_t"]]

                # Neighbour cells nearest the centre, unless that would leave the grid.
                gxy = t[:, 2:4]
                gxy_inv = gain[[2, 3]] - gxy
                left, up = ((gxy % 1 < _BIAS) & (gxy > 1)).T
                right, down = ((gxy_inv % 1 < _BIAS) & (gxy_inv > 1)).T
                chosen = torch.stack((torch.ones_like(left), left, up, right, down))
                t = t.repeat((5, 1, 1))[chosen]
                offsets = (torch.zeros_like(gxy)[None] + offsets_table[:, None])[chosen]
            else:
                t = targets[0]
                offsets = torch.zeros_like(t[:, 2:4])

            b, c = t[:, :2].long().T
            gxy, gwh, a = t[:, 2:4], t[:, 4:6], t[:, 6].long()
            gij = (gxy - offsets).long()
            gi = gij[:, 0].clamp(0, nx - 1)
            gj = gij[:, 1].clamp(0, ny - 1)
            indices.append((b, a, gj, gi))
            tbox.append(torch.cat((gxy - torch.stack((gi, gj), 1), gwh), 1))
            anch.append(anchors[a])
            tcls.append(c)
        return tcls, tbox, indices, anch
