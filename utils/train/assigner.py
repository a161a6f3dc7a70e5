"""The task-aligned assigner of the anchor-free models (TOOD; the assignment YOLOv8, YOLO11 and YOLO26 train with).

Each ground-truth box picks, among the anchor points (cell centres) that lie inside it, the top k by the alignment
metric score**alpha x CIoU**beta, where score is the predicted probability of the box's class and CIoU the overlap
of the predicted box with it. A point picked by several boxes keeps the one it overlaps most. The class targets of
a positive point are its box's one-hot class times the normalised alignment (the best point of each box gets that
box's best IoU), so classification learns localisation quality.
"""

from typing import NamedTuple

import torch

from utils.train.loss import bbox_iou


class Assignment(NamedTuple):
    """Per image and anchor point: assigned class, box (xyxy, as given), soft class targets, whether positive,
    and the index of the assigned ground-truth box (0 for negatives)."""

    labels: torch.Tensor  # (B, N) long
    boxes: torch.Tensor  # (B, N, 4)
    scores: torch.Tensor  # (B, N, nc)
    foreground: torch.Tensor  # (B, N) bool
    gt_index: torch.Tensor  # (B, N) long


class TaskAlignedAssigner:
    """Assign ground-truth boxes to anchor points by the task-aligned metric.

    topk: candidates per box; alpha, beta: exponents of the class score and of the CIoU in the metric;
    min_side: ground-truth sides shorter than this (pixels) count as this long when choosing the points inside a
    box (Ultralytics 8.4 uses the middle stride), so tiny boxes still get candidates; final_topk: after conflicts are
    resolved, keep at most this many points per box (YOLO26's one-to-one branch: 1). Everything is without
    gradients."""

    def __init__(
        self,
        nc: int,
        topk: int = 10,
        alpha: float = 0.5,
        beta: float = 6.0,
        min_side: float = 0.0,
        final_topk: int | None = None,
        eps: float = 1e-9,
    ):
        self.nc, self.topk, self.alpha, self.beta = nc, topk, alpha, beta
        self.min_side, self.final_topk, self.eps = min_side, final_topk or topk, eps

    @torch.no_grad()
    def __call__(
        self,
        scores: torch.Tensor,
        boxes: torch.Tensor,
        points: torch.Tensor,
        gt_labels: torch.Tensor,
        gt_boxes: torch.Tensor,
        gt_mask: torch.Tensor,
    ) -> Assignment:
        """scores (B, N, nc) probabilities, boxes (B, N, 4) predicted xyxy, points (N, 2) anchor points, in the same
        units as gt_boxes (B, M, 4) xyxy; gt_labels (B, M, 1); gt_mask (B, M, 1) true for real (not padding) boxes."""
        if gt_boxes.shape[1] == 0:
            return self._no_targets(scores, boxes)
        gt_mask = gt_mask.bool()
        inside = self._points_inside(points, gt_boxes) & gt_mask  # (B, M, N)
        metric, overlaps = self._alignment(scores, boxes, gt_labels, gt_boxes, inside)
        positive = self._top_candidates(metric, gt_mask) & inside
        positive = self._one_box_per_point(positive, overlaps)
        if self.final_topk != self.topk:
            positive = positive & self._top_mask(metric * positive, self.final_topk)
        foreground, gt_index = positive.to(torch.uint8).max(1)  # (B, N): the one box of a positive point
        labels, target_boxes, one_hot = self._targets(gt_labels, gt_boxes, gt_index, foreground.bool())
        # Soft targets: each box's alignments scaled so its best point gets the box's best IoU.
        metric = metric * positive
        best_metric = metric.amax(2, keepdim=True)
        best_overlap = (overlaps * positive).amax(2, keepdim=True)
        quality = (metric * best_overlap / (best_metric + self.eps)).amax(1)  # (B, N)
        return Assignment(labels, target_boxes, one_hot * quality[..., None], foreground.bool(), gt_index)

    def _no_targets(self, scores: torch.Tensor, boxes: torch.Tensor) -> Assignment:
        """Every point negative (a batch without any box)."""
        b, n = scores.shape[:2]
        labels = torch.full((b, n), self.nc, dtype=torch.long, device=scores.device)
        zeros = torch.zeros((b, n), dtype=torch.long, device=scores.device)
        return Assignment(labels, torch.zeros_like(boxes), torch.zeros_like(scores), zeros.bool(), zeros)

    def _points_inside(self, points: torch.Tensor, gt_boxes: torch.Tensor) -> torch.Tensor:
        """(B, M, N): anchor point strictly inside the box, its sides floored at min_side about its centre."""
        centre = (gt_boxes[..., :2] + gt_boxes[..., 2:]) / 2
        half = (gt_boxes[..., 2:] - gt_boxes[..., :2]).clamp(min=self.min_side) / 2
        top_left, bottom_right = (centre - half)[:, :, None], (centre + half)[:, :, None]  # (B, M, 1, 2)
        margins = torch.cat((points - top_left, bottom_right - points), 3)  # (B, M, N, 4)
        return margins.amin(3) > self.eps

    def _alignment(self, scores, boxes, gt_labels, gt_boxes, inside) -> tuple[torch.Tensor, torch.Tensor]:
        """(alignment metric, CIoU) per box and point (B, M, N), computed only for points inside the box."""
        b, m = gt_boxes.shape[:2]
        shape = (b, m, boxes.shape[1])
        image, box, point = inside.nonzero(as_tuple=True)
        class_scores = scores[image, point, gt_labels[image, box, 0].long()]
        ciou = bbox_iou(gt_boxes[image, box], boxes[image, point], xywh=False, CIoU=True).squeeze(-1).clamp(0)
        overlaps = torch.zeros(shape, dtype=boxes.dtype, device=boxes.device)
        metric = torch.zeros(shape, dtype=scores.dtype, device=scores.device)
        overlaps[image, box, point] = ciou.to(boxes.dtype)
        metric[image, box, point] = (class_scores.pow(self.alpha) * ciou.pow(self.beta)).to(scores.dtype)
        return metric, overlaps

    def _top_candidates(self, metric: torch.Tensor, gt_mask: torch.Tensor) -> torch.Tensor:
        """(B, M, N): the topk points of each real box by metric (ties as torch.topk breaks them)."""
        return self._top_mask(metric, self.topk) & gt_mask

    @staticmethod
    def _top_mask(values: torch.Tensor, k: int) -> torch.Tensor:
        """(B, M, N) true at the k largest values of each row."""
        index = values.topk(min(k, values.shape[2]), dim=2).indices
        return torch.zeros_like(values, dtype=torch.bool).scatter_(2, index, True)

    @staticmethod
    def _one_box_per_point(positive: torch.Tensor, overlaps: torch.Tensor) -> torch.Tensor:
        """A point that several boxes chose keeps only the box it overlaps most (by CIoU over all boxes)."""
        shared = positive.sum(1, keepdim=True) > 1  # (B, 1, N)
        best = torch.zeros_like(positive).scatter_(1, overlaps.argmax(1, keepdim=True), True)
        return torch.where(shared, best, positive)

    def _targets(self, gt_labels, gt_boxes, gt_index, foreground):
        """Assigned class (B, N), box (B, N, 4) and one-hot class (B, N, nc, zero for negatives) of each point."""
        labels = gt_labels[..., 0].long().gather(1, gt_index).clamp(0)
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(-1, -1, gt_boxes.shape[2]))
        one_hot = torch.zeros((*labels.shape, self.nc), dtype=torch.float32, device=labels.device)
        one_hot.scatter_(2, labels[..., None], 1.0)
        return labels, boxes, one_hot * foreground[..., None]
