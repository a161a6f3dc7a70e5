"""A lost track found again by where it should be rather than by overlap: after an object has been hidden for tens
of frames (behind another, or a pillar) its predicted box and the box it reappears with often overlap too little for
an IoU cost, and a new identity would start beside the lost one. Used by TrackTrack's `refind_thr`."""

import numpy as np

SIZE_RATIO = 2.0  # a detection more than this many times larger or smaller (by area) than the track is not it
GROWTH_FRAMES = 5  # lost longer than this, a track's reach grows with the root of its frames unseen over it


def centre_gap_cost(
    track_boxes: np.ndarray, det_boxes: np.ndarray, reach: float, frames_lost: np.ndarray | None = None
) -> np.ndarray:
    """(n, m) distance between each track's and each detection's box centre, over reach times the mean of the
    track's width and height (below 1: within reach); inf where the sizes differ by more than SIZE_RATIO. With
    frames_lost (n,), the reach of a track unseen for longer than GROWTH_FRAMES grows as the root of its frames
    unseen over GROWTH_FRAMES (a predicted position drifts further the longer nothing corrects it; tuned on
    generated sequences, docs/tracking.md)."""
    track_centre = (track_boxes[:, :2] + track_boxes[:, 2:4]) / 2
    det_centre = (det_boxes[:, :2] + det_boxes[:, 2:4]) / 2
    track_wh = np.maximum(track_boxes[:, 2:4] - track_boxes[:, :2], 1e-6)
    det_wh = np.maximum(det_boxes[:, 2:4] - det_boxes[:, :2], 1e-6)
    gap = np.linalg.norm(track_centre[:, None] - det_centre[None], axis=-1)
    cost = gap / (reach * track_wh.mean(axis=1, keepdims=True))
    if frames_lost is not None:
        cost /= np.maximum(1.0, np.sqrt(np.asarray(frames_lost, np.float64) / GROWTH_FRAMES))[:, None]
    area_ratio = det_wh.prod(axis=1)[None] / track_wh.prod(axis=1)[:, None]
    cost[(area_ratio > SIZE_RATIO) | (area_ratio < 1 / SIZE_RATIO)] = np.inf
    return cost
