"""TrackTrack's gmc_check (ours): a camera-motion estimate is used only when it brings the tracks' predicted boxes
nearer the frame's detections than no motion does; off in Ultralytics' files, on in the default."""

import dataclasses

import numpy as np
import pytest

from utils.errors import TrackerError
from utils.track.bot_sort import create_tracker
from utils.track.config import DEFAULT_TRACKER, load_tracker_config, tracker_config_from_dict
from utils.track.motion_check import checked_affine
from utils.track.tracks import xyxy_to_state

BOXES = np.array([[100.0, 100.0, 140.0, 150.0], [300.0, 60.0, 330.0, 90.0]])
SHIFT = np.array([[1.0, 0.0, 12.0], [0.0, 1.0, -5.0]])  # the camera moved: the view 12 px right, 5 px up


def _still_states(boxes: np.ndarray) -> np.ndarray:
    """(n, 8) Kalman states of boxes standing still (no velocity)."""
    return np.c_[xyxy_to_state(boxes, False), np.zeros((len(boxes), 4))]


def test_an_estimate_the_detections_agree_with_is_kept_and_one_they_contradict_is_not():
    moved = BOXES + [12, -5, 12, -5]
    np.testing.assert_array_equal(checked_affine(SHIFT, _still_states(BOXES), moved), SHIFT)
    np.testing.assert_array_equal(checked_affine(SHIFT, _still_states(BOXES), BOXES), np.eye(2, 3))
    # without tracks or detections nothing speaks against the estimate
    np.testing.assert_array_equal(checked_affine(SHIFT, np.zeros((0, 8)), BOXES), SHIFT)
    np.testing.assert_array_equal(checked_affine(SHIFT, _still_states(BOXES), np.zeros((0, 4))), SHIFT)


@pytest.mark.parametrize("check", [False, True])
def test_a_wrong_estimate_loses_the_tracks_only_without_the_check(check):
    """Two objects stand still while the motion estimate says the camera moved 40 px right (what corners on moving
    objects can give over a plain background): without the check both tracks are moved off their objects, which
    then start new identities; with it they keep theirs."""
    config = dataclasses.replace(load_tracker_config("tracktrack.yaml"), min_track_len=1, gmc_check=check)
    tracker = create_tracker(config)
    frame, dets = np.zeros((288, 480, 3), np.uint8), np.c_[BOXES, [0.9, 0.9], [0, 0]]
    tracker.camera.estimate = lambda image, boxes=None: np.eye(2, 3)
    for _ in range(3):
        assert sorted(tracker.update(dets, frame)[:, 4]) == [1, 2]
    tracker.camera.estimate = lambda image, boxes=None: np.array([[1.0, 0.0, 40.0], [0.0, 1.0, 0.0]])
    ids = sorted(tracker.update(dets, frame)[:, 4])
    assert ids == ([1, 2] if check else [3, 4])


def test_gmc_check_is_checked_off_in_ultralytics_files_and_on_in_the_default():
    assert not load_tracker_config("tracktrack.yaml").gmc_check
    assert not load_tracker_config("botsort.yaml").gmc_check
    default = load_tracker_config(DEFAULT_TRACKER)
    assert default.gmc_check and default.refind_thr == 0.5
    with pytest.raises(TrackerError, match="gmc_check must be true or false"):
        tracker_config_from_dict({"tracker_type": "tracktrack", "gmc_check": 1}, "t.yaml")
