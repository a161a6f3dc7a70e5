"""ocsort.yaml and tracktrack.yaml: Ultralytics' keys and defaults, each new key checked (type and range, one line)."""

import pytest
import yaml

from tests.track.test_config import ULTRALYTICS_BYTETRACK
from utils.errors import TrackerError
from utils.files import DATA_DIR
from utils.track.config import load_tracker_config

# Ultralytics 8.4's ocsort.yaml and tracktrack.yaml, as data (key names and default values)
ULTRALYTICS_OCSORT = {  # bytetrack.yaml's keys and values, and three of its own
    **ULTRALYTICS_BYTETRACK,
    "tracker_type": "ocsort",
    "delta_t": 3,
    "inertia": 0.2,
    "use_byte": False,
}
ULTRALYTICS_TRACKTRACK = {
    "tracker_type": "tracktrack",
    "track_high_thresh": 0.6,
    "track_low_thresh": 0.25,
    "new_track_thresh": 0.7,
    "track_buffer": 30,
    "match_thresh": 0.7,
    "lost_match_thr": 0.0,
    "iou_weight": 0.5,
    "reid_weight": 0.5,
    "conf_weight": 0.1,
    "angle_weight": 0.05,
    "penalty_p": 0.2,
    "penalty_q": 0.4,
    "reduce_step": 0.05,
    "tai_thr": 0.55,
    "min_track_len": 3,
    "gmc_method": "sparseOptFlow",
    "with_reid": False,
    "model": "auto",
}


@pytest.mark.parametrize("expected", [ULTRALYTICS_OCSORT, ULTRALYTICS_TRACKTRACK], ids=["ocsort", "tracktrack"])
def test_our_yamls_match_ultralytics_keys_and_defaults(expected, tmp_path):
    name = expected["tracker_type"]
    assert yaml.safe_load((DATA_DIR / f"{name}.yaml").read_text()) == expected
    config = load_tracker_config(name)
    assert {k: getattr(config, k) for k in expected} == expected
    users = tmp_path / f"{name}.yaml"  # a user's copy of Ultralytics' file reads the same
    users.write_text(yaml.safe_dump(expected))
    assert load_tracker_config(users) == config


def test_a_short_tracktrack_file_takes_tracktracks_defaults(tmp_path):
    """Keys left out take the tracker's own defaults: TrackTrack's thresholds are not ByteTrack's."""
    path = tmp_path / "tt.yaml"
    path.write_text("tracker_type: tracktrack\ntai_thr: 0.4\n")
    config = load_tracker_config(path)
    assert (config.track_high_thresh, config.track_low_thresh, config.new_track_thresh) == (0.6, 0.25, 0.7)
    assert (config.match_thresh, config.tai_thr) == (0.7, 0.4)
    path.write_text("tracker_type: ocsort\n")
    assert load_tracker_config(path).track_high_thresh == 0.25


OC, TT = ULTRALYTICS_OCSORT, ULTRALYTICS_TRACKTRACK


@pytest.mark.parametrize(
    "base, change, words",
    [
        (OC, {"delta_t": 0}, "delta_t must be a whole number from 1"),
        (OC, {"delta_t": 2.5}, "delta_t must be a whole number"),
        (OC, {"inertia": 1.5}, "inertia must be a number from 0 to 1"),
        (OC, {"use_byte": "yes please"}, "use_byte must be true or false"),
        (OC, {"alpha_fixed_emb": 0.95}, "unknown key(s) alpha_fixed_emb"),
        (TT, {"min_track_len": 0}, "min_track_len must be a whole number from 1"),
        (TT, {"penalty_p": -0.2}, "penalty_p must be a number from 0 to 1"),
        (TT, {"penalty_q": "two"}, "penalty_q must be a number"),
        (TT, {"reduce_step": 2}, "reduce_step must be a number from 0 to 1"),
        (TT, {"tai_thr": True}, "tai_thr must be a number"),
        (TT, {"lost_match_thr": 1.1}, "lost_match_thr must be a number from 0 to 1"),
        (TT, {"angle_weight": [0.1]}, "angle_weight must be a number"),
        (TT, {"gmc_method": "magic"}, "gmc_method must be one of"),
        (TT, {"with_reid": True, "model": "yolo26n-cls.pt"}, "a separate ReID model file is not supported"),
        (TT, {"reid_weight": 1.5}, "reid_weight must be a number from 0 to 1"),
        (TT, {"iou_weight": "half"}, "iou_weight must be a number"),
        (TT, {"track_low_thresh": 0.7}, "is above track_high_thresh"),
        (TT, {"tracker_type": "strongsort"}, "tracker_type must be one of bytetrack, botsort, ocsort, tracktrack"),
    ],
)
def test_one_bad_value_in_ultralytics_file_is_one_line(tmp_path, base, change, words):
    """Ultralytics' own file with one key made bad, read as detect.py --track reads it."""
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**base, **change}))
    with pytest.raises(TrackerError) as raised:
        load_tracker_config(tmp_path / "bad.yaml")
    message = str(raised.value)
    assert words in message and "\n" not in message and "bad.yaml" in message


@pytest.mark.parametrize("name", ["deepocsort", "fasttrack"])
def test_ultralytics_trackers_we_lack_are_named(tmp_path, name):
    """Ultralytics' deepocsort.yaml and fasttrack.yaml (their own keys included) are refused by tracker name."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({**ULTRALYTICS_BYTETRACK, "tracker_type": name, "delta_t": 3, "occ_cover_thresh": 0.7})
    )
    with pytest.raises(TrackerError, match=f"tracker_type {name} \\(Ultralytics'\\) is not available here; use one of"):
        load_tracker_config(path)
