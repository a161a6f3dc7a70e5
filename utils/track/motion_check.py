"""A check of the camera-motion estimate against the frame's detections (TrackTrack's `gmc_check`, ours).

The estimate (utils/track/gmc.py) follows corners from one frame to the next and takes their common motion for the
camera's. Where the background gives it few corners (a plain wall, sky, a flat floor) the corners it follows are on
the objects themselves, and their motion is then taken for the camera's: every track, lost ones too, is moved by
it each frame, and a lost track drifts further from where its object is with every frame it stays hidden. The check
keeps the estimate only when it brings the tracked tracks' predicted boxes nearer this frame's confident detections
than no camera motion would (by MARGIN IoU a track); otherwise the frame is taken as one with no camera motion.
"""

import numpy as np

from utils.track import kalman
from utils.track.matching import box_iou
from utils.track.tracks import state_to_xyxy

MARGIN = 0.02  # the mean IoU per track the estimate must gain over no motion (tuned on generated sequences)


def _predicted_boxes(mean: np.ndarray) -> np.ndarray:
    """(n, 4) x1, y1, x2, y2 one frame ahead of (n, 8) (cx, cy, w, h) states (the Kalman prediction's mean)."""
    return state_to_xyxy(mean @ kalman.MOTION.T, False)


def _best_overlaps(boxes: np.ndarray, dets: np.ndarray) -> float:
    """The sum over boxes of each one's largest IoU with any detection."""
    return float(box_iou(boxes, dets).max(axis=1).sum())


def checked_affine(affine: np.ndarray, mean: np.ndarray, dets: np.ndarray) -> np.ndarray:
    """affine (2x3, previous frame to this one) unless moving the (n, 8) states of the tracked tracks by it leaves
    their predicted boxes further from the (m, >=4) x1, y1, x2, y2 confident detections than no motion does (the
    sum over tracks of their best IoU gains less than MARGIN per track); then the identity. Without tracks or
    detections there is no evidence against it."""
    if not len(mean) or not len(dets):
        return affine
    warped = kalman.warp_mean(mean, affine)
    dets = np.asarray(dets, np.float64)[:, :4]
    gain = _best_overlaps(_predicted_boxes(warped), dets) - _best_overlaps(_predicted_boxes(mean), dets)
    if gain >= MARGIN * len(mean):
        return affine
    return np.eye(2, 3)
