"""TrackTrack's refind_thr (ours): a lost track found again by the gap between its predicted centre and a leftover
confident detection's, before that detection can start a new identity; never beside an active track."""

import dataclasses

import numpy as np
import pytest

from utils.errors import TrackerError
from utils.track.bot_sort import create_tracker
from utils.track.config import load_tracker_config, tracker_config_from_dict
from utils.track.refind import centre_gap_cost


def _det(x, y, size=30.0, score=0.9):
    return [x, y, x + size, y + size, score, 0]


def _tracker(**changes):
    changes = {"gmc_method": "none", "min_track_len": 1, **changes}
    return create_tracker(dataclasses.replace(load_tracker_config("tracktrack.yaml"), **changes))


def _ids(out):
    return sorted(int(i) for i in out[:, 4])


def test_centre_gap_is_measured_in_the_tracks_size_and_sizes_must_be_alike():
    track = np.array([[0.0, 0.0, 20.0, 40.0]])  # centre (10, 20), mean side 30
    dets = np.array([[3.0, 4.0, 23.0, 44.0], [0.0, 0.0, 20.0, 40.0], [0.0, 0.0, 60.0, 40.0]])
    cost = centre_gap_cost(track, dets, reach=0.5)
    assert cost[0, 0] == pytest.approx(5 / 15)  # a 3-4-5 step over half of 30
    assert cost[0, 1] == 0
    assert cost[0, 2] == np.inf  # three times the area: another object
    assert centre_gap_cost(track, dets, 0.5, [5])[0, 0] == pytest.approx(5 / 15)  # unseen 5 frames: as before
    assert centre_gap_cost(track, dets, 0.5, [20])[0, 0] == pytest.approx(5 / 15 / 2)  # 20: reach x sqrt(4)


@pytest.mark.parametrize(
    ("reach", "hidden", "step", "expected"),
    [(0.0, 10, 8, [2]), (0.5, 10, 8, [1]), (0.5, 2, 14, [2]), (0.5, 10, 14, [1]), (0.5, 10, 18, [2])],
)
def test_a_lost_track_is_found_again_within_reach(reach, hidden, step, expected):
    """The object comes back step px off diagonally: too little overlap for the main cost (HMIoU about 0.2 at 8 px),
    so a new identity without refind_thr. With 0.5 the reach is half its size (15 px) up to GROWTH_FRAMES unseen
    and grows after: 14 px off (19.8 px) is out of reach 3 frames after its last detection and within it 11 frames
    after (15 x sqrt(11 / 5) = 22.2 px); 18 px off (25.5 px) is out of reach then too."""
    tracker = _tracker(refind_thr=reach)
    for _ in range(5):
        tracker.update(np.array([_det(100, 100)]))
    for _ in range(hidden):
        assert len(tracker.update(np.zeros((0, 6)))) == 0
    assert _ids(tracker.update(np.array([_det(100 + step, 100 + step)]))) == expected


def test_a_detection_beside_an_active_track_refinds_nothing():
    """Object 1 hides beside object 2, which stays in view. The detection 8 px off object 1's place (within reach,
    as above) overlaps object 2's track by IoU 0.6 (> tai_thr): it could be either, so it neither goes to the lost
    track nor starts one; with object 2 gone it is found again."""
    for with_neighbour, expected in ((True, [2]), (False, [1])):
        tracker = _tracker(refind_thr=0.5)
        neighbour = [_det(112, 112)] if with_neighbour else []
        for _ in range(5):
            tracker.update(np.array([_det(100, 100)] + neighbour))
        for _ in range(10):
            tracker.update(np.array(neighbour).reshape(-1, 6))
        assert _ids(tracker.update(np.array(neighbour + [_det(108, 108)]))) == expected


def test_refind_thr_is_checked_and_off_in_ultralytics_files():
    assert load_tracker_config("tracktrack.yaml").refind_thr == 0.0
    with pytest.raises(TrackerError, match="refind_thr must be a number from 0 to 1"):
        tracker_config_from_dict({"tracker_type": "tracktrack", "refind_thr": 1.5}, "t.yaml")
