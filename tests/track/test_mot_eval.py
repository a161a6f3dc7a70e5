"""Scoring MOTChallenge files with TrackEval: perfect tracks score 1, a swap of identities is counted, ignored
ground truth does not make false positives, bad files are one line."""

import numpy as np
import pytest

from utils.errors import MetricsError
from utils.track.mot_eval import read_mot, score_tracks

pytest.importorskip("trackeval")


def _gt(frames=20):
    """Two objects moving apart over `frames` frames: rows frame, id, x, y, w, h, 1, class, visibility."""
    rows = []
    for f in range(1, frames + 1):
        rows.append([f, 1, 10 + 2 * f, 10, 20, 20, 1, 1, 1.0])
        rows.append([f, 2, 200 - 2 * f, 50, 20, 20, 1, 1, 1.0])
    return np.array(rows, float)


def _as_tracks(gt, ids):
    return np.c_[gt[:, 0], ids, gt[:, 2:6], np.ones(len(gt)), -np.ones((len(gt), 3))]


def test_perfect_tracks():
    gt = _gt()
    s = score_tracks(gt, _as_tracks(gt, gt[:, 1] + 10))  # identity numbers need not be the same
    assert s.hota == pytest.approx(1) and s.mota == pytest.approx(1) and s.idf1 == pytest.approx(1)
    assert s.id_switches == 0 and s.false_positives == 0 and s.misses == 0 and s.gt_ids == s.track_ids == 2


def test_an_identity_swap_is_counted():
    gt = _gt()
    ids = gt[:, 1].copy()
    late = gt[:, 0] > 10
    ids[late] = 3 - ids[late]  # from frame 11 on the two tracks exchange objects
    s = score_tracks(gt, _as_tracks(gt, ids))
    assert s.id_switches == 2 and s.mota == pytest.approx(1 - 2 / 40)
    assert s.idf1 == pytest.approx(0.5) and s.hota < 0.8


def test_misses_and_false_positives():
    gt = _gt()
    tracks = _as_tracks(gt, gt[:, 1])[gt[:, 1] == 1]  # object 2 never tracked
    extra = np.array([[1, 9, 300, 300, 10, 10, 1, -1, -1, -1]], float)
    s = score_tracks(gt, np.r_[tracks, extra])
    assert s.misses == 20 and s.false_positives == 1 and s.idf1 < 0.7


def test_ignored_ground_truth_is_neither_missed_nor_a_false_positive():
    gt = _gt()
    gt[gt[:, 1] == 2, 8] = 0.1  # object 2 barely visible throughout
    tracks = _as_tracks(gt, gt[:, 1])
    loose = score_tracks(gt, tracks)
    strict = score_tracks(gt, tracks[tracks[:, 1] == 1], min_visibility=0.25)
    assert loose.gt_ids == 2 and strict.gt_ids == 1 and strict.misses == 0
    assert score_tracks(gt, tracks, min_visibility=0.25).false_positives == 0  # its track is dropped, not counted


def test_read_mot(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("1,1,10,20,30,40,0.9,-1,-1,-1\n\n2,1,11,20,30,40,0.8,-1,-1,-1\n")
    rows = read_mot(path)
    assert rows.shape == (2, 10) and rows[1, 2] == 11
    path.write_text("1,1,10,20,30\n")
    with pytest.raises(MetricsError, match=r"t.txt:1 needs at least 6"):
        read_mot(path)
    path.write_text("1,1,a,20,30,40\n")
    with pytest.raises(MetricsError, match="not a MOTChallenge row"):
        read_mot(path)
    with pytest.raises(MetricsError, match="could not be read"):
        read_mot(tmp_path / "absent.txt")
