"""Scores tracks against ground truth, both in MOTChallenge's text format, with TrackEval's HOTA, CLEAR (MOTA, ID
switches) and Identity (IDF1) metrics, as the MOTChallenge benchmark computes them for one sequence.

Rows are `frame,id,x,y,w,h,conf,...`. Ground-truth rows whose 7th column (MOTChallenge's 'consider' flag) is 0, or
whose visibility (9th column, when present) is below min_visibility, are ignored: a track box that overlaps one of
them (IoU >= 0.5, one-to-one) is dropped rather than counted as a false positive, as MOTChallenge does for its
distractors. Tracking is scored class-agnostic.
"""

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.errors import MetricsError

MAX_MOT_BYTES = 512 << 20  # ~8 million rows: hours of video with dozens of objects; larger is not a track file
MAX_LINE_BYTES = 4096  # a row is ten numbers; a longer line is not a MOTChallenge row
MAX_MOT_NUMBER = 2**31 - 1  # frames and ids are whole numbers up to this (int32, as MOTChallenge's tools read them)
BLOCK_ROWS = 65536  # rows parsed into one float array at a time: memory stays at the rows' own size
MAX_PAIRS = 1 << 27  # ground-truth x track box pairs over all frames: 1 GiB of IoU matrices
MAX_ID_MATRIX_BYTES = 1 << 30  # what TrackEval's id-by-id matrices may take
MATCH_IOU = 0.5


@dataclass(frozen=True)
class TrackScores:
    hota: float
    deta: float
    assa: float
    mota: float
    idf1: float
    id_switches: int
    false_positives: int
    misses: int
    gt_ids: int
    track_ids: int

    def line(self) -> str:
        return (
            f"HOTA {100 * self.hota:.2f}  DetA {100 * self.deta:.2f}  AssA {100 * self.assa:.2f}  "
            f"MOTA {100 * self.mota:.2f}  IDF1 {100 * self.idf1:.2f}  IDsw {self.id_switches}  "
            f"FP {self.false_positives}  FN {self.misses}  GT ids {self.gt_ids}  track ids {self.track_ids}"
        )

    def columns(self) -> dict[str, float]:
        """The table's columns (TABLE_COLUMNS), the shares as percentages."""
        shares = (self.hota, self.deta, self.assa, self.mota, self.idf1)
        counts = (self.id_switches, self.false_positives, self.misses, self.gt_ids, self.track_ids)
        return dict(zip(TABLE_COLUMNS, [100 * v for v in shares] + [float(v) for v in counts]))


TABLE_COLUMNS = ("HOTA", "DetA", "AssA", "MOTA", "IDF1", "IDsw", "FP", "FN", "GT ids", "track ids")
COUNT_COLUMNS = frozenset(TABLE_COLUMNS[5:])


def mean_columns(scores: list[TrackScores]) -> dict[str, float]:
    """Each column's mean over sequences (every sequence weighs the same, as in a paper's per-sequence mean; not
    TrackEval's COMBINED row, which pools the detections of all sequences)."""
    return {c: float(np.mean([s.columns()[c] for s in scores])) for c in TABLE_COLUMNS}


def format_table(rows: list[tuple[str, dict[str, float]]], whole_counts: bool = True) -> str:
    """A text table, a row per (name, columns) and a column per TABLE_COLUMNS (percentages with 2 decimals; counts
    as whole numbers, or with 2 decimals when they are means)."""
    width = max([len("tracker")] + [len(name) for name, _ in rows])
    sizes = [max(len(c), 6) for c in TABLE_COLUMNS]
    lines = ["  ".join([f"{'tracker':<{width}}"] + [f"{c:>{n}}" for c, n in zip(TABLE_COLUMNS, sizes)])]
    for name, values in rows:
        cells = [
            f"{values[c]:>{n}.0f}" if c in COUNT_COLUMNS and whole_counts else f"{values[c]:>{n}.2f}"
            for c, n in zip(TABLE_COLUMNS, sizes)
        ]
        lines.append("  ".join([f"{name:<{width}}", *cells]))
    return "\n".join(lines)


def sequence_names(gt_folder: str | Path) -> list[str]:
    """The sequences of a MOTChallenge-style folder: each subfolder holding gt/gt.txt, in name order."""
    names = sorted(d.name for d in Path(gt_folder).iterdir() if (d / "gt" / "gt.txt").is_file())
    if not names:
        raise MetricsError(f"{gt_folder} holds no sequence (a folder <name>/gt/gt.txt, as MOTChallenge lays them out)")
    return names


def tracker_files(track_folder: str | Path, sequences: list[str]) -> list[Path]:
    """<track_folder>/<sequence>.txt for every sequence (as detect.py names its tracks/ files); MetricsError
    naming the first missing one."""
    files = [Path(track_folder) / f"{name}.txt" for name in sequences]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise MetricsError(
            f"{missing[0]} is missing: a tracker folder needs a <sequence>.txt for each of the {len(files)} "
            f"sequences of the ground truth ({len(missing)} missing)"
        )
    return files


def _open_regular(path: Path):
    """The file opened for reading, only if it is a regular file: a FIFO would block the read forever and a device
    (/dev/zero) never ends. Opened without blocking, then checked on the open file, so a swap cannot slip in."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise MetricsError(f"{path} is not a regular file (a FIFO, device or socket cannot be a MOTChallenge file)")
    if info.st_size > MAX_MOT_BYTES:
        os.close(fd)
        raise MetricsError(f"{path} is {info.st_size} bytes: larger than a MOTChallenge file can be ({MAX_MOT_BYTES})")
    return os.fdopen(fd, "rb")


def _parse_line(line: bytes, where: str, min_columns: int) -> list[float]:
    try:
        values = [float(v) for v in line.decode("utf-8").replace(" ", "").split(",")]
    except (ValueError, UnicodeDecodeError):
        raise MetricsError(f"{where} is not a MOTChallenge row (comma-separated numbers)") from None
    if len(values) < min_columns or not np.isfinite(values).all():
        raise MetricsError(f"{where} needs at least {min_columns} finite comma-separated numbers")
    return values[:10] + [-1.0] * (10 - min(len(values), 10))


def _read_rows(file, path: Path, min_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows (n, 10) and the line number of each; at most MAX_MOT_BYTES are read, whatever the file grew to."""
    blocks, numbers, rows, left = [], [], [], MAX_MOT_BYTES
    for n in range(1, MAX_MOT_BYTES + 2):
        line = file.readline(MAX_LINE_BYTES + 1)
        if not line:
            break
        left -= len(line)
        if left < 0 or len(line) > MAX_LINE_BYTES:
            what = f"is over {MAX_MOT_BYTES} bytes" if left < 0 else f":{n} is over {MAX_LINE_BYTES} bytes long"
            raise MetricsError(f"{path}{what}: not a MOTChallenge file")
        if line.strip():
            rows.append(_parse_line(line, f"{path}:{n}", min_columns))
            numbers.append(n)
        if len(rows) == BLOCK_ROWS:
            blocks.append(np.array(rows, np.float64))
            rows = []
    blocks.append(np.array(rows, np.float64).reshape(-1, 10))
    return np.concatenate(blocks), np.array(numbers, np.int64)


def read_mot(path: str | Path, min_columns: int = 6) -> np.ndarray:
    """The rows of a MOTChallenge text file as a float array (n, 10), checked (check_rows); MetricsError if
    unusable."""
    path = Path(path)
    try:
        with _open_regular(path) as file:
            rows, numbers = _read_rows(file, path, min_columns)
    except OSError as e:
        raise MetricsError(f"{path} could not be read: {e.strerror or e}") from None
    check_rows(rows, str(path), numbers)
    return rows


def check_rows(rows: np.ndarray, where: str, line_numbers: np.ndarray | None = None) -> None:
    """MetricsError unless every frame and id is a whole number from 0 to MAX_MOT_NUMBER and no id appears twice in
    one frame (ground truth and tracks alike): a fractional frame would be scored twice, a huge or fractional id
    merged with another, and one id given to every object in a frame would score as perfect association."""

    def at(i: int) -> str:
        return f"{where}:{line_numbers[i]}" if line_numbers is not None else f"{where} row {i + 1}"

    for column, what in ((0, "frame"), (1, "id")):
        values = rows[:, column]
        bad = np.flatnonzero((values != np.round(values)) | (values < 0) | (values > MAX_MOT_NUMBER))
        if len(bad):
            raise MetricsError(
                f"{at(bad[0])}: {what} {values[bad[0]]:g} is not a whole number from 0 to {MAX_MOT_NUMBER}"
            )
    order = np.lexsort((rows[:, 1], rows[:, 0]))
    pairs = rows[order][:, :2]
    same = np.flatnonzero((pairs[1:] == pairs[:-1]).all(axis=1))
    if len(same):
        first, second = sorted(order[same[0] : same[0] + 2])
        frame, track = pairs[same[0]].astype(np.int64)
        raise MetricsError(
            f"{at(second)}: id {track} appears twice in frame {frame} (also at {at(first)}): an id is one object "
            "per frame"
        )


def _xyxy(rows: np.ndarray) -> np.ndarray:
    return np.concatenate([rows[:, 2:4], rows[:, 2:4] + rows[:, 4:6]], axis=1)


def _by_frame(rows: np.ndarray, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rows sorted by frame once, and where each of frames begins and ends in them: each frame's rows are a slice,
    so grouping takes time in proportion to the rows, not frames x rows."""
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    return rows, np.searchsorted(rows[:, 0], frames, "left"), np.searchsorted(rows[:, 0], frames, "right")


def _frame_data(gt: np.ndarray, tracks: np.ndarray, min_visibility: float):
    """Per frame: kept ground-truth rows and track rows (those overlapping an ignored ground-truth row removed)."""
    from scipy.optimize import linear_sum_assignment  # imported when scoring: an unusable file is refused at once

    from utils.track.matching import box_iou

    frames = np.union1d(gt[:, 0], tracks[:, 0])
    gt, g_start, g_end = _by_frame(gt, frames)
    tracks, t_start, t_end = _by_frame(tracks, frames)
    ignored = (gt[:, 6] == 0) | ((gt[:, 8] >= 0) & (gt[:, 8] < min_visibility))
    for i, f in enumerate(frames.astype(np.int64)):
        g, t, ign = gt[g_start[i] : g_end[i]], tracks[t_start[i] : t_end[i]], ignored[g_start[i] : g_end[i]]
        if ign.any() and len(t):
            iou = box_iou(_xyxy(t), _xyxy(g[ign]))
            r, c = linear_sum_assignment(-iou)
            t = np.delete(t, r[iou[r, c] >= MATCH_IOU], axis=0)
        yield f, g[~ign], t


def _pair_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each row of a with the same row of b (both (n, 4) x1, y1, x2, y2)."""
    w = (np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0])).clip(0)
    h = (np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1])).clip(0)
    inter = w * h
    area = (a[:, 2] - a[:, 0]).clip(0) * (a[:, 3] - a[:, 1]).clip(0) + (b[:, 2] - b[:, 0]).clip(0) * (
        b[:, 3] - b[:, 1]
    ).clip(0)
    return inter / np.maximum(area - inter, 1e-9)


def _similarities(gt_rows: list[np.ndarray], track_rows: list[np.ndarray]) -> list[np.ndarray]:
    """Each frame's IoU matrix (ground truth x tracks), computed for every frame's pairs in one pass."""
    n_gt, n_tr = np.array([len(g) for g in gt_rows]), np.array([len(t) for t in track_rows])
    pairs = n_gt * n_tr
    if pairs.sum() > MAX_PAIRS:
        raise MetricsError(
            f"{pairs.sum()} ground-truth x track box pairs over {len(pairs)} frames are more than can be scored "
            f"({MAX_PAIRS}; TrackEval holds every frame's IoU matrix at once)"
        )
    frame = np.repeat(np.arange(len(pairs)), pairs)  # the frame of each pair
    k = np.arange(len(frame)) - np.repeat(np.cumsum(pairs) - pairs, pairs)  # the pair's index within its frame
    g_index = np.repeat(np.cumsum(n_gt) - n_gt, pairs) + k // np.maximum(n_tr, 1)[frame]
    t_index = np.repeat(np.cumsum(n_tr) - n_tr, pairs) + k % np.maximum(n_tr, 1)[frame]
    boxes_gt, boxes_tr = (
        _xyxy(np.concatenate([r[:, :6] for r in rows] + [np.zeros((0, 6))])) for rows in (gt_rows, track_rows)
    )
    iou = _pair_iou(boxes_gt[g_index], boxes_tr[t_index])
    return [m.reshape(a, b) for m, a, b in zip(np.split(iou, np.cumsum(pairs)[:-1]), n_gt, n_tr)]


def _check_id_counts(gt_ids: int, track_ids: int) -> None:
    """TrackEval's Identity metric pairs every id with every other in square matrices of (gt + track ids) a side
    (and solves an assignment on them), HOTA keeps 20 gt x track id matrices: too many ids would exhaust memory."""
    need = 8 * max(3 * (gt_ids + track_ids) ** 2, 22 * gt_ids * track_ids)
    if need > MAX_ID_MATRIX_BYTES:
        raise MetricsError(
            f"{gt_ids} ground-truth ids and {track_ids} track ids are too many to score as one sequence: TrackEval's "
            f"id-by-id matrices would take {need / 2**30:.1f} GiB (at most {MAX_ID_MATRIX_BYTES / 2**30:.0f} GiB)"
        )


def _sequence(gt: np.ndarray, tracks: np.ndarray, min_visibility: float) -> dict:
    """TrackEval's per-sequence data: ids renumbered 0.. and IoU similarity per frame."""
    kept = list(_frame_data(gt, tracks, min_visibility))
    gt_rows, track_rows = [g for _, g, _ in kept], [t for _, _, t in kept]
    gt_ids = [g[:, 1].astype(np.int64) for g in gt_rows]
    tr_ids = [t[:, 1].astype(np.int64) for t in track_rows]
    all_gt = np.unique(np.concatenate(gt_ids)) if gt_ids else np.zeros(0, np.int64)
    all_tr = np.unique(np.concatenate(tr_ids)) if tr_ids else np.zeros(0, np.int64)
    _check_id_counts(len(all_gt), len(all_tr))
    return {
        "num_timesteps": len(gt_ids),
        "num_gt_ids": len(all_gt),
        "num_tracker_ids": len(all_tr),
        "num_gt_dets": int(sum(len(g) for g in gt_ids)),
        "num_tracker_dets": int(sum(len(t) for t in tr_ids)),
        "gt_ids": [np.searchsorted(all_gt, g) for g in gt_ids],
        "tracker_ids": [np.searchsorted(all_tr, t) for t in tr_ids],
        "similarity_scores": _similarities(gt_rows, track_rows),
    }


def score_tracks(gt: np.ndarray, tracks: np.ndarray, min_visibility: float = 0.0) -> TrackScores:
    """HOTA (mean over IoU thresholds 0.05..0.95), MOTA, IDF1 and ID switches of tracks against ground truth."""
    try:
        from trackeval.metrics import CLEAR, HOTA, Identity  # TrackEval is needed only for scoring
    except ImportError:
        raise MetricsError("scoring tracks needs TrackEval: pip install trackeval") from None
    check_rows(gt, "ground truth")
    check_rows(tracks, "tracks")
    data = _sequence(gt, tracks, min_visibility)
    hota = HOTA().eval_sequence(data)
    clear = CLEAR({"THRESHOLD": MATCH_IOU, "PRINT_CONFIG": False}).eval_sequence(data)
    identity = Identity({"THRESHOLD": MATCH_IOU, "PRINT_CONFIG": False}).eval_sequence(data)
    return TrackScores(
        hota=float(np.mean(hota["HOTA"])),
        deta=float(np.mean(hota["DetA"])),
        assa=float(np.mean(hota["AssA"])),
        mota=float(clear["MOTA"]),
        idf1=float(identity["IDF1"]),
        id_switches=int(clear["IDSW"]),
        false_positives=int(clear["CLR_FP"]),
        misses=int(clear["CLR_FN"]),
        gt_ids=data["num_gt_ids"],
        track_ids=data["num_tracker_ids"],
    )
