"""Scoring MOTChallenge files with TrackEval: perfect tracks score 1, a swap of identities is counted, ignored
ground truth does not make false positives, bad files are one line."""

import os
from pathlib import Path

import numpy as np
import pytest

from utils.errors import MetricsError
from utils.track import mot_eval
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


@pytest.mark.parametrize(
    "row, words",
    [
        ("1.5,1,10,20,30,40,1,1,1", "t.txt:2: frame 1.5 is not a whole number"),
        ("2,1.25,10,20,30,40,1,1,1", "t.txt:2: id 1.25 is not a whole number"),
        ("2,1e12,10,20,30,40,1,1,1", "t.txt:2: id 1e\\+12 is not a whole number from 0 to 2147483647"),
        ("2,-3,10,20,30,40,1,1,1", "t.txt:2: id -3 is not a whole number"),
        ("1,1,50,20,30,40,1,1,1", "t.txt:2: id 1 appears twice in frame 1 \\(also at .*t.txt:1\\)"),
    ],
)
def test_frames_and_ids_are_whole_and_an_id_is_one_object_per_frame(tmp_path, row, words):
    """A fractional frame would be scored twice, a huge or fractional id merged with another, and one id on every
    object of a frame would pass for perfect association (HOTA 100): each is one line naming the row."""
    path = tmp_path / "t.txt"
    path.write_text(f"1,1,10,20,30,40,1,1,1\n{row}\n")
    with pytest.raises(MetricsError, match=words):
        read_mot(path)


def test_arrays_are_checked_as_files_are():
    gt = _gt()
    one_id = _as_tracks(gt, np.ones(len(gt)))  # every object of every frame given id 1
    with pytest.raises(MetricsError, match="tracks row 2: id 1 appears twice in frame 1"):
        score_tracks(gt, one_id)
    gt[3, 0] = 2.5
    with pytest.raises(MetricsError, match="ground truth row 4: frame 2.5"):
        score_tracks(gt, one_id)


def test_rows_in_any_order_score_the_same():
    """Rows are grouped by frame once (sorted); a file whose rows are shuffled scores as the sorted one."""
    gt = _gt()
    ids = gt[:, 1].copy()
    ids[gt[:, 0] > 10] = 3 - ids[gt[:, 0] > 10]
    tracks = _as_tracks(gt, ids)
    order = np.random.default_rng(0).permutation(len(gt))
    assert score_tracks(gt[order], tracks[order[::-1]]) == score_tracks(gt, tracks)


def test_special_and_overlong_files_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # would block a plain open() forever
    with pytest.raises(MetricsError, match="fifo is not a regular file"):
        read_mot(fifo)
    if Path("/dev/zero").exists():
        with pytest.raises(MetricsError, match="/dev/zero is not a regular file"):
            read_mot("/dev/zero")
    long = tmp_path / "long.txt"
    long.write_text("1," * 5000 + "1\n")
    with pytest.raises(MetricsError, match="long.txt:1 is over 4096 bytes long"):
        read_mot(long)


def test_too_many_ids_or_pairs_are_refused_before_trackeval(monkeypatch):
    """TrackEval's Identity metric holds square matrices of (gt + track ids) a side: a valid file giving every row
    its own id would need tens of GB; it is refused, as is a frame with more box pairs than the bound."""
    frames = np.arange(1, 20001, dtype=float)
    gt = np.c_[frames, np.ones(len(frames)), np.full((len(frames), 4), 10.0), np.ones((len(frames), 3))]
    tracks = gt.copy()
    tracks[:, 1] = frames  # a fresh id every frame
    with pytest.raises(MetricsError, match="1 ground-truth ids and 20000 track ids are too many"):
        score_tracks(gt, tracks)
    monkeypatch.setattr(mot_eval, "MAX_PAIRS", 100)
    with pytest.raises(MetricsError, match="160 ground-truth x track box pairs over 20 frames"):
        score_tracks(_gt(), np.r_[_as_tracks(_gt(), _gt()[:, 1]), _as_tracks(_gt(), _gt()[:, 1] + 2)])
