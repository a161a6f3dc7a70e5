"""ByteTrack and BoT-SORT on hand-made detections: identities kept through motion, crossings, weak detections,
short occlusions and camera pans; tracks born, confirmed and retired as the settings say."""

import dataclasses

import numpy as np
import pytest

from utils.track.bot_sort import BotSort, create_tracker
from utils.track.byte_tracker import ByteTracker
from utils.track.config import TrackerConfig, load_tracker_config


def _det(x, y, size=20.0, score=0.9, cls=0):
    return [x, y, x + size, y + size, score, cls]


def _ids(out):
    return {int(r[4]): r[:4] for r in out}


@pytest.fixture(params=["bytetrack", "botsort"])
def tracker(request):
    config = dataclasses.replace(TrackerConfig(), tracker_type=request.param, gmc_method="none")
    return create_tracker(config)


def test_two_moving_objects_keep_their_identities(tracker):
    for t in range(30):
        out = tracker.update(np.array([_det(10 + 3 * t, 10), _det(200 - 2 * t, 100, score=0.6)]))
        assert out.shape == (2, 8)
        by_id = _ids(out)
        assert set(by_id) == {1, 2}
        assert by_id[1][0] == pytest.approx(10 + 3 * t, abs=1.0)
        assert by_id[2][0] == pytest.approx(200 - 2 * t, abs=1.0)
    assert sorted(out[:, 7]) == [0, 1]  # each row names the detection it was matched to


def test_crossing_objects_keep_their_identities(tracker):
    """Two boxes on the same row moving towards each other, overlapping for several frames, then apart."""
    for t in range(40):
        a, b = _det(20 + 4 * t, 50), _det(180 - 4 * t, 52)
        out = tracker.update(np.array([a, b]))
        by_id = _ids(out)
    assert set(by_id) == {1, 2}
    assert by_id[1][0] > by_id[2][0]  # track 1 (started left, moving right) is now on the right


def test_weak_detections_keep_a_track_but_do_not_start_one(tracker):
    for t in range(5):
        tracker.update(np.array([_det(10 + 2 * t, 10)]))
    for t in range(5, 10):  # the object's score drops (partly hidden): second association keeps it
        out = tracker.update(np.array([_det(10 + 2 * t, 10, score=0.15), _det(300, 300, score=0.15)]))
        assert list(out[:, 4]) == [1] and out[0, 5] == pytest.approx(0.15)
    # a detection below track_low_thresh is ignored altogether
    assert len(tracker.update(np.array([_det(30, 10, score=0.05)]))) == 0


def test_occluded_object_comes_back_with_its_identity(tracker):
    for t in range(10):
        tracker.update(np.array([_det(10 + 2 * t, 10), _det(100, 100)]))
    for _ in range(10, 20):  # the first object is hidden for 10 frames (within track_buffer=30)
        out = tracker.update(np.array([_det(100, 100)]))
        assert list(out[:, 4]) == [2]
    out = tracker.update(np.array([_det(10 + 2 * 20, 10), _det(100, 100)]))
    assert sorted(out[:, 4]) == [1, 2]


def test_lost_track_is_removed_after_the_buffer():
    tracker = ByteTracker(dataclasses.replace(TrackerConfig(), tracker_type="bytetrack", track_buffer=5))
    for _ in range(3):
        tracker.update(np.array([_det(10, 10)]))
    for _ in range(7):
        tracker.update(np.zeros((0, 6)))
    assert tracker.lost == []
    out = tracker.update(np.array([_det(10, 10)]))
    assert len(out) == 0  # a new, unconfirmed track: reported from its second frame, with a new identity
    assert list(tracker.update(np.array([_det(10, 10)]))[:, 4]) == [2]


def test_new_track_needs_a_second_detection_and_new_track_thresh(tracker):
    tracker.update(np.array([_det(10, 10)]))  # frame 1: confirmed at once
    out = tracker.update(np.array([_det(10, 10), _det(200, 200), _det(100, 300, score=0.2)]))
    assert list(out[:, 4]) == [1]  # the new one is not reported yet; 0.2 < new_track_thresh starts nothing
    out = tracker.update(np.array([_det(10, 10), _det(201, 200)]))
    assert sorted(out[:, 4]) == [1, 2]
    tracker.update(np.array([_det(10, 10), _det(400, 10)]))
    out = tracker.update(np.array([_det(10, 10)]))  # the unconfirmed one at x=400 vanished: removed
    assert list(out[:, 4]) == [1] and all(t.track_id != 4 for t in tracker.lost)


def test_reset_restarts_identities(tracker):
    tracker.update(np.array([_det(10, 10), _det(50, 50)]))
    tracker.reset()
    assert sorted(tracker.update(np.array([_det(90, 90)]))[:, 4]) == [1]


def _panned(texture, x):
    return np.ascontiguousarray(texture[:, x : x + 320])


def test_botsort_follows_a_jerky_camera_pan_that_bytetrack_loses():
    """The camera jumps 12 px left or right every frame; the objects are fixed in the world, so in the image they jump
    by more than their own width. Motion compensation keeps them tracked; IoU alone cannot."""
    rng = np.random.default_rng(0)
    texture = cv2_blur(rng.integers(0, 255, (240, 420, 3), dtype=np.uint8))
    config = load_tracker_config("botsort.yaml")
    trackers = {"botsort": BotSort(config), "bytetrack": ByteTracker(dataclasses.replace(config, gmc_method="none"))}
    seen = {name: set() for name in trackers}
    reported = dict.fromkeys(trackers, 0)
    for t in range(20):
        offset = 40 + (12 if t % 2 else -12) + t
        frame = _panned(texture, offset)
        dets = np.array([_det(150 - offset, 60, size=10), _det(250 - offset, 150, size=10)])
        for name, tracker in trackers.items():
            out = tracker.update(dets, frame)
            seen[name] |= set(out[:, 4].astype(int))
            reported[name] += len(out)
    assert seen["botsort"] == {1, 2} and reported["botsort"] == 40  # both objects, every frame
    assert reported["bytetrack"] < 30  # IoU alone misses them whenever the camera jumps back


def cv2_blur(img):
    import cv2

    return cv2.GaussianBlur(img, (0, 0), 1.5)


def test_boxes_without_width_or_height_are_left_out(tracker):
    """ByteTrack's state holds w / h: a zero-height box would make it infinite, so such boxes are not tracked."""
    flat = np.array([[10, 10, 40, 10, 0.9, 0], [60, 60, 60, 90, 0.9, 0]], np.float64)
    for _ in range(3):
        out = tracker.update(np.concatenate([flat, [_det(100, 100)]]))
    assert len(out) == 1 and out[0, 7] == 2 and np.all(np.isfinite(out))


def test_a_lost_track_can_be_found_in_the_frame_after_it_expires():
    """ByteTrack's reference bookkeeping: lost for more than track_buffer frames, a track may still be found in the
    next frame (with its identity), and if it is, it goes at once when lost again."""
    tracker = ByteTracker(dataclasses.replace(TrackerConfig(), tracker_type="bytetrack", track_buffer=5))
    seen = np.array([_det(50, 50)], np.float64)
    for _ in range(2):
        assert _ids(tracker.update(seen)).keys() == {1}  # frames 1-2
    for _ in range(6):  # frames 3-8: unseen; at frame 8 it has been lost 6 > 5 frames
        assert len(tracker.update(np.zeros((0, 6)))) == 0
    assert [t.track_id for t in tracker.lost] == [1] and tracker.lost[0].expired
    assert _ids(tracker.update(seen)).keys() == {1}  # frame 9: found again, same identity
    tracker.update(np.zeros((0, 6)))  # frame 10: lost again, and gone at once
    assert tracker.lost == []
    assert _ids(tracker.update(seen)).keys() == set()  # frame 11: a new, unconfirmed track
    assert _ids(tracker.update(seen)).keys() == {2}
