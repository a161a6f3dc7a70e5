"""Appearance (with_reid): embeddings smoothed and compared, and BoT-SORT and TrackTrack following them where boxes
alone would not: two objects that swap places between frames keep their identities only when their embeddings say
who is who."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from utils.track.appearance import blend_embeddings, cosine_distance, frame_embeddings
from utils.track.bot_sort import create_tracker
from utils.track.config import load_tracker_config


def test_embeddings_are_normalized_and_blended_into_the_tracks():
    embeddings = frame_embeddings(np.array([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]]), 3)
    np.testing.assert_allclose(embeddings[0], [0.6, 0.8], rtol=1e-6)
    assert embeddings[1] is None  # a zero embedding says nothing
    tracks = [SimpleNamespace(embedding=None, smoothed=None) for _ in range(2)]
    blend_embeddings(tracks, [embeddings[0], None], 0.9)  # a first embedding is taken as it is
    np.testing.assert_allclose(tracks[0].smoothed, [0.6, 0.8], rtol=1e-6)
    assert tracks[1].smoothed is None
    blend_embeddings(tracks, [embeddings[2], embeddings[2]], [0.9, 0.5])
    expected = 0.9 * np.array([0.6, 0.8]) + 0.1 * np.array([0.0, 1.0])
    np.testing.assert_allclose(tracks[0].smoothed, expected / np.linalg.norm(expected), rtol=1e-6)
    np.testing.assert_allclose(tracks[0].embedding, [0.0, 1.0])
    np.testing.assert_allclose(tracks[1].smoothed, [0.0, 1.0])


def test_cosine_distance_is_nan_where_a_side_has_no_embedding():
    a, b = np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32)
    d = cosine_distance([a, None], [a, b, -a])
    np.testing.assert_allclose(d[0], [0.0, 1.0, 1.0])  # opposite directions clip to 1 (TrackTrack's range)
    assert np.isnan(d[1]).all()
    assert cosine_distance([a], [-a], upper=2.0)[0, 0] == pytest.approx(2.0)  # BoT-SORT's range


def _swap_scene(frames: int, gap: float):
    """Two boxes side by side, `gap` pixels apart at their left edges, each with its own embedding; from frame
    `frames` on the boxes stay put but the objects have swapped places (their embeddings with them)."""
    left, right = [100.0, 100.0, 200.0, 300.0], [100.0 + gap, 100.0, 200.0 + gap, 300.0]
    look_a, look_b = np.eye(8, dtype=np.float32)[0], np.eye(8, dtype=np.float32)[1]
    for t in range(frames + 3):
        swapped = t >= frames
        boxes = np.array([left + [0.9, 0], right + [0.9, 0]])
        yield boxes, np.stack([look_b, look_a] if swapped else [look_a, look_b])


def _ids_after_swap(kind: str, with_reid: bool, gap: float) -> tuple[list, list]:
    config = dataclasses.replace(load_tracker_config(f"{kind}.yaml"), with_reid=with_reid, gmc_method="none")
    tracker = create_tracker(config)
    before = after = None
    for t, (boxes, features) in enumerate(_swap_scene(6, gap)):
        out = tracker.update(boxes, None, None, features)
        ids = out[np.argsort(out[:, 7]), 4].tolist()  # by detection index: left box first
        before, after = (ids, after) if t < 6 else (before, ids)
    return before, after


@pytest.mark.parametrize("kind, gap", [("botsort", 20.0), ("tracktrack", 60.0)])
def test_identities_follow_appearance_only_with_reid(kind, gap):
    before, after = _ids_after_swap(kind, with_reid=False, gap=gap)
    assert len(before) == 2 and after == before  # boxes alone: each place keeps its identity
    before, after = _ids_after_swap(kind, with_reid=True, gap=gap)
    assert len(before) == 2 and after == before[::-1]  # appearance: the identities moved with the objects


def test_features_must_match_the_detections():
    tracker = create_tracker(dataclasses.replace(load_tracker_config("botsort.yaml"), with_reid=True))
    with pytest.raises(ValueError, match="2 detections but features of shape"):
        tracker.update(np.array([[0, 0, 10, 10, 0.9, 0], [20, 0, 30, 10, 0.9, 0]]), None, None, np.zeros((3, 4)))
