"""Appearance for re-identification (with_reid): what a tracker asks of the detector each frame, a track's smoothed
embedding, and the cosine distance between tracks and detections.

With `model: auto` the embedding of a detection is the detector's own feature at the detection's cell (the
Predictor's concern, models/nn/features.py): no second network runs. A track keeps the last embedding it matched
(normalized) and an exponential moving average of them (renormalized), which is what it is compared by.
"""

from dataclasses import dataclass

import numpy as np

LOOSE_NMS_IOU = 0.95  # TrackTrack's recovered boxes: those a second NMS at this IoU keeps ...
RECOVERED_MAX_IOU = 0.97  # ... that overlap no kept detection by this much or more


@dataclass(frozen=True)
class TrackerNeeds:
    """What a tracker needs of each frame besides the detections: recovered boxes (a second, looser NMS) and an
    embedding per detection from the detector's features."""

    loose_nms_iou: float | None = None
    embeddings: bool = False


def smooth_embedding(feature: np.ndarray, smooth: np.ndarray | None, keep: float) -> tuple:
    """(the feature normalized, the new smoothed one): keep * smooth + (1 - keep) * feature, renormalized; a
    feature of zero norm says nothing: (None, smooth)."""
    feature = np.asarray(feature, np.float32)
    norm = np.linalg.norm(feature)
    if norm < 1e-12:
        return None, smooth
    feature = feature / norm
    if smooth is None:
        return feature, feature.copy()
    smooth = keep * smooth + (1 - keep) * feature
    return feature, smooth / np.linalg.norm(smooth)


def cosine_distance(tracks: list, detections: list, upper: float = 1.0) -> np.ndarray:
    """(n, m) float32 1 - cosine similarity, clipped to [0, upper], between lists of normalized embeddings (a track's
    smoothed one, a detection's current one); NaN where either side has none."""
    if not tracks or not detections:
        return np.full((len(tracks), len(detections)), np.nan, np.float32)
    dim = next((len(f) for f in (*tracks, *detections) if f is not None), 1)
    zeros = np.zeros(dim, np.float32)
    a = np.array([zeros if f is None else f for f in tracks], np.float32)
    b = np.array([zeros if f is None else f for f in detections], np.float32)
    have = np.array([f is not None for f in tracks])[:, None] & np.array([f is not None for f in detections])[None]
    return np.where(have, np.clip(1 - a @ b.T, 0, upper), np.nan).astype(np.float32)


def detection_embeddings(features: np.ndarray | None, rows: np.ndarray) -> list:
    """The embedding (normalized) of each detection row (x1, y1, x2, y2, score, cls, index in the frame's input;
    index -1: none) from the frame's (n, C) features, or Nones without features."""
    if features is None:
        return [None] * len(rows)
    out = []
    for index in rows[:, 6].astype(np.int64):
        out.append(None if index < 0 else smooth_embedding(features[index], None, 0.0)[0])
    return out


def frame_features(features, n_detections: int) -> np.ndarray | None:
    """A frame's embeddings as (n, C) float32, one row per detection, or None (none given, or no detections)."""
    if features is None or not n_detections:
        return None
    features = np.asarray(features, np.float32)
    if features.ndim != 2 or len(features) != n_detections:
        raise ValueError(f"{n_detections} detections but features of shape {features.shape}")
    return features
