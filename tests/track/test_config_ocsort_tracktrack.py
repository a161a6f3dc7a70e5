"""ocsort.yaml and tracktrack.yaml: Ultralytics' keys and defaults, each new key checked (type and range, one line)."""

import pytest
import yaml

from utils.errors import TrackerError
from utils.files import DATA_DIR
from utils.track.config import load_tracker_config

# Ultralytics 8.4's ocsort.yaml and tracktrack.yaml, as data (key names and default values)
ULTRALYTICS_OCSORT = {
    "tracker_type": "ocsort",
    "track_high_thresh": 0.25,
    "track_low_thresh": 0.1,
    "new_track_thresh": 0.25,
    "track_buffer": 30,
    "match_thresh": 0.8,
    "fuse_score": True,
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


@pytest.mark.parametrize(
    "text, words",
    [
        ("tracker_type: ocsort\ndelta_t: 0\n", "delta_t must be a whole number from 1"),
        ("tracker_type: ocsort\ndelta_t: 2.5\n", "delta_t must be a whole number"),
        ("tracker_type: ocsort\ninertia: 1.5\n", "inertia must be a number from 0 to 1"),
        ("tracker_type: ocsort\nuse_byte: yes please\n", "use_byte must be true or false"),
        ("tracker_type: tracktrack\nmin_track_len: 0\n", "min_track_len must be a whole number from 1"),
        ("tracker_type: tracktrack\npenalty_p: -0.2\n", "penalty_p must be a number from 0 to 1"),
        ("tracker_type: tracktrack\npenalty_q: two\n", "penalty_q must be a number"),
        ("tracker_type: tracktrack\nreduce_step: 2\n", "reduce_step must be a number from 0 to 1"),
        ("tracker_type: tracktrack\ntai_thr: true\n", "tai_thr must be a number"),
        ("tracker_type: tracktrack\nlost_match_thr: 1.1\n", "lost_match_thr must be a number from 0 to 1"),
        ("tracker_type: tracktrack\nangle_weight: [0.1]\n", "angle_weight must be a number"),
        ("tracker_type: tracktrack\ngmc_method: magic\n", "gmc_method must be one of"),
        ("tracker_type: tracktrack\nwith_reid: true\n", "not supported yet"),
        ("tracker_type: tracktrack\ntrack_low_thresh: 0.7\n", "is above track_high_thresh"),
        ("tracker_type: deepocsort\n", "tracker_type must be one of bytetrack, botsort, ocsort, tracktrack"),
        ("tracker_type: ocsort\nalpha_fixed_emb: 0.95\n", "unknown key(s) alpha_fixed_emb"),
    ],
)
def test_bad_values_are_one_line(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TrackerError) as e:
        load_tracker_config(path)
    assert words in str(e.value) and "\n" not in str(e.value)
