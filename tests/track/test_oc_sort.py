"""OC-SORT on scripted scenes: identities kept where the Kalman prediction alone would lose them (an object that
stops while hidden), crossings, and weak detections used only with use_byte."""

import dataclasses

import numpy as np
import pytest

from utils.track.bot_sort import create_tracker
from utils.track.config import load_tracker_config
from utils.track.oc_sort import OcSort


def _det(x, y, size=30.0, score=0.9):
    return [x, y, x + size, y + size, score, 0]


def _tracker(kind="ocsort", **changes):
    return create_tracker(dataclasses.replace(load_tracker_config(f"{kind}.yaml"), **changes))


def _stop_while_hidden(tracker):
    """An object moving right at 6 px a frame is hidden for 10 frames, during which it stops; a second object
    stands still. Returns the tracks of the 3 frames after it shows again."""
    for t in range(12):
        tracker.update(np.array([_det(20 + 6 * t, 50), _det(300, 200)]))
    for _ in range(10):
        tracker.update(np.array([_det(300, 200)]))
    return [tracker.update(np.array([_det(88, 50), _det(300, 200)])) for _ in range(3)]


def test_recovery_by_last_detection_keeps_the_identity_and_repairs_the_velocity():
    """OCR matches the track by its last detection (its prediction drifted 60 px on); ORU replays the hidden frames
    so the track does not keep drifting. ByteTrack, on the prediction alone, starts a new identity."""
    after = _stop_while_hidden(_tracker())
    for out in after:
        by_id = {int(r[4]): r for r in out}
        assert set(by_id) == {1, 2}
        assert by_id[1][0] == pytest.approx(88, abs=2.0)  # stays where the object is, not carried on by the drift
    byte_after = _stop_while_hidden(_tracker("bytetrack"))
    assert {int(r[4]) for r in byte_after[-1]} == {2, 3}


def test_crossing_objects_keep_their_identities():
    """Two boxes on nearly the same row move towards each other, overlap for several frames, then part."""
    tracker = _tracker()
    for t in range(40):
        out = tracker.update(np.array([_det(20 + 4 * t, 50, 20), _det(180 - 4 * t, 53, 20, score=0.8)]))
    by_id = {int(r[4]): r[0] for r in out}
    assert set(by_id) == {1, 2}
    assert by_id[1] > by_id[2]  # track 1 started on the left and is now on the right


@pytest.mark.parametrize("use_byte", [False, True])
def test_weak_detections_keep_a_track_only_with_use_byte(use_byte):
    tracker = _tracker(use_byte=use_byte)
    for t in range(5):
        tracker.update(np.array([_det(10 + 2 * t, 10)]))
    out = tracker.update(np.array([_det(20, 10, score=0.2)]))  # below track_high_thresh (0.25)
    assert [int(i) for i in out[:, 4]] == ([1] if use_byte else [])


def test_direction_is_measured_over_delta_t_frames():
    tracker = _tracker(delta_t=2)
    assert isinstance(tracker, OcSort)
    for t in range(6):
        tracker.update(np.array([_det(10 + 3 * t, 10 + 4 * t)]))
    (track,) = tracker.tracked
    assert track.obs.direction == pytest.approx([0.6, 0.8], abs=1e-6)  # the way it moves, as a unit vector
    assert sorted(track.obs.boxes) == [3, 4, 5, 6]  # only the frames the direction can reach back to are kept
