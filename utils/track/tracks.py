"""One tracked object: its Kalman state, identity and life cycle (new -> tracked <-> lost -> removed)."""

from enum import Enum

import numpy as np

from utils.track import kalman


class TrackState(Enum):
    NEW = 0
    TRACKED = 1
    LOST = 2
    REMOVED = 3


def _corner_and_size(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 2) top-left corners and (n, 2) sizes of (n, 4) x1, y1, x2, y2 boxes, in float32 through the centre, as
    the reference trackers (ByteTrack's, Ultralytics') derive them from the detector's float32 boxes."""
    b = np.asarray(boxes, np.float32).reshape(-1, 4)
    centre, size = (b[:, :2] + b[:, 2:]) / np.float32(2), b[:, 2:] - b[:, :2]
    return (centre.astype(np.float64) - size.astype(np.float64) / 2).astype(np.float32), size


def detection_xyxy(boxes: np.ndarray) -> np.ndarray:
    """(n, 4) float32 x1, y1, x2, y2 of detections as the reference trackers hold them (through the corner and size):
    what OC-SORT and TrackTrack remember of a detection and measure angles on."""
    top_left, size = _corner_and_size(boxes)
    return np.concatenate([top_left, top_left + size], axis=1)


def xyxy_to_state(boxes: np.ndarray, aspect: bool) -> np.ndarray:
    """(n, 4) x1, y1, x2, y2 boxes as the Kalman filter measures them: cx, cy, w, h, or cx, cy, w / h, h.

    Worked out in float32 from the detector's float32 boxes, through the left-top corner and back, as the reference
    trackers (ByteTrack's, Ultralytics') do: on the same detections both then give the same tracks to the last bit."""
    top_left, size = _corner_and_size(boxes)
    state = np.concatenate([top_left + size / np.float32(2), size], axis=1)
    if aspect:
        state[:, 2] /= state[:, 3]
    return state.astype(np.float64)


def state_to_xyxy(means: np.ndarray, aspect: bool) -> np.ndarray:
    """(n, 4) x1, y1, x2, y2 of (n, >=4) Kalman means (the inverse of xyxy_to_state)."""
    c = np.array(means[:, :4], np.float64)
    if aspect:
        c[:, 2] *= c[:, 3]
    top_left = c[:, :2] - c[:, 2:] / 2
    return np.concatenate([top_left, top_left + c[:, 2:]], axis=1)  # the reference trackers' order of operations


class Track:
    """A track's state. A new track is 'unconfirmed' (not activated) until a second detection matches it, except on
    a tracker's first frame, where every confident detection starts a confirmed track. aspect: its Kalman state
    holds the aspect ratio (ByteTrack's) rather than the width (BoT-SORT's); all tracks of one tracker share it."""

    def __init__(self, box_xyxy: np.ndarray, score: float, cls: float, det_index: int, aspect: bool = False):
        self.box = np.asarray(box_xyxy, np.float64)  # the detection it was made from (until activated)
        self.aspect = aspect
        self.score, self.cls, self.det_index = float(score), float(cls), int(det_index)
        self.mean: np.ndarray | None = None
        self.covariance: np.ndarray | None = None
        self.track_id = 0
        self.state = TrackState.NEW
        self.is_activated = False
        self.expired = False  # lost past the tracker's buffer (ByteTracker._bookkeep)
        self.obs = None  # what OC-SORT remembers of its detections (oc_sort.Observations)
        self.embedding: np.ndarray | None = None  # with_reid: the last matched detection's (normalized)
        self.smoothed: np.ndarray | None = None  # with_reid: the moving average of them (appearance.blend_embeddings)
        self.start_frame = self.frame_id = 0

    def activate(self, track_id: int, frame_id: int, confirmed: bool) -> None:
        mean, cov = kalman.initiate(xyxy_to_state(self.box, self.aspect), self.aspect)
        self.mean, self.covariance = mean[0], cov[0]
        self.track_id, self.state, self.is_activated = track_id, TrackState.TRACKED, confirmed
        self.start_frame = self.frame_id = frame_id

    def take(self, detection: np.ndarray, mean: np.ndarray, covariance: np.ndarray, frame_id: int) -> None:
        """Take a matched detection (x1, y1, x2, y2, score, cls, index) and the Kalman state corrected with it
        (update_all); a lost track found again keeps its identity."""
        self.mean, self.covariance = mean, covariance
        self.score, self.cls, self.det_index = float(detection[4]), float(detection[5]), int(detection[6])
        self.state, self.is_activated, self.frame_id = TrackState.TRACKED, True, frame_id

    @property
    def xyxy(self) -> np.ndarray:
        """The box now: the Kalman estimate once activated, else the detection's."""
        if self.mean is None:
            return self.box.copy()
        return state_to_xyxy(self.mean[None], self.aspect)[0]


def boxes_xyxy(tracks: list[Track]) -> np.ndarray:
    """(n, 4) x1, y1, x2, y2 of tracks (their Kalman estimate), in one array operation."""
    if not tracks:
        return np.zeros((0, 4))
    return state_to_xyxy(np.array([t.mean[:4] for t in tracks]), tracks[0].aspect)


def update_all(tracks: list[Track], detections: np.ndarray, frame_id: int) -> None:
    """Correct each track with its detection row (x1, y1, x2, y2, score, cls, index; same order as tracks), all in
    one batched Kalman update."""
    if not tracks:
        return
    mean = np.array([t.mean for t in tracks])
    cov = np.array([t.covariance for t in tracks])
    aspect = tracks[0].aspect
    mean, cov = kalman.update(mean, cov, xyxy_to_state(detections[:, :4], aspect), aspect)
    for t, d, m, c in zip(tracks, detections, mean, cov):
        t.take(d, m, c, frame_id)


def predict_all(tracks: list[Track]) -> None:
    """Move every track one frame ahead. A track that is not being seen keeps its size: its size velocities (the
    height's; the width's too in a (cx, cy, w, h) state) are set to 0, so a box cannot grow or shrink without bound
    while nothing measures it."""
    if not tracks:
        return
    aspect = tracks[0].aspect
    mean = np.array([t.mean for t in tracks])
    cov = np.array([t.covariance for t in tracks])
    unseen = np.array([t.state != TrackState.TRACKED for t in tracks])
    mean[unseen, 7 if aspect else slice(6, 8)] = 0
    mean, cov = kalman.predict(mean, cov, aspect)
    for t, m, c in zip(tracks, mean, cov):
        t.mean, t.covariance = m, c


def warp_all(tracks: list[Track], affine: np.ndarray) -> None:
    """Apply a camera-motion affine (2x3) to every track's (cx, cy, w, h) state."""
    if not tracks or np.allclose(affine, np.eye(2, 3)):
        return
    mean, cov = kalman.warp(np.array([t.mean for t in tracks]), np.array([t.covariance for t in tracks]), affine)
    for t, m, c in zip(tracks, mean, cov):
        t.mean, t.covariance = m, c
