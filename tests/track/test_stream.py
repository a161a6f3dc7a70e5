"""Tracking the Predictor's stream: boxes become tracked boxes, one tracker state per video and one for a folder."""

import numpy as np

from utils.infer.predict import ImageResult, Prediction
from utils.track.session import TrackingSession
from utils.track.stream import track


def _prediction(path, frame, x, video):
    boxes = np.array([[x, 10, x + 20, 30, 0.9, 0], [200, 50, 230, 80, 0.05, 1]], np.float32)  # the 2nd: too weak
    result = ImageResult(path, frame, (120, 320), boxes, 1.0)
    return Prediction(result, np.zeros((120, 320, 3), np.uint8), video, None, 30.0, (1, 3, 64, 160), (0, 0, 0))


def test_tracked_stream():
    stream = [_prediction("a.mp4", f, 10 + 3 * f, True) for f in (1, 2, 3)]
    stream += [_prediction(f"seq/{i}.jpg", 0, 100 + 2 * i, False) for i in (1, 2)]
    out = list(track(iter(stream), TrackingSession("bytetrack.yaml"), "seq"))
    assert [(t.sequence, t.frame, list(t.ids)) for _, t in out] == [
        ("a.mp4", 1, [1]),
        ("a.mp4", 2, [1]),
        ("a.mp4", 3, [1]),
        ("seq", 1, [1]),  # the image folder is a new sequence: identities from 1 again
        ("seq", 2, [1]),
    ]
    prediction, _ = out[2]
    assert prediction.result.boxes.shape == (1, 6) and abs(prediction.result.boxes[0, 0] - 19) < 1
