"""OC-SORT (Cao et al., "Observation-Centric SORT", CVPR 2023) on ByteTrack's bookkeeping, as Ultralytics' ocsort
tracker runs it: a Kalman filter trusts its own predictions too long when an object is hidden, so OC-SORT leans on
the detections it actually saw.

- OCM (momentum): the first association's cost adds `inertia` times the angle between a track's observed direction
  of motion (from its detection delta_t frames back to its last one) and the direction from its last detection to
  each candidate, divided by pi.
- OCR (recovery): tracks still unmatched are matched again by IoU between their last detection (not the prediction)
  and the detections left, the tracked ones before the lost ones.
- ORU (re-update): a lost track found by OCR has its filter rewound to its last detection and replayed over the
  frames it was hidden on boxes interpolated between the two detections, so its velocity is not the drift it
  accumulated while unseen.

Weak detections take part (ByteTrack's second association) only with use_byte.
"""

import numpy as np

from utils.track import kalman
from utils.track.byte_tracker import ByteTracker
from utils.track.matching import assign, iou_cost
from utils.track.tracks import Track, TrackState, detection_xyxy, state_to_xyxy, update_all


class Observations:
    """What a track has seen: its detections of the last frames (float32 x1, y1, x2, y2 by frame), the direction it
    moved in, and its Kalman state right after its last detection (where ORU rewinds to)."""

    def __init__(self, delta_t: int):
        self.delta_t = delta_t
        self.boxes: dict[int, np.ndarray] = {}
        self.last = np.full(4, -1, np.float32)  # x1 < 0: none usable (the reference's marker, kept for its tests)
        self.direction: np.ndarray | None = None
        self.saved: tuple[np.ndarray, np.ndarray] | None = None

    def record(self, box: np.ndarray, frame_id: int) -> None:
        """A detection seen at frame_id; only the frames the direction can reach back to are kept."""
        self.last = self.boxes[frame_id] = box
        for old in sorted(self.boxes)[: max(len(self.boxes) - self.delta_t - 2, 0)]:
            del self.boxes[old]

    def reference_frames(self) -> tuple[int, int]:
        """The frames of the last detection and of the latest one at least delta_t frames before it (else the
        earliest): the direction of motion runs from the second to the first."""
        frames = list(self.boxes)  # recorded in order of frames
        current = frames[-1]
        earlier = [f for f in frames if f < current - self.delta_t + 1]
        return current, earlier[-1] if earlier else frames[0]


def update_directions(observations: list[Observations]) -> None:
    """Each one's direction: the unit vector from the centre of its reference detection to the centre of its last
    one (float32); zero if it did not move, None with a single detection."""
    moved, current, previous = [], [], []
    for obs in observations:
        now, before = obs.reference_frames()
        if now == before:
            obs.direction = None
        else:
            moved.append(obs)
            current.append(obs.boxes[now])
            previous.append(obs.boxes[before])
    if not moved:
        return
    step = _centres(np.array(current)) - _centres(np.array(previous))
    norm = np.sqrt(step[:, 0] * step[:, 0] + step[:, 1] * step[:, 1])
    unit = step / np.where(norm < 1e-6, 1, norm)[:, None]
    for obs, n, u in zip(moved, norm, unit):
        obs.direction = np.zeros(2, np.float32) if n < 1e-6 else u


def _centres(boxes: np.ndarray) -> np.ndarray:
    """(n, 2) centres of (n, 4) x1, y1, x2, y2 boxes, in their dtype."""
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], axis=1)


class OcSort(ByteTracker):
    """ByteTrack's life cycle (tracks confirmed by a second detection, lost, found again, expired after
    track_buffer frames) with OC-SORT's association; its Kalman filter is ByteTrack's (cx, cy, w / h, h)."""

    def _costs(self, tracks: list[Track], detections: np.ndarray, fuse: bool) -> np.ndarray:
        cost = super()._costs(tracks, detections, fuse)
        if fuse and cost.size:  # the fused stages (first and unconfirmed) weigh the direction of motion in
            cost = cost + self.config.inertia * _direction_cost(tracks, detections)
        return cost

    def _new_track(self, row: np.ndarray) -> Track:
        track = super()._new_track(row)
        track.obs = Observations(self.config.delta_t)
        track.obs.record(state_to_xyxy(track.mean[None], True)[0].astype(np.float32), self.frame_id)
        track.obs.saved = track.mean.copy(), track.covariance.copy()
        return track

    def _apply(self, tracks: list[Track], detections: np.ndarray, pairs) -> list[Track]:
        matched = [tracks[i] for i, _ in pairs]
        rows = detections[[j for _, j in pairs]]
        for track, box in zip(matched, detection_xyxy(rows[:, :4])):
            track.obs.record(box, self.frame_id)
        update_all(matched, rows, self.frame_id)
        for track in matched:
            track.obs.saved = track.mean.copy(), track.covariance.copy()
        update_directions([t.obs for t in matched])
        return matched

    def _associate_confident(self, pool: list[Track], high: np.ndarray) -> tuple[list[Track], list[int], list[int]]:
        """The first association, then OCR on what is left: tracked tracks first, lost ones on what they leave."""
        found, rest, high_left = super()._associate_confident(pool, high)
        if not high_left:
            return found, rest, high_left
        tracked = [i for i in rest if pool[i].state == TrackState.TRACKED]
        others = [i for i in rest if pool[i].state != TrackState.TRACKED]
        more, tracked_left, high_left = self._recover([pool[i] for i in tracked], high, high_left)
        found += more
        more, others_left, high_left = self._recover([pool[i] for i in others], high, high_left)
        found += more
        return found, [tracked[i] for i in tracked_left] + [others[i] for i in others_left], high_left

    def _recover(self, tracks: list[Track], high: np.ndarray, columns: list[int]) -> tuple[list, list, list]:
        """OCR: match tracks by their last detection to high[columns]; (found, track indices left, columns left)."""
        if not tracks or not columns:
            return [], list(range(len(tracks))), columns
        last = np.array([t.obs.last if t.obs.last[0] >= 0 else t.xyxy for t in tracks])
        rows = high[columns]
        cost = iou_cost(last, rows[:, :4], rows[:, 4] if self.config.fuse_score else None)
        pairs, left, cols_left = assign(cost, self.config.match_thresh)
        for i, j in pairs:
            if tracks[i].state != TrackState.TRACKED:
                _reupdate(tracks[i], detection_xyxy(rows[j, :4])[0], self.frame_id)
        return self._apply(tracks, rows, pairs), left, [columns[j] for j in cols_left]

    def _associate_weak(self, still: list[Track], low: np.ndarray) -> list[Track]:
        if self.config.use_byte:
            return super()._associate_weak(still, low)
        for track in still:
            track.state = TrackState.LOST
        return []


def _direction_cost(tracks: list[Track], detections: np.ndarray) -> np.ndarray:
    """OCM: (n, m) angle in [0, 1] (of pi) between each track's direction and the way to each detection from its
    last detection; 0 for a track with no direction yet."""
    cost = np.zeros((len(tracks), len(detections)), np.float32)
    rows = [i for i, t in enumerate(tracks) if t.obs.direction is not None and t.obs.last[0] >= 0]
    if not rows:
        return cost
    centres = _centres(detection_xyxy(detections[:, :4]))
    ways = centres[None] - _centres(np.array([tracks[i].obs.last for i in rows]))[:, None]  # (r, m, 2) float32
    norms = np.sqrt(ways[..., 0] * ways[..., 0] + ways[..., 1] * ways[..., 1])
    valid = norms > 1e-6
    unit = ways / np.where(valid, norms, 1)[..., None]
    direction = np.array([tracks[i].obs.direction for i in rows])[:, None]
    # the products written out (not a BLAS call): the reference's float32 dot of two terms, to the last bit
    dots = np.clip(unit[..., 0] * direction[..., 0] + unit[..., 1] * direction[..., 1], -1.0, 1.0)
    cost[rows] = np.where(valid, np.arccos(dots) / np.pi, 0)
    return cost


def _reupdate(track: Track, box: np.ndarray, frame_id: int) -> None:
    """ORU: rewind the track's filter to its last detection and replay the frames it was not seen on detections
    interpolated between that one and box (found at frame_id), then predict up to frame_id."""
    obs = track.obs
    last_frame = max(obs.boxes)
    gap = frame_id - last_frame
    if gap <= 1 or obs.saved is None:
        return
    mean, cov = obs.saved[0][None], obs.saved[1][None]
    last = obs.boxes[last_frame]
    for step in range(1, gap):
        alpha = step / gap
        virtual = (1 - alpha) * last + alpha * box
        size = virtual[2:] - virtual[:2]
        measured = np.concatenate([virtual[:2] + size / 2, [size[0] / size[1], size[1]]])
        mean, cov = kalman.predict(mean, cov, aspect=True, right_first=True)
        mean, cov = kalman.update(mean, cov, measured[None], aspect=True)
    mean, cov = kalman.predict(mean, cov, aspect=True, right_first=True)
    track.mean, track.covariance = mean[0], cov[0]
