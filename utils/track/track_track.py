"""TrackTrack (Shim et al., "Focusing on Tracks for Online Multi-Object Tracking", CVPR 2025), as Ultralytics'
tracktrack tracker runs it without appearance.

Per frame: every track (tracked or lost) is moved by the camera's motion and its Kalman filter ((cx, cy, w, h),
NSA-Kalman: a confident detection is trusted more); then one association of all tracks against all detections,
confident, weak (+penalty_p) and those only a looser NMS kept (+penalty_q), on a cost of 1 - HMIoU (IoU times the
vertical IoU), the gap between a track's extrapolated score and the detection's, and the angle between each corner's
recent motion and the way to the detection (pairs with IoU <= 0.1 cost 1). The assignment is iterative: the pairs
that are each other's cheapest are made if below match_thresh, the threshold drops by reduce_step, and again.
New tracks (track-aware initialisation) come from confident detections left over that overlap no track and no
stronger new detection by more than tai_thr; they are confirmed after min_track_len detections.
"""

import itertools
from collections import deque

import numpy as np

from utils.track import kalman
from utils.track.appearance import (
    LOOSE_NMS_IOU,
    TrackerNeeds,
    blend_embeddings,
    cosine_distance,
    detection_embeddings,
    frame_embeddings,
)
from utils.track.byte_tracker import drop_duplicates
from utils.track.config import TrackerConfig
from utils.track.gmc import CameraMotion
from utils.track.motion_check import checked_affine
from utils.track.refind import centre_gap_cost
from utils.track.track_table import DELTA_T, TrackTable
from utils.track.tracks import Track, TrackState, detection_xyxy, state_to_xyxy, xyxy_to_state

CORNER_X, CORNER_Y = np.array([0, 0, 2, 2]), np.array([1, 3, 1, 3])  # the four corners of an x1, y1, x2, y2 box
STEPS_BACK = np.arange(1, DELTA_T + 1)  # the frames back a track's corner velocity averages over
FRAMES_APART = STEPS_BACK[:, None, None, None]  # a corner step's divisor, shaped for (DELTA_T, n, 4, 2) steps
SUPPORT_IOU = 0.10  # a pair needs more IoU than this to be matched at all
SMOOTHING = 0.95  # share of a track's smoothed embedding kept at a match of score 1 (less at lower scores)
REMOVED_MEMORY = 1000  # identities of removed tracks remembered (a lost list entry of one of them is dropped)


class TtTrack(Track):
    """A track whose numbers live in a row of its tracker's TrackTable (Kalman state, scores, corner velocities,
    last boxes); the rest (identity, state, class, ...) is its own as for the other trackers."""

    def __init__(self, table: TrackTable, det_row: np.ndarray, mean: np.ndarray, cov: np.ndarray, score32: np.float32):
        self.table, self.row = table, table.add(mean, cov, score32)
        super().__init__(det_row[:4], det_row[4], det_row[5], int(det_row[6]))

    # Track.__init__ sets both to None: a row holds numbers from the start, so a None is not stored
    mean = property(lambda self: self.table.mean[self.row], lambda self, v: _store(self.table.mean, self.row, v))
    covariance = property(lambda self: self.table.cov[self.row], lambda self, v: _store(self.table.cov, self.row, v))


def _store(array: np.ndarray, row: int, value) -> None:
    if value is not None:
        array[row] = value


def _rows(tracks: list) -> np.ndarray:
    return np.array([t.row for t in tracks], np.int64)


class Detections:
    """One frame's detections for TrackTrack: rows x1, y1, x2, y2, score, cls, index (-1: recovered), and the boxes
    and scores in float32 as the reference holds them; confident ones first, then weak, then recovered."""

    def __init__(self, rows: np.ndarray, n_high: int, n_low: int, embeddings: list | None = None):
        self.rows, self.n_high, self.n_low = rows, n_high, n_low
        self.embeddings = embeddings or [None] * len(rows)  # with_reid: the confident ones' (normalized)
        self.box32 = detection_xyxy(rows[:, :4])
        self.score32 = rows[:, 4].astype(np.float32)

    def __len__(self) -> int:
        return len(self.rows)

    def subset(self, index) -> "Detections":
        index = np.asarray(index, np.int64)
        embeddings = [self.embeddings[i] for i in index]
        return Detections(self.rows[index], int((index < self.n_high).sum()), 0, embeddings)


class TrackTrack:
    """`update(detections, frame, recovered)` per frame, as ByteTracker's (same output rows); recovered: (k, 6)
    detections a looser NMS kept (their index column is -1)."""

    def __init__(self, config: TrackerConfig, frame_rate: float = 30.0):
        self.config = config
        self.max_time_lost = max(int(round(frame_rate / 30.0 * config.track_buffer)), 1)
        self.camera = CameraMotion(config.gmc_method)
        self.reset()

    def reset(self) -> None:
        self.tracked: list[TtTrack] = []
        self.lost: list[TtTrack] = []
        self.removed_ids: deque = deque(maxlen=REMOVED_MEMORY)
        self.frame_id = 0
        self.table = TrackTable()
        self._ids = itertools.count(1)
        self.camera.reset()

    @classmethod
    def needs(cls, config: TrackerConfig) -> TrackerNeeds:
        """Recovered boxes always; embeddings with with_reid (model: auto)."""
        return TrackerNeeds(loose_nms_iou=LOOSE_NMS_IOU, embeddings=config.with_reid and config.model == "auto")

    def _detections(self, detections, recovered, features) -> Detections:
        d = np.asarray(detections, np.float64).reshape(-1, 6)
        d = np.concatenate([d, np.arange(len(d), dtype=np.float64)[:, None]], axis=1)
        cfg = self.config
        real = (d[:, 2] > d[:, 0]) & (d[:, 3] > d[:, 1])  # a box of no width or height cannot start a filter
        score = d[:, 4].astype(np.float32)
        high = d[real & (score >= np.float32(cfg.track_high_thresh))]
        low = d[real & (score > np.float32(cfg.track_low_thresh)) & (score < np.float32(cfg.track_high_thresh))]
        extra = np.zeros((0, 7))
        if recovered is not None and len(recovered):
            r = np.asarray(recovered, np.float64).reshape(-1, 6)
            r = r[(r[:, 2] > r[:, 0]) & (r[:, 3] > r[:, 1]) & (r[:, 4].astype(np.float32) > cfg.track_high_thresh)]
            extra = np.concatenate([r, -np.ones((len(r), 1))], axis=1)
        features = frame_embeddings(features, len(d)) if cfg.with_reid else None
        embeddings = detection_embeddings(features, high) + [None] * (len(low) + len(extra))  # the reference's
        return Detections(np.concatenate([high, low, extra]), len(high), len(low), embeddings)

    def update(
        self, detections: np.ndarray, frame: np.ndarray | None = None, recovered=None, features=None
    ) -> np.ndarray:
        self.frame_id += 1
        self.table.compact(self.tracked + self.lost)
        dets = self._detections(detections, recovered, features)
        unconfirmed = [t for t in self.tracked if t.state != TrackState.TRACKED]
        pool = [t for t in self.tracked if t.state == TrackState.TRACKED]
        ids = {t.track_id for t in pool}
        pool += [t for t in self.lost if t.track_id not in ids]
        if frame is not None:
            affine = self.camera.estimate(frame, dets.box32[: dets.n_high])
            if self.config.gmc_check:  # an estimate that fits the tracks worse than no motion is not the camera's
                affine = checked_affine(affine, self.table.mean[_rows(pool[: len(ids)])], dets.box32[: dets.n_high])
            self._warp(pool, affine)  # two calls, as the reference makes them
            self._warp(unconfirmed, affine)
        self._predict(pool + unconfirmed)

        cost = self._cost(pool, dets)
        cost[:, dets.n_high : dets.n_high + dets.n_low] += np.float32(self.config.penalty_p)
        cost[:, dets.n_high + dets.n_low :] += np.float32(self.config.penalty_q)
        pairs, left, dets_left = iterative_assign(_clip01(cost), self.config.match_thresh, self.config.reduce_step)
        activated, refound, lost, removed = [], [], [], []
        for i, _ in pairs:
            (activated if pool[i].state == TrackState.TRACKED else refound).append(pool[i])
        self._take(pool, dets, pairs)
        for i in left:
            if pool[i].state != TrackState.LOST:
                pool[i].state = TrackState.LOST
                lost.append(pool[i])
        leftover = self._confirm(
            dets.subset([j for j in dets_left if j < dets.n_high]), unconfirmed, activated, removed
        )
        leftover = self._second_chance(pool, lost, leftover, refound)
        active = [t for t in self.tracked if t.state == TrackState.TRACKED] + activated
        leftover = self._refind(pool, lost, leftover, refound, active)
        activated += self._start(leftover, np.flatnonzero(self._allowed_births(active, leftover)))
        for track in self.lost:
            if self.frame_id - track.frame_id > self.max_time_lost:
                track.state = TrackState.REMOVED
                removed.append(track)
        self._merge(activated, refound, lost, removed)
        shown = [t for t in self.tracked if t.is_activated and t.frame_id == self.frame_id]
        info = np.array([(t.track_id, t.score, t.cls, t.det_index) for t in shown], np.float64).reshape(-1, 4)
        return np.concatenate([self._boxes(shown), info], axis=1)

    def _confirm(self, leftover: Detections, unconfirmed: list, activated: list, removed: list) -> Detections:
        """New tracks against the confident detections left; those not matched are dropped."""
        if unconfirmed and len(leftover):
            pairs, left, dets_left = iterative_assign(
                self._cost(unconfirmed, leftover), self.config.match_thresh, self.config.reduce_step
            )
            activated += [unconfirmed[i] for i, _ in pairs]
            self._take(unconfirmed, leftover, pairs)
            dropped = [unconfirmed[i] for i in left]
            leftover = leftover.subset(dets_left)
        else:
            dropped = unconfirmed
        for track in dropped:
            track.state = TrackState.REMOVED
        removed += dropped
        return leftover

    def _second_chance(self, pool: list, lost: list, leftover: Detections, refound: list) -> Detections:
        """lost_match_thr > 0: tracks lost before this frame and still unmatched against the detections left."""
        if self.config.lost_match_thr <= 0 or not len(leftover):
            return leftover
        waiting = _lost_earlier(pool, lost)
        if not waiting:
            return leftover
        pairs, _, dets_left = iterative_assign(
            self._cost(waiting, leftover), self.config.lost_match_thr, self.config.reduce_step
        )
        refound += [waiting[i] for i, _ in pairs]
        self._take(waiting, leftover, pairs)
        return leftover.subset(dets_left)

    def _refind(self, pool: list, lost: list, leftover: Detections, refound: list, active: list) -> Detections:
        """refind_thr > 0: tracks lost before this frame and still unmatched against the confident detections left
        that overlap no active track by more than tai_thr, by the gap between centres (refind.centre_gap_cost),
        before any of those detections starts a new track."""
        if self.config.refind_thr <= 0 or not len(leftover):
            return leftover
        waiting = _lost_earlier(pool, lost)
        if not waiting:
            return leftover
        frames_lost = [self.frame_id - t.frame_id for t in waiting]
        cost = centre_gap_cost(self._boxes(waiting), leftover.rows[:, :4], self.config.refind_thr, frames_lost)
        if active:  # a detection beside a track (one passing in front of another) is no evidence of which it is
            beside = iou32(leftover.box32, self._boxes(active).astype(np.float32)).max(axis=1) > self.config.tai_thr
            cost[:, beside] = np.inf
        pairs, _, dets_left = iterative_assign(cost, 1.0, 0.0)
        refound += [waiting[i] for i, _ in pairs]
        self._take(waiting, leftover, pairs)
        return leftover.subset(dets_left)

    def _start(self, dets: Detections, chosen: np.ndarray) -> list[TtTrack]:
        """New tracks from the chosen detections, in their order."""
        if not len(chosen):
            return []
        means, covs = kalman.initiate(xyxy_to_state(dets.rows[chosen, :4], False))
        tracks = []
        for k, j in enumerate(chosen.tolist()):
            track = TtTrack(self.table, dets.rows[j], means[k], covs[k], dets.score32[j])
            blend_embeddings([track], [dets.embeddings[j]], 0.0)
            track.track_id = next(self._ids)
            track.state = TrackState.TRACKED if self.config.min_track_len <= 1 else TrackState.NEW
            track.is_activated = self.frame_id == 1 or track.state == TrackState.TRACKED
            track.frame_id = track.start_frame = self.frame_id
            tracks.append(track)
        self.table.remember(_rows(tracks), self.frame_id, state_to_xyxy(means, False), True)
        return tracks

    def _take(self, tracks: list, dets: Detections, pairs) -> None:
        """Each matched track takes its detection: a tracked (or new) one updates its corner velocities and may be
        confirmed, a lost one is found again (same identity)."""
        if not pairs:
            return
        matched, cols = [tracks[i] for i, _ in pairs], [j for _, j in pairs]
        rows, table = _rows(matched), self.table
        det_rows, box32 = dets.rows[cols], dets.box32[cols]
        measured = xyxy_to_state(det_rows[:, :4], False)
        mean, cov = kalman.update(table.mean[rows], table.cov[rows], measured, confidence=det_rows[:, 4])
        table.mean[rows], table.cov[rows] = mean, cov
        table.prev_score[rows], table.score[rows] = table.score[rows], dets.score32[cols]
        for track, (score, cls, index) in zip(matched, det_rows[:, 4:7].tolist()):
            track.score, track.cls, track.det_index, track.frame_id = score, cls, int(index), self.frame_id
        if self.config.with_reid:  # a confident match keeps more of the track's past appearance
            keep = SMOOTHING + (1 - SMOOTHING) * (1 - det_rows[:, 4])
            blend_embeddings(matched, [dets.embeddings[j] for j in cols], keep)
        advancing = np.array([t.state in (TrackState.TRACKED, TrackState.NEW) for t in matched])
        found = np.flatnonzero(~advancing)
        if len(found):
            table.remember(rows[found], self.frame_id, state_to_xyxy(mean[found], False), True)
            table.length[rows[found]] = 0
            for k in found:
                matched[k].state, matched[k].is_activated = TrackState.TRACKED, True
        if len(found) < len(matched):
            chosen = np.flatnonzero(advancing)
            if len(found):
                matched, rows, box32 = [matched[k] for k in chosen], rows[chosen], box32[chosen]
            _advance(table, matched, rows, box32, self.frame_id, self.config.min_track_len)

    def _boxes(self, tracks: list) -> np.ndarray:
        """(n, 4) x1, y1, x2, y2 of the tracks' Kalman estimates (tracks.boxes_xyxy, from the table)."""
        return state_to_xyxy(self.table.mean[_rows(tracks)], False)

    def _warp(self, tracks: list, affine: np.ndarray) -> None:
        """Move the tracks' states by a camera-motion affine (none when it is the identity)."""
        if tracks and not np.allclose(affine, np.eye(2, 3)):
            rows = _rows(tracks)
            self.table.mean[rows], self.table.cov[rows] = kalman.warp(
                self.table.mean[rows], self.table.cov[rows], affine
            )

    def _predict(self, tracks: list) -> None:
        """Every track one frame ahead; one not being seen keeps its size (tracks.predict_all's rule)."""
        if not tracks:
            return
        rows = _rows(tracks)
        mean = self.table.mean[rows]
        mean[np.array([t.state != TrackState.TRACKED for t in tracks]), 6:8] = 0
        self.table.mean[rows], self.table.cov[rows] = kalman.predict(mean, self.table.cov[rows])

    def _cost(self, tracks: list, dets: Detections) -> np.ndarray:
        """(n, m) float32 cost of each track-detection pair (the module docstring's terms, clipped to [0, 1])."""
        if not tracks or not len(dets):
            return np.ones((len(tracks), len(dets)), np.float32)
        rows = _rows(tracks)
        track_boxes = self._boxes(tracks).astype(np.float32)
        iou = iou32(track_boxes, dets.box32)
        cost = 1.0 - _vertical_iou(track_boxes, dets.box32) * iou
        if self.config.with_reid:  # a pair without an embedding on either side is judged on motion alone
            appearance = cosine_distance([t.smoothed for t in tracks], dets.embeddings)
            mixed = self.config.iou_weight * cost + self.config.reid_weight * appearance
            cost = np.where(np.isnan(appearance), cost, mixed)
        current = self.table.score[rows]
        projected = current + (current - self.table.prev_score[rows])
        cost += self.config.conf_weight * np.abs(projected[:, None] - dets.score32[None])
        supported = iou > SUPPORT_IOU
        pairs = np.nonzero(supported)
        if len(pairs[0]):
            cost[pairs] += self.config.angle_weight * self._angle_cost(rows, dets, pairs)
        cost[~supported] = 1.0
        return _clip01(cost)

    def _angle_cost(self, track_rows: np.ndarray, dets: Detections, pairs) -> np.ndarray:
        """For the (track, detection) index pairs: the mean over the four corners of the angle (of pi) between the
        corner's velocity and the way from its box DELTA_T frames back to the detection's, times the score."""
        rows, cols = pairs
        back, wide = self.table.back(track_rows, self.frame_id, STEPS_BACK[-1:])
        back, wide = back[0][rows], wide[0]  # float64 only if one of the pairs' boxes is, as the reference's
        ways = dets.box32[cols] - (back if wide[rows].any() else back.astype(np.float32))
        dx, dy = ways[:, CORNER_X], ways[:, CORNER_Y]
        norm = np.sqrt(dx * dx + dy * dy) + 1e-5
        dx /= norm
        dy /= norm
        velocity = self.table.velocity[track_rows[rows]]
        dot = velocity[:, :, 0] * dx + velocity[:, :, 1] * dy
        angle = np.abs(np.arccos(_clip_unit(dot))).sum(axis=-1) / 4 / np.pi  # the mean over the corners
        return angle * dets.score32[cols]

    def _allowed_births(self, active: list, dets: Detections) -> np.ndarray:
        """Track-aware initialisation: which leftover detections may start a track (score above new_track_thresh,
        IoU <= tai_thr with every active track and with every stronger detection allowed before it)."""
        allow = dets.score32 > self.config.new_track_thresh
        tai = self.config.tai_thr
        if active and allow.any():  # a track listed twice (tracked and activated) counts once: same box
            track_boxes = state_to_xyxy(self.table.mean[np.unique(_rows(active))], False).astype(np.float32)
            chosen = np.flatnonzero(allow)
            allow[chosen] = iou32(dets.box32[chosen], track_boxes).max(axis=1) <= tai
        candidates = np.array([i for i in dets.score32.argsort()[::-1] if allow[i]], np.int64)  # strongest first
        if len(candidates) < 2:
            return allow
        among = iou32(dets.box32[candidates], dets.box32[candidates])
        for k, i in enumerate(candidates):
            if allow[i]:
                beaten = among[k] > tai
                beaten[k] = False
                allow[candidates[beaten]] = False
        return allow

    def _merge(self, activated: list, refound: list, lost: list, removed: list) -> None:
        """The tracked and lost lists for the next frame (ByteTrack's bookkeeping, in the reference's order)."""
        tracked = [t for t in self.tracked if t.state == TrackState.TRACKED]
        for extra in (activated, refound):
            ids = {t.track_id for t in tracked}
            tracked += [t for t in extra if t.track_id not in ids]
        ids = {t.track_id for t in tracked}
        still_lost = [t for t in self.lost if t.track_id not in ids] + lost
        gone = set(self.removed_ids)
        still_lost = [t for t in still_lost if t.track_id not in gone]
        self.tracked, self.lost = drop_duplicates(tracked, still_lost, _iou_cost32, self._boxes)
        self.removed_ids.extend(t.track_id for t in removed)


def _advance(
    table: TrackTable, tracks: list, rows: np.ndarray, boxes: np.ndarray, frame_id: int, min_track_len: int
) -> None:
    """Tracked (or new) tracks' float32 detection boxes of this frame: their history, corner velocities (the mean
    over 1..DELTA_T frames back of the unit step of each corner, over the frames apart) and confirmation. A step
    from a float32 box is worked out in float32, from a float64 one (a Kalman estimate) in float64, as in the
    reference."""
    table.length[rows] += 1
    table.remember(rows, frame_id, boxes, False)
    back, wide = table.back(rows, frame_id, STEPS_BACK)  # (DELTA_T, n, 4), (DELTA_T, n)
    # every step both ways (float32 for float32 boxes, float64 for Kalman ones), each row then takes its own
    narrow_steps = _unit_steps(boxes[None] - back.astype(np.float32))
    wide_steps = _unit_steps(boxes[None] - back) if wide.any() else None
    steps = narrow_steps / FRAMES_APART.astype(np.float32)
    if wide_steps is not None:
        # float32 + float32 rounds as float64's sum rounded to float32 (53 >= 2 * 24 + 2 bits): the same bits
        steps = np.where(wide[:, :, None, None], wide_steps / FRAMES_APART, steps)
    velocity = steps[0].astype(np.float32)  # summed in the frames' order, as the reference adds them up
    for k in range(1, DELTA_T):
        velocity += steps[k]
    table.velocity[rows] = velocity / np.float32(DELTA_T)
    confirmed = (table.length[rows] + 1 >= min_track_len).tolist()
    for track, sure in zip(tracks, confirmed):
        if sure and track.state != TrackState.TRACKED:  # a tracked track is activated already
            track.state, track.is_activated = TrackState.TRACKED, True


def _unit_steps(steps: np.ndarray) -> np.ndarray:
    """(..., 4, 2) unit vectors of each corner's step of (..., 4) x1, y1, x2, y2 box steps, in their dtype."""
    dx, dy = steps[..., CORNER_X], steps[..., CORNER_Y]
    norm = np.sqrt(dx * dx + dy * dy) + 1e-5
    return np.stack([dx / norm, dy / norm], axis=-1)


def iou32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU (n, m) of float32 x1, y1, x2, y2 boxes, in float32 and the reference's order of operations (TrackTrack's
    thresholds are met or missed on the last bit)."""
    w = np.maximum(np.minimum(a[:, None, 2], b[:, 2]) - np.maximum(a[:, None, 0], b[:, 0]), 0)
    h = np.maximum(np.minimum(a[:, None, 3], b[:, 3]) - np.maximum(a[:, None, 1], b[:, 1]), 0)
    inter = w * h
    union = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) + ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))[:, None] - inter
    return inter / (union + 1e-7)


def _vertical_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) overlap of the boxes' vertical extents over their union (HMIoU's factor: an object nearer the camera
    reaches lower in the frame, so boxes at other depths overlap less vertically)."""
    overlap = np.minimum(a[:, 3:4], b[:, 3:4].T) - np.maximum(a[:, 1:2], b[:, 1:2].T)
    union = np.maximum(a[:, 3:4], b[:, 3:4].T) - np.minimum(a[:, 1:2], b[:, 1:2].T)
    return _clip01(overlap / (union + 1e-9))


def iterative_assign(cost: np.ndarray, threshold: float, step: float) -> tuple[list, list[int], list[int]]:
    """Pairs (row, column) that are each other's cheapest at a cost below threshold, made in rounds, the threshold
    lowered by step after each round; then the rows and columns left."""
    cost = cost.copy()
    made_rows, made_cols = [], []
    rows = np.arange(cost.shape[0])
    while cost.size:
        best_col = cost.argmin(axis=1)
        mutual = cost.argmin(axis=0)[best_col] == rows
        new = np.flatnonzero(mutual & (cost[rows, best_col] < threshold))
        if not len(new):
            break
        made_rows.append(new)
        made_cols.append(best_col[new])
        cost[new, :] = np.inf
        cost[:, best_col[new]] = np.inf
        threshold -= step
    rows_free, cols_free = np.ones(cost.shape[0], bool), np.ones(cost.shape[1], bool)
    if not made_rows:
        return [], rows.tolist(), np.flatnonzero(cols_free).tolist()
    made_rows, made_cols = np.concatenate(made_rows), np.concatenate(made_cols)
    rows_free[made_rows] = cols_free[made_cols] = False
    pairs = list(zip(made_rows.tolist(), made_cols.tolist()))
    return pairs, np.flatnonzero(rows_free).tolist(), np.flatnonzero(cols_free).tolist()


def _clip_unit(x: np.ndarray) -> np.ndarray:
    """x clipped to [-1, 1] in its dtype (np.clip's result)."""
    return np.minimum(np.maximum(x, -1), 1)


def _clip01(x: np.ndarray) -> np.ndarray:
    """x clipped to [0, 1] in its dtype (np.clip's result, two ufuncs cheaper than its wrapper)."""
    return np.minimum(np.maximum(x, 0), 1)


def _iou_cost32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 - IoU of two box arrays in float32 (the reference's duplicate test)."""
    return 1 - iou32(a.astype(np.float32), b.astype(np.float32))


def _lost_earlier(pool: list, lost: list) -> list:
    """The tracks of pool still lost after this frame's matching that were already lost before it (not in lost, the
    ones this frame lost)."""
    lost_ids = {t.track_id for t in lost}
    return [t for t in pool if t.state == TrackState.LOST and t.track_id not in lost_ids]
