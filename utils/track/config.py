"""Tracker settings: Ultralytics' tracker YAML keys and defaults, read as bounded data and checked.

A user's bytetrack.yaml, botsort.yaml, ocsort.yaml or tracktrack.yaml from Ultralytics works as it is. Every key
any of these files may hold is accepted by every tracker type (each ignores the others' keys); a key a file leaves out
takes its tracker's default (TrackTrack's thresholds differ from the others'); any other key, a file that is not a
mapping, a value of the wrong type or out of range is one TrackerError line.
"""

from dataclasses import dataclass, fields
from pathlib import Path

from utils.errors import TrackerError
from utils.files import DATA_DIR
from utils.log import LOGGER
from utils.safe_yaml import read_yaml

TRACKER_TYPES = ("bytetrack", "botsort", "ocsort", "tracktrack")
NOT_AVAILABLE = ("deepocsort", "fasttrack")  # Ultralytics 8.4's other tracker types
REID_TYPES = ("botsort", "tracktrack")  # the trackers that use appearance (with_reid)
GMC_METHODS = ("sparseOptFlow", "orb", "sift", "ecc", "none")
DEFAULT_TRACKER = DATA_DIR / "default_tracker.yaml"  # --track with no file (chosen as docs/tracking.md says)
MAX_TRACK_BUFFER = 100_000  # frames a lost track is kept; more would only grow the lost list without bound


@dataclass(frozen=True)
class TrackerConfig:
    """One tracker's settings (Ultralytics' names and defaults)."""

    tracker_type: str = "botsort"
    track_high_thresh: float = 0.25  # detections at or above it take part in the first association
    track_low_thresh: float = 0.1  # those between it and track_high_thresh in the second
    new_track_thresh: float = 0.25  # an unmatched detection starts a track at or above it
    track_buffer: int = 30  # frames (at 30 FPS) a lost track is kept before it is removed
    match_thresh: float = 0.8  # largest 1 - IoU (times score with fuse_score) of a first-stage match
    fuse_score: bool = True
    gmc_method: str = "sparseOptFlow"  # BoT-SORT's camera-motion compensation
    proximity_thresh: float = 0.5  # BoT-SORT's ReID: appearance counts only where IoU >= this ...
    appearance_thresh: float = 0.8  # ... and cosine similarity >= this
    with_reid: bool = False  # BoT-SORT and TrackTrack: also match by appearance
    model: str = "auto"  # the embeddings' source: the detector's own features (the only one available)
    delta_t: int = 3  # OC-SORT: frames back its direction of motion is measured over
    inertia: float = 0.2  # OC-SORT: weight of the direction cost (OCM) in the first association
    use_byte: bool = False  # OC-SORT: also match weak detections (ByteTrack's second association)
    lost_match_thr: float = 0.0  # TrackTrack: cost gate of a second chance for lost tracks; 0 leaves it out
    iou_weight: float = 0.5  # TrackTrack: weights of its cost terms (HMIoU, appearance, confidence, corner angle)
    reid_weight: float = 0.5
    conf_weight: float = 0.1
    angle_weight: float = 0.05
    penalty_p: float = 0.2  # TrackTrack: extra cost of a weak detection
    penalty_q: float = 0.4  # TrackTrack: extra cost of a detection only a looser NMS kept
    reduce_step: float = 0.05  # TrackTrack: how much the match threshold drops each round of its assignment
    tai_thr: float = 0.55  # TrackTrack: a new track needs IoU <= this with every track and stronger new detection
    min_track_len: int = 3  # TrackTrack: detections that confirm a new track
    refind_thr: float = 0.0  # TrackTrack (ours, not Ultralytics'): reach of re-finding a lost track by centre gap
    gmc_check: bool = False  # TrackTrack (ours): keep a camera-motion estimate only if it fits the tracks better


# TrackTrack's defaults where they differ from the others' (Ultralytics' tracktrack.yaml)
TYPE_DEFAULTS = {
    "tracktrack": {"track_high_thresh": 0.6, "track_low_thresh": 0.25, "new_track_thresh": 0.7, "match_thresh": 0.7}
}


def resolve_tracker_file(name: str | Path) -> Path:
    """The YAML for a tracker name: 'bytetrack'/'botsort' (with or without .yaml) are ours in data/, anything else
    a path to a user's file."""
    text = str(name)
    stem = text[:-5] if text.endswith(".yaml") else text
    if stem in TRACKER_TYPES and not Path(text).exists():
        return DATA_DIR / f"{stem}.yaml"
    path = Path(text)
    if not path.is_file():
        raise TrackerError(
            f"tracker '{text}' is neither {' nor '.join(t + '.yaml' for t in TRACKER_TYPES)} nor an existing YAML file"
        )
    return path


def _check_value(source: str, key: str, value, default):
    """value converted to the type of default, or TrackerError."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TrackerError(f"{source}: {key} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TRACK_BUFFER:
            raise TrackerError(f"{source}: {key} must be a whole number from 1 to {MAX_TRACK_BUFFER}, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise TrackerError(f"{source}: {key} must be a number from 0 to 1, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise TrackerError(f"{source}: {key} must be a string, got {value!r}")
    return value


def tracker_config_from_dict(data, source: str) -> TrackerConfig:
    """A TrackerConfig from parsed YAML data, checked (source names the file in messages)."""
    if not isinstance(data, dict):
        raise TrackerError(f"{source} must be a mapping of tracker settings (key: value), not {type(data).__name__}")
    if data.get("tracker_type") in NOT_AVAILABLE:  # before its own keys are called unknown
        raise TrackerError(
            f"{source}: tracker_type {data['tracker_type']} (Ultralytics') is not available here; "
            f"use one of {', '.join(TRACKER_TYPES)}"
        )
    defaults = {f.name: f.default for f in fields(TrackerConfig)}
    unknown = sorted(str(k) for k in data if k not in defaults)
    if unknown:
        raise TrackerError(f"{source}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(defaults)}")
    if "tracker_type" not in data:
        raise TrackerError(f"{source}: tracker_type is missing (one of {', '.join(TRACKER_TYPES)})")
    values = {k: _check_value(source, k, v, defaults[k]) for k, v in data.items()}
    if values["tracker_type"] not in TRACKER_TYPES:
        raise TrackerError(
            f"{source}: tracker_type must be one of {', '.join(TRACKER_TYPES)}, got {data['tracker_type']!r}"
        )
    if values.get("gmc_method", "none") not in GMC_METHODS:
        raise TrackerError(
            f"{source}: gmc_method must be one of {', '.join(GMC_METHODS)}, got {values['gmc_method']!r}"
        )
    config = TrackerConfig(**{**TYPE_DEFAULTS.get(values["tracker_type"], {}), **values})
    if config.track_low_thresh > config.track_high_thresh:
        raise TrackerError(
            f"{source}: track_low_thresh ({config.track_low_thresh}) is above track_high_thresh "
            f"({config.track_high_thresh}): no detection could reach the second association"
        )
    if config.with_reid and config.model != "auto":
        raise TrackerError(
            f"{source}: model: {config.model!r}: with_reid takes its embeddings from the detector's own features "
            "(model: auto); a separate ReID model file is not supported"
        )
    if config.with_reid and config.tracker_type not in REID_TYPES:
        LOGGER.warning(
            f"WARNING: {source}: with_reid has no effect on {config.tracker_type} (only on botsort and tracktrack)"
        )
    return config


def load_tracker_config(name: str | Path) -> TrackerConfig:
    """Read and check a tracker YAML given by name (bytetrack.yaml, botsort.yaml) or path."""
    path = resolve_tracker_file(name)
    return tracker_config_from_dict(read_yaml(path, TrackerError), str(path))
