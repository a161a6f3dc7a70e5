"""TrackTrack's per-track numbers held as one row each of a few arrays (Kalman state, scores, corner velocities, the
boxes of the last frames), so that a frame's work on all tracks is a few array operations rather than a Python
loop over tracks and a stack of their small arrays."""

import numpy as np

DELTA_T = 3  # frames over which a track's corner velocities are averaged
RING = DELTA_T + 1  # boxes of this many frames are remembered: slot frame % RING holds a frame's box
NEVER = -(2**62)  # the frame of a slot not yet filled (no frame, not even one before the first, has it)


class TrackTable:
    """Rows of tracks: mean (8,) and covariance (8, 8), score and previous score (float32, as the reference holds
    them), corner velocities (4, 2), tracklet length, and each track's boxes of its last RING frames seen, with
    whether each is a Kalman estimate (float64) rather than a detection's float32 box (the reference works out a step
    in the dtype of the box it starts from)."""

    def __init__(self, capacity: int = 64):
        self.used = 0
        self.mean = np.zeros((capacity, 8))
        self.cov = np.zeros((capacity, 8, 8))
        self.score = np.zeros(capacity, np.float32)
        self.prev_score = np.zeros(capacity, np.float32)
        self.velocity = np.zeros((capacity, 4, 2), np.float32)
        self.length = np.zeros(capacity, np.int64)
        self.boxes = np.zeros((capacity, RING, 4))
        self.frames = np.full((capacity, RING), NEVER, np.int64)
        self.wide = np.zeros((capacity, RING), bool)
        self.last = np.zeros((capacity, 4))  # the box last remembered, whatever its frame
        self.last_wide = np.zeros(capacity, bool)

    _FIELDS = ("mean", "cov", "score", "prev_score", "velocity", "length", "boxes", "frames", "wide", "last")

    def add(self, mean: np.ndarray, cov: np.ndarray, score: np.float32) -> int:
        """A new row (the arrays double when full); its index."""
        if self.used == len(self.mean):
            self._resize(np.arange(self.used), 2 * len(self.mean))
        row = self.used
        self.used += 1
        self.mean[row], self.cov[row], self.score[row] = mean, cov, score
        self.prev_score[row], self.velocity[row], self.length[row], self.frames[row] = score, 0, 0, NEVER
        return row

    def compact(self, tracks: list) -> None:
        """Keep only these tracks' rows (renumbered from 0), when the rows of gone tracks outnumber them."""
        if self.used <= 2 * len(tracks) + 64:
            return
        rows = np.array([t.row for t in tracks], np.int64)
        self._resize(rows, max(64, 2 * len(rows)))
        for new, track in enumerate(tracks):
            track.row = new

    def _resize(self, rows: np.ndarray, capacity: int) -> None:
        for name in self._FIELDS + ("last_wide",):
            old = getattr(self, name)
            new = np.zeros((capacity,) + old.shape[1:], old.dtype)
            new[: len(rows)] = old[rows]
            setattr(self, name, new)
        self.used = len(rows)

    def remember(self, rows: np.ndarray, frame_id: int, boxes: np.ndarray, wide: bool) -> None:
        """The rows' boxes of this frame (wide: Kalman estimates rather than float32 detection boxes)."""
        slot = frame_id % RING
        self.boxes[rows, slot] = self.last[rows] = boxes
        self.frames[rows, slot] = frame_id
        self.wide[rows, slot] = self.last_wide[rows] = wide

    def back(self, rows: np.ndarray, frame_id: int, dts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(len(dts), n, 4) boxes of frames frame_id - dt of the rows, else their last box; and (len(dts), n) whether
        each is a Kalman one. At most DELTA_T boxes are remembered after a frame within DELTA_T of now, so a ring of
        RING slots never loses one that is asked for."""
        frames = frame_id - dts
        slots = frames % RING
        hit = (self.frames[rows][:, slots] == frames).T  # (len(dts), n)
        boxes = np.where(hit[:, :, None], self.boxes[rows][:, slots].transpose(1, 0, 2), self.last[rows])
        return boxes, np.where(hit, self.wide[rows][:, slots].T, self.last_wide[rows])
