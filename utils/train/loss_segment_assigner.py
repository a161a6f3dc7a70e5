"""YOLO26's segment assignment: the task-aligned assigner whose overlap of a box and a point is the mean of the box
CIoU and of the IoU of the point's predicted mask with the object's mask, so positives, the resolution of shared
points and the soft class targets all favour points whose masks are good (Ultralytics 8.4's segment assigner for
YOLO26). The mask IoU is computed for each object's 3 x topk best pairs by the box metric only (0 for the others),
each predicted mask binarised (logit > 0) and cropped to its predicted box, as validation sees it.

The loss hands it the batch's masks before each call (with_masks); without them it assigns as the box assigner."""

import torch

from utils.train.assigner import TaskAlignedAssigner
from utils.train.loss_segment import crop_to_boxes

MASK_PIXELS_PER_CHUNK = 1 << 24  # predicted-mask pixels decoded at once (bounds the memory of a crowded image)


class MaskAwareAssigner(TaskAlignedAssigner):
    """TaskAlignedAssigner with (CIoU + mask IoU) / 2 as the overlap. Set with_masks(...) before each call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.masks = None  # (coefficients (B, N, nm), protos (B, nm, h, w), gt masks (B, M, h, w) bool, scale)

    def __call__(self, *args):
        try:
            return super().__call__(*args)
        finally:
            self.masks = None  # one call's: a later call without with_masks (validation's) assigns by boxes

    def with_masks(self, coefficients, protos, gt_masks, scale: float) -> None:
        """This call's predicted coefficients and prototypes (detached), the objects' masks in the assigner's padded
        layout at the prototypes' size, and the prototypes' pixels per input pixel."""
        self.masks = coefficients.detach().float(), protos.detach().float(), gt_masks.bool(), scale

    def _alignment(self, scores, boxes, gt_labels, gt_boxes, inside):
        metric, overlaps = super()._alignment(scores, boxes, gt_labels, gt_boxes, inside)
        if self.masks is None:
            return metric, overlaps
        image, box, point = inside.nonzero(as_tuple=True)
        ranked = torch.zeros_like(metric)
        ranked[image, box, point] = metric[image, box, point] + self.eps  # zero-metric pairs stay selectable
        top = ranked.topk(min(3 * self.topk, ranked.shape[2]), dim=2).indices
        chosen = torch.zeros_like(inside).scatter_(2, top, True) & inside
        mask_iou = torch.zeros_like(overlaps)
        mask_iou[chosen] = self._mask_ious(*chosen.nonzero(as_tuple=True), boxes).to(overlaps.dtype)
        overlaps = (overlaps + mask_iou) / 2 * inside
        class_scores = scores[image, point, gt_labels[image, box, 0].long()]
        metric = torch.zeros_like(metric)
        metric[image, box, point] = class_scores.pow(self.alpha) * overlaps[image, box, point].pow(self.beta)
        return metric, overlaps

    def _mask_ious(self, image, box, point, boxes) -> torch.Tensor:
        """IoU of each (image, object, point) pair's binarised, box-cropped predicted mask with the object's mask."""
        coefficients, protos, gt_masks, scale = self.masks
        h, w = protos.shape[2:]
        ious = torch.zeros(len(image), device=protos.device)
        step = max(MASK_PIXELS_PER_CHUNK // (h * w), 1)
        for one in image.unique().tolist():
            pairs = (image == one).nonzero().squeeze(1)
            for chunk in pairs.split(step):
                g, p = box[chunk], point[chunk]
                logits = (coefficients[one, p] @ protos[one].flatten(1)).view(-1, h, w)
                predicted = crop_to_boxes((logits > 0).float(), boxes[one, p].float() * scale) > 0
                truth = gt_masks[one, g]
                inter = (predicted & truth).flatten(1).sum(1).float()
                union = predicted.flatten(1).sum(1) + truth.flatten(1).sum(1) - inter
                ious[chunk] = inter / union.clamp(min=1)
        return ious
