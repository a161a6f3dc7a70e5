"""TrackingSession: one tracker state per sequence, boxes back in detection order with their identities."""

import numpy as np

from utils.track.session import TrackingSession


def _boxes(x):
    return np.array([[x, 10, x + 20, 30, 0.6, 1], [100, 100, 130, 130, 0.9, 0]], np.float32)


def test_one_state_per_sequence():
    session = TrackingSession("bytetrack.yaml")
    for t in range(3):
        boxes, ids = session.update("a.mp4", _boxes(10 + 2 * t), None)
        assert session.frame == t + 1
    assert boxes.shape == (2, 6) and boxes.dtype == np.float32
    assert list(boxes[:, 4]) == [np.float32(0.9), np.float32(0.6)]  # highest confidence first
    assert list(ids) == [2, 1] and boxes[1, 0] > 10  # the first detection of frame 1 is track 1
    boxes, ids = session.update("b.mp4", _boxes(300)[:1], None)  # another video: identities from 1 again
    assert list(ids) == [1] and session.frame == 1


def test_nothing_detected():
    session = TrackingSession("botsort.yaml")
    boxes, ids = session.update("s", np.zeros((0, 6)), np.zeros((64, 64, 3), np.uint8))
    assert boxes.shape == (0, 6) and ids.shape == (0,)
