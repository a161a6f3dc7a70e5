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


def detection_embeddings(embeddings: list | None, rows: np.ndarray) -> list:
    """The embedding of each detection row (x1, y1, x2, y2, score, cls, index in the frame's input; index -1: none)
    from the frame's (frame_embeddings), or Nones without them."""
    if embeddings is None:
        return [None] * len(rows)
    return [None if i < 0 else embeddings[i] for i in rows[:, 6].astype(np.int64).tolist()]


def frame_embeddings(features, n_detections: int) -> list | None:
    """A frame's (n, C) features as one normalized float32 embedding per detection (None for a zero one), or None
    (none given, or no detections)."""
    if features is None or not n_detections:
        return None
    features = np.asarray(features, np.float32)
    if features.ndim != 2 or len(features) != n_detections:
        raise ValueError(f"{n_detections} detections but features of shape {features.shape}")
    norms = np.linalg.norm(features, axis=1)
    unit = features / np.where(norms < 1e-12, 1, norms)[:, None]
    return [None if n < 1e-12 else u for n, u in zip(norms, unit)]


def blend_embeddings(tracks: list, embeddings: list, keep) -> None:
    """Each track takes its matched detection's embedding (normalized; None: the track keeps its own) into its
    smoothed one: keep * smoothed + (1 - keep) * embedding, renormalized; keep a number or one per track."""
    keep = np.broadcast_to(np.asarray(keep, np.float32), (len(tracks),))
    chosen = [k for k, e in enumerate(embeddings) if e is not None]
    if not chosen:
        return
    new = np.array([embeddings[k] for k in chosen])
    old = np.array([new[i] if tracks[k].smoothed is None else tracks[k].smoothed for i, k in enumerate(chosen)])
    mixed = keep[chosen, None] * old + (1 - keep[chosen, None]) * new
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
    for k, e, m in zip(chosen, new, mixed):
        tracks[k].embedding, tracks[k].smoothed = e, m
