"""The mask term of the segment losses, and YOLOv5's segment loss (the anchor-based family's, "yolov5-segment").

Every object a prediction is matched to gets a mask: sigmoid(coefficients @ prototypes) at the prototypes' resolution
(1/4 of the input). Its loss is the per-pixel BCE against the object's ground-truth mask, kept only inside the
object's ground-truth box, averaged over the whole map and divided by the box's area (a fraction of the image): so
the mean BCE inside the box, whatever the object's size. That is how YOLOv5 v7.0 and Ultralytics compute it; the two
differ only in how the per-object values are averaged (see each loss) and in the gain, the box gain for both.

The loader's masks (N, H/4, W/4) hold one binary mask per target row, in the targets' order (the data contract of
utils.data). The losses are called as (outputs, targets, masks) -> (loss x batch size, loss items), the outputs the
model's in training or in eval (validation's); without masks or prototypes (plain detection maps) they score the
detection terms and report the mask terms as zero.
"""

import torch
from torch.nn import functional as F  # noqa: N812

from utils.train.loss import ComputeLoss


def crop_to_boxes(values: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """values (n, h, w) with everything outside each row's box (n, 4) xyxy, in pixels of the map, set to zero: a pixel
    (column c, row r) is inside when x1 <= c < x2 and y1 <= r < y2."""
    h, w = values.shape[1:]
    x1, y1, x2, y2 = boxes[:, :, None].unbind(1)  # each (n, 1)
    columns = torch.arange(w, device=values.device, dtype=boxes.dtype)[None]
    rows = torch.arange(h, device=values.device, dtype=boxes.dtype)[None]
    inside_x = (columns >= x1) & (columns < x2)  # (n, w)
    inside_y = (rows >= y1) & (rows < y2)  # (n, h)
    return values * (inside_y[:, :, None] & inside_x[:, None, :])


def box_windows(boxes: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A window of the map around each box (n, 4) xyxy in map pixels, all of one size, the largest box's (cells
    whose index is inside, as crop_to_boxes counts them): (n, rows x columns) flat indices into the (h, w) map and
    whether each is inside its box. A window starts at its box's first inside cell, moved back where it would pass
    the map's edge."""
    size = torch.tensor([w, h], device=boxes.device, dtype=boxes.dtype)
    first = boxes[:, :2].ceil().clamp(min=0)  # first inside column, row
    extent = (torch.minimum(boxes[:, 2:].ceil(), size) - first).clamp(min=0)
    columns, rows = (max(int(extent[:, k].max()), 1) if len(boxes) else 1 for k in (0, 1))
    start = torch.minimum(first, size - torch.tensor([columns, rows], device=boxes.device)).long()
    x = start[:, 0, None] + torch.arange(columns, device=boxes.device)  # (n, columns)
    y = start[:, 1, None] + torch.arange(rows, device=boxes.device)  # (n, rows)
    inside_x = (x >= boxes[:, 0, None]) & (x < boxes[:, 2, None])
    inside_y = (y >= boxes[:, 1, None]) & (y < boxes[:, 3, None])
    index = (y[:, :, None] * w + x[:, None, :]).flatten(1)
    return index, (inside_y[:, :, None] & inside_x[:, None, :]).flatten(1)


def object_mask_losses(
    coefficients: torch.Tensor, protos: torch.Tensor, images: torch.Tensor, boxes: torch.Tensor, gt: torch.Tensor
) -> torch.Tensor:
    """The mask loss of each matched prediction (n,): coefficients (n, nm) of predictions in images (n,) of protos
    (B, nm, h, w); boxes (n, 4) their objects' xyxy as fractions of the image; gt (n, h, w) their objects' masks.
    One image at a time, so at most one image's objects' full maps are held at once. The BCE is taken only in a
    window around each box (box_windows): the pixels outside a box count zero, and on the shapes set at 256 the
    whole maps' BCE had been a tenth of a training step."""
    h, w = protos.shape[2:]
    scale = torch.tensor([w, h, w, h], device=boxes.device, dtype=torch.float32)
    mask_boxes = boxes.float() * scale
    areas = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).float().clamp(min=1e-9)
    losses = torch.zeros(len(images), device=protos.device, dtype=torch.float32)
    for image in images.unique().tolist():
        rows = (images == image).nonzero().squeeze(1)
        logits = coefficients[rows].float() @ protos[image].float().flatten(1)  # (k, h * w)
        index, inside = box_windows(mask_boxes[rows], h, w)
        targets = gt[rows].flatten(1).gather(1, index).float()  # only the windows converted
        bce = F.binary_cross_entropy_with_logits(logits.gather(1, index), targets, reduction="none")
        losses = losses.index_put((rows,), (bce * inside).sum(1) / (h * w) / areas[rows])
    return losses


def resized_masks(masks: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The ground-truth masks (N, h, w) as floats at the prototypes' size (nearest), as YOLOv5 does when they differ
    (--multi-scale resizes the images, not the loader's masks)."""
    masks = masks.float()
    if tuple(masks.shape[1:]) != tuple(size) and len(masks):
        masks = F.interpolate(masks[None], size, mode="nearest")[0]
    return masks


def unused(*tensors: torch.Tensor) -> torch.Tensor:
    """Zero that depends on every tensor: a batch with no matched object still gives the prototype and coefficient
    layers a (zero) gradient, which DistributedDataParallel needs from every parameter."""
    return sum((t.float() * 0).sum() for t in tensors)


def segment_inputs(preds) -> tuple:
    """(detection maps, prototypes, coefficients) of a segment head's output: its training dict (coefficients: the
    anchor-free heads' per-level maps; None for YOLOv5's, channels of its maps), its eval output (a MaskOutputs, the
    validation's: coefficients (B, N, nm)), or plain detection maps (prototypes and coefficients None)."""
    if isinstance(preds, dict):
        return preds["detect"], preds["protos"], preds.get("coefficients")
    if isinstance(preds, tuple):  # (predictions, maps), carrying the coefficients and prototypes
        return preds[1], preds.protos, preds.coefficients
    return preds, None, None


class AnchorSegmentLoss(ComputeLoss):
    """YOLOv5's segment loss: ComputeLoss's box, objectness and class terms on each map's first 5 + nc channels, and
    the mask term on the same matches (every anchor and cell a target is matched to), from the nm coefficient
    channels after the classes. Per level and image, the mean over its matches; summed over levels and images,
    times the (scaled) box gain over the batch size. Items (box, seg, obj, cls), as YOLOv5 logs them."""

    LOSS_NAMES = ("box", "seg", "obj", "cls")

    def __call__(self, preds, targets: torch.Tensor, masks: torch.Tensor | None = None):
        maps, protos, _ = segment_inputs(preds)
        width = 5 + self.nc
        loss, items = super().__call__([m[..., :width] for m in maps], targets)
        if protos is None or masks is None:
            return loss, torch.cat((items[:1], items.new_zeros(1), items[1:]))
        bs = maps[0].shape[0]
        lseg = self.mask_term(maps, protos, targets, masks) * (self.hyp["box"] / bs)
        return loss + lseg * bs, torch.cat((items[:1], lseg.detach().reshape(1), items[1:]))

    def mask_term(self, maps: list, protos: torch.Tensor, targets: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """Sum over levels and images of the mean mask loss of their matches."""
        bs, nl = maps[0].shape[0], len(maps)
        # The class column carries each target's row through the matching: the row picks its mask and its box.
        numbered = targets.clone()
        numbered[:, 1] = torch.arange(len(targets), device=targets.device, dtype=targets.dtype)
        matched_rows, _, indices, _ = self.build_targets(maps, numbered)
        coefficients = torch.cat([m[b, a, gj, gi, 5 + self.nc :] for m, (b, a, gj, gi) in zip(maps, indices)])
        if not len(coefficients):
            return unused(protos, *maps)
        images = torch.cat([index[0] for index in indices])
        groups = torch.cat([index[0] + level * bs for level, index in enumerate(indices)])  # (level, image)
        rows = torch.cat(matched_rows)
        xywh = targets[rows, 2:6].float()
        boxes = torch.cat((xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2), 1)
        gt = resized_masks(masks, protos.shape[2:])[rows]
        losses = object_mask_losses(coefficients, protos, images, boxes, gt)
        sums = losses.new_zeros(nl * bs).index_add(0, groups, losses)
        counts = torch.bincount(groups, minlength=nl * bs)
        return (sums[counts > 0] / counts[counts > 0]).sum()
