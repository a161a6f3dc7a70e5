"""What the Predictor computes for a tracker besides the detections, as the tracker asks (its TrackerNeeds,
utils/track/appearance.py): TrackTrack's recovered boxes (a second NMS at a looser IoU, keeping the boxes the
first one dropped) and, with with_reid, an embedding per detection from the detector's own feature maps.

The embeddings come from a model that offers a tap on its head's inputs (models/nn: Model.tap_head_inputs); each
kept detection is traced back to its prediction row by a row-index column carried through NMS. A model that offers
no tap (an export, an ensemble, test-time augmentation) or whose head needs no NMS (an end-to-end head) gives none:
one warning, and the tracker matches without appearance.

A segment model's masks follow the tracked boxes: each tracked box takes the mask of the detection the tracker
matched it to (tracked_masks), for detect.py --track and the Detector's track().
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from utils.boxes import non_max_suppression
from utils.infer.masks import InstanceMasks
from utils.log import LOGGER
from utils.track.appearance import RECOVERED_MAX_IOU, TrackerNeeds
from utils.track.session import TrackingSession
from utils.track.stream import track


@dataclass
class FrameExtras:
    """One frame's inputs for the tracker besides its detections."""

    recovered: np.ndarray | None = None  # (k, 6) x1, y1, x2, y2, conf, cls: kept only by the looser NMS
    features: np.ndarray | None = None  # (n, C) float32, one per detection row


class TrackerFeed:
    """Set on a Predictor (Predictor.serve) for one tracker's needs: runs the forward (inside the head tap when
    embeddings are wanted), marks the predictions' rows, and splits each frame's NMS output into the detections
    and their FrameExtras."""

    def __init__(self, model, needs: TrackerNeeds, end2end: bool):
        self.loose_iou = None if end2end else needs.loose_nms_iou
        self.tapping = needs.embeddings and hasattr(model, "tap_head_inputs") and not end2end
        if needs.embeddings and not self.tapping:
            what = "an end-to-end head keeps no NMS rows" if end2end else "this model offers no feature maps"
            LOGGER.warning(f"WARNING: with_reid: {what} (an export, ensemble or TTA); tracking without appearance")
        self.tap = None
        self.pred: torch.Tensor | None = None

    @property
    def row_columns(self) -> int:
        """Columns this feed appends to each prediction (carried through NMS): the row index, when tapping."""
        return int(self.tapping)

    def forward(self, model, x: torch.Tensor):
        if not self.tapping:
            return model(x)
        with model.tap_head_inputs() as tap:
            out = model(x)
        self.tap = tap
        return out

    def mark_rows(self, pred: torch.Tensor) -> torch.Tensor:
        """pred (B, N, no) with each row's index appended as a last column, when embeddings are wanted."""
        if self.tapping:
            index = torch.arange(pred.shape[1], device=pred.device, dtype=pred.dtype)
            pred = torch.cat((pred, index.view(1, -1, 1).expand(pred.shape[0], -1, 1)), 2)
        self.pred = pred  # the recovered boxes' second NMS runs on it
        return pred

    def split(self, det: torch.Tensor, predictor, input_hw, original_shape) -> tuple:
        """(det without the row column, FrameExtras) for the image of the last forward: det (n, 6 + carried
        columns, the row column last) from NMS, its boxes already in original pixels."""
        pred, extra, features = self.pred, det.shape[1] - 6, None
        if self.tapping:
            features = self.tap.rows(det[:, -1]).cpu().numpy()
            det = det[:, :-1]
        recovered = None
        if self.loose_iou is not None and len(det):
            recovered = self._recovered(det[:, :4], pred, extra, predictor, (input_hw, original_shape))
        return det, FrameExtras(recovered, features)

    def _recovered(self, kept: torch.Tensor, pred: torch.Tensor, extra: int, predictor, shapes) -> np.ndarray:
        """The boxes a second NMS at the looser IoU keeps that overlap no kept detection by RECOVERED_MAX_IOU."""
        o = predictor.options
        loose = non_max_suppression(
            pred, o.conf_thres, self.loose_iou, predictor.classes, o.agnostic, max_det=o.max_det, extra=extra
        )[0][:, :6]
        loose[:, :4] = predictor.to_original(loose[:, :4], *shapes)
        if not len(loose):
            return np.zeros((0, 6), np.float32)
        from torchvision.ops import box_iou  # here: importing torchvision costs every command seconds at start-up

        apart = box_iou(loose[:, :4], kept).max(1).values < RECOVERED_MAX_IOU
        return loose[apart].cpu().numpy()


def tracked_masks(masks: InstanceMasks, detections: np.ndarray) -> InstanceMasks:
    """The masks of a frame's tracked boxes: row i takes the mask of detection detections[i] (the row the tracker
    matched it to), an empty one where there is none (-1: a box TrackTrack recovered from its looser NMS, whose mask
    was not computed). The crops are shared, not copied."""
    empty = np.zeros((0, 0), dtype=bool)
    origins = [masks.origins[d] if d >= 0 else (0, 0) for d in detections.tolist()]
    crops = [masks.crops[d] if d >= 0 else empty for d in detections.tolist()]
    return InstanceMasks(masks.shape, origins, crops)


def track_with_masks(predictions: Iterator, session: TrackingSession, source_text: str) -> Iterator[tuple]:
    """utils.track.stream.track (each prediction's boxes become its frame's tracked boxes, with identities), each
    tracked box keeping its detection's mask when the model segments."""
    for prediction, tracked in track(predictions, session, source_text):
        result = prediction.result
        if result.masks is not None:
            result.masks = tracked_masks(result.masks, tracked.detections)
        yield prediction, tracked
