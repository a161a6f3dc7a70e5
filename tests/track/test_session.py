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


def test_boxes_reaching_past_the_frame_are_clipped_to_it():
    """A box moving right at 8 px a frame leaves a 100-px-wide frame; the track's Kalman box is clipped to the frame
    as the detections are (the ground truth of MOT benchmarks is too)."""
    session, frame = TrackingSession("bytetrack.yaml"), np.zeros((60, 100, 3), np.uint8)
    widest = 0.0
    for t in range(10):
        x = 40 + 8 * t
        det = np.array([[x, 10, min(x + 30, 100), 40, 0.9, 0]], np.float32)
        boxes, _ = session.update("v", det, frame)
        widest = max(widest, float(boxes[:, 2].max(initial=0)))
        assert np.all(boxes[:, :4] >= 0) and np.all(boxes[:, [0, 2]] <= 100) and np.all(boxes[:, [1, 3]] <= 60)
    assert widest == 100.0  # the estimate did reach the edge (past it, unclipped)
