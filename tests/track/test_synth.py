"""The synthetic tracking video: deterministic, and it holds what trackers find hard (crossings, occlusions,
entries and exits, a camera pan); its ground truth matches what is drawn."""

import numpy as np
import pytest

from utils.errors import ShapesError
from utils.track.mot_eval import read_mot
from utils.track.synth import SceneOptions, SceneRenderer, camera_offset
from utils.track.synth_io import write_detection_set, write_sequence

OPTIONS = SceneOptions(frames=120, width=240, height=144, seed=3)


@pytest.fixture(scope="module")
def scene():
    renderer = SceneRenderer(OPTIONS)
    return renderer, [renderer.frame(t) for t in range(OPTIONS.frames)]


def test_same_options_same_frames(scene):
    renderer, frames = scene
    img, rows = SceneRenderer(OPTIONS).frame(77)
    assert np.array_equal(img, frames[77][0]) and rows == frames[77][1]
    other, _ = SceneRenderer(SceneOptions(frames=120, width=240, height=144, seed=4)).frame(77)
    assert not np.array_equal(other, img)


def test_ground_truth_boxes_cover_drawn_objects(scene):
    _, frames = scene
    for img, rows in frames[::10]:
        assert img.shape == (144, 240, 3) and img.dtype == np.uint8
        for _, _, x, y, w, h, vis in rows:
            assert 0 <= x and 0 <= y and x + w <= 240 and y + h <= 144 and 0 <= vis <= 1


def test_it_has_entries_exits_occlusions_and_a_pan(scene):
    _, frames = scene
    ids_per_frame = [{r[0] for r in rows} for _, rows in frames]
    first = {i: next(t for t, s in enumerate(ids_per_frame) if i in s) for i in set().union(*ids_per_frame)}
    last = {i: max(t for t, s in enumerate(ids_per_frame) if i in s) for i in first}
    assert any(t > 0 for t in first.values()) and any(t < OPTIONS.frames - 1 for t in last.values())
    visibilities = [r[6] for _, rows in frames for r in rows]
    assert min(visibilities) < 0.5 and max(visibilities) == 1.0  # some objects partly covered by others
    assert camera_offset(OPTIONS, 60) != camera_offset(OPTIONS, 0)


def test_written_sequence_and_detection_set(tmp_path):
    options = SceneOptions(frames=15, width=160, height=96, seed=1)
    video = write_sequence(tmp_path, options, name="s", frames=True)
    assert video.is_file() and len(list((tmp_path / "s" / "img1").glob("*.jpg"))) == 15
    gt = read_mot(tmp_path / "s" / "gt" / "gt.txt")
    assert gt[:, 0].min() >= 1 and gt[:, 0].max() <= 15 and np.all(gt[:, 6] == 1)
    with pytest.raises(ShapesError, match="exists"):
        write_sequence(tmp_path, options, name="s")
    root = write_detection_set(tmp_path / "det", options, n_train=3, n_val=2)
    assert len(list((root / "labels" / "train").glob("*.txt"))) == 3 and (root / "data.yaml").is_file()


def test_a_hidden_object_with_the_largest_id_when_ids_have_gaps():
    """Objects that left the view before frame 0 are dropped, so ids have gaps (seed 9 at the default size: 34
    objects, ids up to 38); at frame 584 object 38 is in the view but wholly covered (no pixel of its own), which
    once failed with an IndexError when its visibility was counted."""
    renderer = SceneRenderer(SceneOptions(seed=9))
    assert max(t.track_id for t in renderer.tracks) > len(renderer.tracks) + 1
    _, rows = renderer.frame(584)
    hidden = [r for r in rows if r[0] == max(t.track_id for t in renderer.tracks)]
    assert len(hidden) == 1 and hidden[0][6] == 0.0


def test_occluders_hide_objects_for_many_frames_and_leave_the_objects_as_they_were():
    plain = SceneOptions(frames=300, width=240, height=144, seed=5)
    hard = SceneOptions(frames=300, width=240, height=144, seed=5, occluders=2)
    renderer = SceneRenderer(hard)
    assert [t.track_id for t in renderer.tracks] == [t.track_id for t in SceneRenderer(plain).tracks]
    assert len(renderer.occluders) == 2 and all(0.12 * 240 <= p.x2 - p.x1 <= 0.28 * 240 for p in renderer.occluders)
    hidden: dict[int, int] = {}  # frames each object spent wholly hidden while in view
    for t in range(hard.frames):
        _, rows = renderer.frame(t)
        for track_id, *_, vis in rows:
            hidden[track_id] = hidden.get(track_id, 0) + (vis == 0)
    assert max(hidden.values()) >= 15  # a long occlusion: behind a pillar for half a second or more
    img, _ = renderer.frame(0)
    pillar = renderer.occluders[0]
    x = pillar.x1 + 5 - int(camera_offset(hard, 0)[0])
    if 0 <= x < 240:  # in view: drawn in its own colour, top to bottom
        assert (img[:, x] == pillar.color).all()


def test_shake_moves_the_camera_every_frame_within_its_amplitude():
    plain = SceneOptions(frames=100, width=240, height=144, seed=2)
    shaky = SceneOptions(frames=100, width=240, height=144, seed=2, shake=4.0)
    steps = []
    for t in range(100):
        (px, py), (sx, sy) = camera_offset(plain, t), camera_offset(shaky, t)
        assert 0 <= sx - px <= 8 and 0 <= sy - py <= 8
        steps.append(abs((sx - px) - (camera_offset(shaky, t + 1)[0] - camera_offset(plain, t + 1)[0])))
    assert np.mean(steps) > 1.0  # a jitter of pixels from frame to frame, not a slow drift
    img, _ = SceneRenderer(shaky).frame(99)  # the world is large enough for the shake at the end of the pan
    assert img.shape == (144, 240, 3)
