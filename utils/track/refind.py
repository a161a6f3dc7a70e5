"""A lost track found again by where it should be rather than by overlap: after an object has been hidden for tens
of frames (behind another, or a pillar) its predicted box and the box it reappears with often overlap too little for
an IoU cost, and a new identity would start beside the lost one. Used by TrackTrack's `refind_thr`."""

import numpy as np

SIZE_RATIO = 2.0  # a detection more than this many times larger or smaller (by area) than the track is not it


def centre_gap_cost(track_boxes: np.ndarray, det_boxes: np.ndarray, reach: float) -> np.ndarray:
    """(n, m) distance between each track's and each detection's box centre, over reach times the mean of the
    track's width and height (below 1: within reach); inf where the sizes differ by more than SIZE_RATIO."""
    track_centre = (track_boxes[:, :2] + track_boxes[:, 2:4]) / 2
    det_centre = (det_boxes[:, :2] + det_boxes[:, 2:4]) / 2
    track_wh = np.maximum(track_boxes[:, 2:4] - track_boxes[:, :2], 1e-6)
    det_wh = np.maximum(det_boxes[:, 2:4] - det_boxes[:, :2], 1e-6)
    gap = np.linalg.norm(track_centre[:, None] - det_centre[None], axis=-1)
    cost = gap / (reach * track_wh.mean(axis=1, keepdims=True))
    area_ratio = det_wh.prod(axis=1)[None] / track_wh.prod(axis=1)[:, None]
    cost[(area_ratio > SIZE_RATIO) | (area_ratio < 1 / SIZE_RATIO)] = np.inf
    return cost
