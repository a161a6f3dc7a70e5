"""Tracking on the Predictor's stream: each prediction's boxes replaced by the tracks matched in its frame (as
Ultralytics' track mode reports them), with their identities, one tracker state per video, stream or image
sequence (a folder, glob or list of images is one sequence). Each Tracked names the detection row every tracked box
was matched to, so what a detection carries besides its box (a segment model's mask) can follow it
(utils/infer/track_inputs.py)."""

from collections.abc import Iterator

from utils.track.session import Tracked, TrackingSession


def sequence_of(prediction, source_text: str) -> str:
    """The sequence a prediction's frame belongs to: its video file or stream, else the image source as a whole."""
    return prediction.result.path if prediction.video else source_text


def track(predictions: Iterator, session: TrackingSession, source_text: str) -> Iterator[tuple]:
    """(prediction, Tracked) per prediction (utils.infer.predict.Prediction), lazily; the prediction's boxes become
    its frame's tracked boxes."""
    for prediction in predictions:
        sequence = sequence_of(prediction, source_text)
        extras = prediction.extras  # what the tracker asked the Predictor for (recovered boxes, embeddings)
        recovered, features = (extras.recovered, extras.features) if extras else (None, None)
        boxes, ids = session.update(sequence, prediction.result.boxes, prediction.image, recovered, features)
        prediction.result.boxes, prediction.result.ids = boxes, ids
        yield prediction, Tracked(ids, sequence, session.frame, session.detections)
