"""ByteTrack: every detection, confident or weak, is a chance to keep a track alive.

Per frame: tracks move ahead by their Kalman filters; the confident detections (score >= track_high_thresh) are
matched by IoU to the tracked and lost tracks; the weak ones (track_low_thresh..track_high_thresh) are then matched to
the tracked tracks still unmatched, which keeps an object through a partial occlusion where its score drops. A track
starts unconfirmed and is confirmed by a second match; a track not matched is lost, and removed after track_buffer
frames unless a detection finds it again (same identity). Only confirmed, currently tracked tracks are reported.
"""

import itertools

import numpy as np

from utils.track.appearance import TrackerNeeds, frame_embeddings
from utils.track.config import TrackerConfig
from utils.track.matching import assign, iou_cost
from utils.track.tracks import Track, TrackState, boxes_xyxy, predict_all, update_all

SECOND_STAGE_MAX_COST = 0.5  # weak detections need IoU >= 0.5 with a track (ByteTrack's value)
UNCONFIRMED_MAX_COST = 0.7  # a new track's second detection needs IoU >= 0.3
DUPLICATE_MAX_COST = 0.15  # a tracked and a lost track overlapping more than IoU 0.85 are one object
OUTPUT_COLUMNS = 8  # x1, y1, x2, y2, track_id, score, cls, index of the detection in the frame's input


class ByteTracker:
    """`update(detections, frame)` per frame with detections (n, 6) x1, y1, x2, y2, score, cls in frame pixels;
    returns (m, 8) x1, y1, x2, y2, track_id, score, cls, detection index for the tracks matched in this frame.
    Identities start at 1 and are never reused by one tracker. Its Kalman filter follows (cx, cy, w / h, h), as
    ByteTrack's does; BoT-SORT's (cx, cy, w, h)."""

    ASPECT = True  # the Kalman state holds the aspect ratio (tracks.Track)

    def __init__(self, config: TrackerConfig, frame_rate: float = 30.0):
        self.config = config
        self.max_time_lost = max(int(round(frame_rate / 30.0 * config.track_buffer)), 1)
        self.reset()

    def reset(self) -> None:
        """Forget every track and restart identities at 1 (a new video)."""
        self.tracked: list[Track] = []
        self.lost: list[Track] = []
        self.frame_id = 0
        self._ids = itertools.count(1)
        self.embeddings: list | None = None  # this frame's, one per input detection (with_reid; frame_embeddings)

    def _costs(self, tracks: list[Track], detections: np.ndarray, fuse: bool) -> np.ndarray:
        if not tracks or not len(detections):
            return np.ones((len(tracks), len(detections)))
        scores = detections[:, 4] if fuse and self.config.fuse_score else None
        return iou_cost(boxes_xyxy(tracks), detections[:, :4], scores)

    def _compensate(self, tracks: list[Track], frame: np.ndarray | None, detections: np.ndarray) -> None:
        """Camera-motion compensation: none for ByteTrack (BoT-SORT overrides this)."""

    def _split(self, detections: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Confident and weak detections as rows x1, y1, x2, y2, score, cls, index in the input."""
        d = np.asarray(detections, np.float64).reshape(-1, 6)
        d = np.concatenate([d, np.arange(len(d), dtype=np.float64)[:, None]], axis=1)
        cfg = self.config
        real = (d[:, 2] > d[:, 0]) & (d[:, 3] > d[:, 1])  # a box of no width or height has no aspect ratio
        weak = real & (d[:, 4] > cfg.track_low_thresh) & (d[:, 4] < cfg.track_high_thresh)
        return d[real & (d[:, 4] >= cfg.track_high_thresh)], d[weak]

    @classmethod
    def needs(cls, config: TrackerConfig) -> TrackerNeeds:
        """What this tracker needs of each frame besides its detections (nothing for ByteTrack and OC-SORT)."""
        return TrackerNeeds()

    def update(
        self, detections: np.ndarray, frame: np.ndarray | None = None, recovered=None, features=None
    ) -> np.ndarray:
        """One frame; recovered (detections a looser NMS kept, TrackTrack's) is not used here; features: (n, C)
        an embedding per detection row, used by BoT-SORT with with_reid."""
        self.frame_id += 1
        self.embeddings = frame_embeddings(features, len(detections)) if self.config.with_reid else None
        high, low = self._split(detections)
        unconfirmed = [t for t in self.tracked if not t.is_activated]
        pool = [t for t in self.tracked if t.is_activated] + self.lost
        predict_all(pool)
        self._compensate(pool + unconfirmed, frame, np.concatenate([high, low]))

        # 1st association: confident detections against every confirmed or lost track
        found, rest, high_left = self._associate_confident(pool, high)
        # 2nd association: weak detections against the tracks still unmatched that were tracked last frame
        found += self._associate_weak([pool[i] for i in rest if pool[i].state == TrackState.TRACKED], low)
        # new tracks seen once before: confirmed by a confident detection, else dropped
        high = high[high_left]
        pairs, dropped, high_left = assign(self._costs(unconfirmed, high, fuse=True), UNCONFIRMED_MAX_COST)
        found += self._apply(unconfirmed, high, pairs)
        for i in dropped:
            unconfirmed[i].state = TrackState.REMOVED
        for row in high[high_left]:
            if row[4] >= self.config.new_track_thresh:
                found.append(self._new_track(row))
        self._bookkeep(pool + unconfirmed, found)
        return self._output()

    def _associate_confident(self, pool: list[Track], high: np.ndarray) -> tuple[list[Track], list[int], list[int]]:
        """Match the pool to the confident detections: (tracks matched, pool indices left, detection indices left)."""
        pairs, rest, high_left = assign(self._costs(pool, high, fuse=True), self.config.match_thresh)
        return self._apply(pool, high, pairs), rest, high_left

    def _associate_weak(self, still: list[Track], low: np.ndarray) -> list[Track]:
        """Match the weak detections to the tracks tracked last frame and still unmatched; the rest are lost."""
        pairs, rest, _ = assign(self._costs(still, low, fuse=False), SECOND_STAGE_MAX_COST)
        for i in rest:
            still[i].state = TrackState.LOST
        return self._apply(still, low, pairs)

    def _new_track(self, row: np.ndarray) -> Track:
        track = Track(row[:4], row[4], row[5], int(row[6]), aspect=self.ASPECT)
        track.activate(next(self._ids), self.frame_id, confirmed=self.frame_id == 1)
        return track

    def _apply(self, tracks: list[Track], detections: np.ndarray, pairs) -> list[Track]:
        matched = [tracks[i] for i, _ in pairs]
        update_all(matched, detections[[j for _, j in pairs]], self.frame_id)
        return matched

    def _bookkeep(self, previous: list[Track], found: list[Track]) -> None:
        """The new tracked and lost lists. A lost track unseen for more than max_time_lost frames expires: it may still
        be found in the next frame, then it goes (and a track found in that frame goes at once when lost again), as
        in ByteTrack's reference code. A lost track that overlaps a tracked one almost exactly is a duplicate (the
        one followed for fewer frames goes)."""
        tracked = [t for t in found if t.state == TrackState.TRACKED]
        lost = [t for t in previous if t.state == TrackState.LOST and t.is_activated and not t.expired]
        for t in lost:
            t.expired = t.expired or self.frame_id - t.frame_id > self.max_time_lost
        self.tracked, self.lost = drop_duplicates(tracked, lost)

    def _output(self) -> np.ndarray:
        shown = [t for t in self.tracked if t.is_activated]
        info = np.array([(t.track_id, t.score, t.cls, t.det_index) for t in shown], np.float64).reshape(-1, 4)
        return np.concatenate([boxes_xyxy(shown), info], axis=1)


def drop_duplicates(
    tracked: list[Track], lost: list[Track], cost_of=iou_cost, boxes_of=boxes_xyxy
) -> tuple[list[Track], list[Track]]:
    """Of a tracked and a lost track on the same place (cost_of(their boxes_of) below DUPLICATE_MAX_COST, 1 - IoU by
    default), the one followed for fewer frames (first to last seen) goes."""
    if not tracked or not lost:
        return tracked, lost
    cost = cost_of(boxes_of(tracked), boxes_of(lost))
    drop_tracked, drop_lost = set(), set()
    for i, j in zip(*np.nonzero(cost < DUPLICATE_MAX_COST)):
        if tracked[i].frame_id - tracked[i].start_frame > lost[j].frame_id - lost[j].start_frame:
            drop_lost.add(j)
        else:
            drop_tracked.add(i)
    return [t for i, t in enumerate(tracked) if i not in drop_tracked], [
        t for j, t in enumerate(lost) if j not in drop_lost
    ]
