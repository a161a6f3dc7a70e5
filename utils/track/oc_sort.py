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

    def update_direction(self) -> None:
        """Unit vector from the centre of the latest detection at least delta_t frames back (else the earliest) to
        the last one's; zero if it did not move, None with a single detection."""
        frames = sorted(self.boxes)
        current = frames[-1]
        earlier = [f for f in frames if f < current - self.delta_t + 1]
        previous = earlier[-1] if earlier else frames[0]
        if previous == current:
            self.direction = None
            return
        step = _centre(self.boxes[current]) - _centre(self.boxes[previous])
        norm = np.linalg.norm(step)
        self.direction = np.zeros(2, np.float32) if norm < 1e-6 else (step / norm).astype(np.float32)


def _centre(box: np.ndarray) -> np.ndarray:
    return np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2])


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
            track.obs.update_direction()
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
    boxes = detection_xyxy(detections[:, :4])
    centres = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], axis=1)
    last = np.stack([tracks[i].obs.last for i in rows])
    ways = centres[None] - np.stack([(last[:, 0] + last[:, 2]) / 2, (last[:, 1] + last[:, 3]) / 2], axis=1)[:, None]
    norms = np.linalg.norm(ways, axis=2)
    for k, i in enumerate(rows):  # one product per track: the reference's (float32, by BLAS) to the last bit
        valid = norms[k] > 1e-6
        unit = ways[k][valid] / norms[k][valid, None]
        cost[i, valid] = np.arccos(np.clip(unit @ tracks[i].obs.direction, -1.0, 1.0)) / np.pi
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
