"""`--track` with no file, `Detector.track()` and `TrackingSession()` all use the default tracker YAML
(data/default_tracker.yaml, chosen as docs/tracking.md says), and that file is a valid tracker configuration."""

import inspect

import detect
from models.api.detector import Detector
from utils.files import DATA_DIR
from utils.track.config import DEFAULT_TRACKER, load_tracker_config
from utils.track.session import TrackingSession


def test_default_tracker_file_is_valid():
    assert DEFAULT_TRACKER.parent == DATA_DIR and DEFAULT_TRACKER.is_file()
    config = load_tracker_config(DEFAULT_TRACKER)
    assert config.tracker_type in ("bytetrack", "botsort", "ocsort", "tracktrack") and not config.with_reid


def test_every_entry_point_uses_it():
    assert detect.parse_opt(["--source", "clip.mp4", "--track"]).track == DEFAULT_TRACKER
    assert detect.parse_opt(["--source", "clip.mp4", "--track", "bytetrack.yaml"]).track == "bytetrack.yaml"
    assert detect.parse_opt(["--source", "clip.mp4"]).track is None
    assert inspect.signature(Detector.track).parameters["tracker"].default == DEFAULT_TRACKER
    assert TrackingSession().config == load_tracker_config(DEFAULT_TRACKER)
