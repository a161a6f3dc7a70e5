"""Tracker YAMLs: ours carry Ultralytics' keys and defaults, a user's file is checked, every bad one is one line."""

import dataclasses

import pytest
import yaml

from utils.errors import TrackerError
from utils.files import DATA_DIR
from utils.track.config import TrackerConfig, load_tracker_config, resolve_tracker_file

# Ultralytics 8.4's bytetrack.yaml and botsort.yaml, as data (key names and default values)
ULTRALYTICS_BYTETRACK = {
    "tracker_type": "bytetrack",
    "track_high_thresh": 0.25,
    "track_low_thresh": 0.1,
    "new_track_thresh": 0.25,
    "track_buffer": 30,
    "match_thresh": 0.8,
    "fuse_score": True,
}
ULTRALYTICS_BOTSORT = {
    **ULTRALYTICS_BYTETRACK,
    "tracker_type": "botsort",
    "gmc_method": "sparseOptFlow",
    "proximity_thresh": 0.5,
    "appearance_thresh": 0.8,
    "with_reid": False,
    "model": "auto",
}


@pytest.mark.parametrize("name", ["bytetrack", "botsort"])
def test_our_yamls_match_ultralytics_keys_and_defaults(name):
    expected = ULTRALYTICS_BYTETRACK if name == "bytetrack" else ULTRALYTICS_BOTSORT
    assert yaml.safe_load((DATA_DIR / f"{name}.yaml").read_text()) == expected
    config = load_tracker_config(f"{name}.yaml")
    assert {k: getattr(config, k) for k in expected} == expected
    assert load_tracker_config(name) == config


def test_dataclass_defaults_are_botsort_yaml():
    assert load_tracker_config("botsort.yaml") == TrackerConfig()


def test_a_users_file_is_read(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**ULTRALYTICS_BYTETRACK, "track_buffer": 60, "match_thresh": 0.9}))
    assert load_tracker_config(path) == dataclasses.replace(
        TrackerConfig(), tracker_type="bytetrack", track_buffer=60, match_thresh=0.9
    )
    assert resolve_tracker_file(path) == path


@pytest.mark.parametrize(
    "text, words",
    [
        ("- a\n- b\n", "must be a mapping"),
        ("just text\n", "must be a mapping"),
        ("tracker_type: bytetrack\ntrack_hihg_thresh: 0.3\n", "unknown key(s) track_hihg_thresh"),
        ("tracker_type: deepsort\n", "tracker_type must be one of bytetrack, botsort"),
        ("track_buffer: 30\n", "tracker_type is missing"),
        ("tracker_type: bytetrack\ntrack_high_thresh: 1.5\n", "track_high_thresh must be a number from 0 to 1"),
        ("tracker_type: bytetrack\nmatch_thresh: -0.1\n", "match_thresh must be a number from 0 to 1"),
        ("tracker_type: bytetrack\ntrack_low_thresh: high\n", "track_low_thresh must be a number"),
        ("tracker_type: bytetrack\ntrack_buffer: 0\n", "track_buffer must be a whole number from 1"),
        ("tracker_type: bytetrack\ntrack_buffer: 2.5\n", "track_buffer must be a whole number"),
        ("tracker_type: bytetrack\nfuse_score: 1\n", "fuse_score must be true or false"),
        ("tracker_type: botsort\ngmc_method: magic\n", "gmc_method must be one of"),
        ("tracker_type: botsort\nwith_reid: true\nmodel: osnet.pt\n", "a separate ReID model file is not supported"),
        ("tracker_type: botsort\nwith_reid: yes please\n", "with_reid must be true or false"),
        ("tracker_type: botsort\nwith_reid: true\nmodel: 3\n", "model must be a string"),
        ("tracker_type: botsort\nappearance_thresh: 1.2\n", "appearance_thresh must be a number from 0 to 1"),
        ("tracker_type: botsort\nproximity_thresh: -1\n", "proximity_thresh must be a number from 0 to 1"),
        ("tracker_type: bytetrack\ntrack_low_thresh: 0.5\ntrack_high_thresh: 0.4\n", "is above track_high_thresh"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("tracker_type: [unclosed\n", "could not be read as YAML"),
    ],
)
def test_bad_files_are_one_line(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TrackerError) as e:
        load_tracker_config(path)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unknown_name_is_one_line(tmp_path):
    with pytest.raises(TrackerError, match="'strongsort.yaml' is neither bytetrack.yaml nor botsort.yaml"):
        load_tracker_config("strongsort.yaml")
    with pytest.raises(TrackerError, match="nor an existing YAML file"):
        load_tracker_config(tmp_path)  # a folder


@pytest.mark.parametrize("kind", ["botsort", "tracktrack"])
def test_with_reid_is_accepted_with_the_detectors_features(tmp_path, kind):
    path = tmp_path / "reid.yaml"
    path.write_text(f"tracker_type: {kind}\nwith_reid: true\nmodel: auto\n")
    config = load_tracker_config(path)
    assert config.with_reid and config.model == "auto"


def test_with_reid_on_a_tracker_without_appearance_warns(tmp_path, log):
    path = tmp_path / "reid.yaml"
    path.write_text("tracker_type: bytetrack\nwith_reid: true\n")
    assert load_tracker_config(path).with_reid
    assert any("with_reid has no effect on bytetrack" in m for m in log.messages)
