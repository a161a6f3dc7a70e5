"""Tracking over a run's frames: one tracker state per video, stream or image sequence.

detect.py and the Detector hand every frame here with the sequence it belongs to; a frame of another sequence than
the previous one starts a fresh tracker (identities from 1 again), so two videos never share tracks.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.track.appearance import TrackerNeeds
from utils.track.bot_sort import create_tracker, tracker_class
from utils.track.config import DEFAULT_TRACKER, TrackerConfig, load_tracker_config


@dataclass
class Tracked:
    """Tracking's part of one image or frame: an identity per row of its boxes, and where it sits in its sequence."""

    ids: np.ndarray  # (n,) track id of each row of the frame's (tracked) boxes
    sequence: str  # the video, stream or image folder the frame belongs to: one MOTChallenge file each
    frame: int  # 1-based index of the frame in that sequence
    # (n,) the row of the frame's detections each tracked box was matched to (-1: none of them, e.g. a box that
    # TrackTrack recovered from its looser NMS): what a detection carries besides its box (a mask) follows it
    detections: np.ndarray | None = None


class TrackingSession:
    """`update(sequence, boxes, image)` -> (tracked boxes (m, 6) x1, y1, x2, y2, conf, cls, ids (m,)), highest
    confidence first, for the tracks matched in this frame."""

    def __init__(self, tracker: str | Path | TrackerConfig = DEFAULT_TRACKER, frame_rate: float = 30.0):
        self.config = tracker if isinstance(tracker, TrackerConfig) else load_tracker_config(tracker)
        self.frame_rate = frame_rate
        self.sequence: str | None = None
        self.frame = 0  # 1-based index of the last frame in the current sequence
        self.tracker = None  # the config's tracker (bot_sort.create_tracker), made per sequence
        self.detections = np.zeros(0, np.int64)  # the last update's: each tracked row's detection row (Tracked)

    def start(self, sequence: str, frame_rate: float | None = None) -> None:
        """Begin a new sequence: a fresh tracker state."""
        self.tracker = create_tracker(self.config, frame_rate or self.frame_rate)
        self.sequence, self.frame = sequence, 0

    @property
    def needs(self) -> TrackerNeeds:
        """What the tracker needs of each frame besides the boxes (the Predictor serves it: Predictor.serve)."""
        return tracker_class(self.config).needs(self.config)

    def update(
        self, sequence: str, boxes: np.ndarray, image: np.ndarray | None, recovered=None, features=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """recovered: (k, 6) boxes a looser NMS kept besides boxes (TrackTrack matches tracks to them too);
        features: (n, C) an embedding per row of boxes (with_reid). Both as `needs` asks, else None. Afterwards
        self.detections holds, per tracked row, the row of boxes it was matched to (-1: a recovered box)."""
        if sequence != self.sequence or self.tracker is None:
            self.start(sequence)
        self.frame += 1
        out = self.tracker.update(np.asarray(boxes, np.float64).reshape(-1, 6), image, recovered, features)
        out = out[np.argsort(-out[:, 5], kind="stable")]
        if image is not None:  # a track's box (its Kalman estimate) may reach past the frame, a detection's does not
            h, w = image.shape[:2]
            out[:, [0, 2]] = out[:, [0, 2]].clip(0, w)
            out[:, [1, 3]] = out[:, [1, 3]].clip(0, h)
        rows = out[:, 7].astype(np.int64)  # the trackers' detection index: of boxes, or -1 for a recovered box
        self.detections = np.where((rows >= 0) & (rows < len(boxes)), rows, -1)
        return out[:, [0, 1, 2, 3, 5, 6]].astype(np.float32), out[:, 4].astype(np.int64)
