"""Scores tracks against ground truth, both in MOTChallenge's text format, with TrackEval's HOTA, CLEAR (MOTA, ID
switches) and Identity (IDF1) metrics, as the MOTChallenge benchmark computes them for one sequence.

Rows are `frame,id,x,y,w,h,conf,...`. Ground-truth rows whose 7th column (MOTChallenge's 'consider' flag) is 0, or
whose visibility (9th column, when present) is below min_visibility, are ignored: a track box that overlaps one of
them (IoU >= 0.5, one-to-one) is dropped rather than counted as a false positive, as MOTChallenge does for its
distractors. Tracking is scored class-agnostic.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from utils.errors import MetricsError
from utils.track.matching import box_iou

MAX_MOT_BYTES = 512 << 20  # ~8 million rows: hours of video with dozens of objects; larger is not a track file
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


def read_mot(path: str | Path, min_columns: int = 6) -> np.ndarray:
    """The rows of a MOTChallenge text file as a float array (n, >= min_columns); MetricsError if unusable."""
    path = Path(path)
    try:
        size = os.stat(path).st_size
        if size > MAX_MOT_BYTES:
            raise MetricsError(f"{path} is {size} bytes: larger than a MOTChallenge file can be ({MAX_MOT_BYTES})")
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise MetricsError(f"{path} could not be read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise MetricsError(f"{path} is not a text file") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values = [float(v) for v in line.replace(" ", "").split(",")]
        except ValueError:
            raise MetricsError(f"{path}:{n} is not a MOTChallenge row (comma-separated numbers)") from None
        if len(values) < min_columns or not np.isfinite(values).all():
            raise MetricsError(f"{path}:{n} needs at least {min_columns} finite comma-separated numbers")
        rows.append(values[:10] + [-1.0] * (10 - min(len(values), 10)))
    return np.array(rows, np.float64).reshape(-1, 10)


def _xyxy(rows: np.ndarray) -> np.ndarray:
    return np.concatenate([rows[:, 2:4], rows[:, 2:4] + rows[:, 4:6]], axis=1)


def _frame_data(gt: np.ndarray, tracks: np.ndarray, min_visibility: float):
    """Per frame: kept ground-truth rows and track rows (those overlapping an ignored ground-truth row removed)."""
    ignored = (gt[:, 6] == 0) | ((gt[:, 8] >= 0) & (gt[:, 8] < min_visibility))
    frames = np.union1d(gt[:, 0], tracks[:, 0]).astype(int)
    for f in frames:
        g, t = gt[gt[:, 0] == f], tracks[tracks[:, 0] == f]
        ign = ignored[gt[:, 0] == f]
        if ign.any() and len(t):
            iou = box_iou(_xyxy(t), _xyxy(g[ign]))
            r, c = linear_sum_assignment(-iou)
            t = np.delete(t, r[iou[r, c] >= MATCH_IOU], axis=0)
        yield f, g[~ign], t


def _sequence(gt: np.ndarray, tracks: np.ndarray, min_visibility: float) -> dict:
    """TrackEval's per-sequence data: ids renumbered 0.. and IoU similarity per frame."""
    gt_ids, tr_ids, sims = [], [], []
    for _, g, t in _frame_data(gt, tracks, min_visibility):
        gt_ids.append(g[:, 1].astype(int))
        tr_ids.append(t[:, 1].astype(int))
        sims.append(box_iou(_xyxy(g), _xyxy(t)))
    all_gt = np.unique(np.concatenate(gt_ids)) if gt_ids else np.zeros(0, int)
    all_tr = np.unique(np.concatenate(tr_ids)) if tr_ids else np.zeros(0, int)
    return {
        "num_timesteps": len(gt_ids),
        "num_gt_ids": len(all_gt),
        "num_tracker_ids": len(all_tr),
        "num_gt_dets": int(sum(len(g) for g in gt_ids)),
        "num_tracker_dets": int(sum(len(t) for t in tr_ids)),
        "gt_ids": [np.searchsorted(all_gt, g) for g in gt_ids],
        "tracker_ids": [np.searchsorted(all_tr, t) for t in tr_ids],
        "similarity_scores": sims,
    }


def score_tracks(gt: np.ndarray, tracks: np.ndarray, min_visibility: float = 0.0) -> TrackScores:
    """HOTA (mean over IoU thresholds 0.05..0.95), MOTA, IDF1 and ID switches of tracks against ground truth."""
    try:
        from trackeval.metrics import CLEAR, HOTA, Identity  # TrackEval is needed only for scoring
    except ImportError:
        raise MetricsError("scoring tracks needs TrackEval: pip install trackeval") from None
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
