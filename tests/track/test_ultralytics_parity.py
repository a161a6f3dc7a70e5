"""Our OC-SORT and TrackTrack give Ultralytics' tracks (8.4.190), to the last float32 bit, on recorded inputs.

The fixture holds 150 frames of detections simulated from a generated scene (utils/track/synth.py, seed 3, 12
objects in view: misses and lower scores while hidden, jitter, clutter, and the boxes a looser NMS would recover),
and the rows Ultralytics' OCSORT and TRACKTRACK returned for each frame, with the default YAMLs and with a variant
each (use_byte; lost_match_thr 0.95 with match_thresh 0.5). Recorded by a script outside the repository that runs
Ultralytics' trackers on the same inputs; no camera motion (no frames are passed)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from utils.track.bot_sort import create_tracker
from utils.track.config import load_tracker_config

FIXTURE = Path(__file__).parent / "fixtures" / "ultralytics_parity.npz"
VARIANTS = {
    "ocsort": ("ocsort", {}),
    "ocsort_byte": ("ocsort", {"use_byte": True}),
    "tracktrack": ("tracktrack", {}),
    "tracktrack_lost": ("tracktrack", {"lost_match_thr": 0.95, "match_thresh": 0.5}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tracks_equal_ultralytics(variant):
    recorded = np.load(FIXTURE)
    kind, changes = VARIANTS[variant]
    tracker = create_tracker(dataclasses.replace(load_tracker_config(f"{kind}.yaml"), **changes))
    detections, recovered, expected = recorded["detections"], recorded["recovered"], recorded[variant]
    frames = int(detections[:, 0].max())
    for frame in range(1, frames + 1):
        boxes = detections[detections[:, 0] == frame, 1:].astype(np.float64)
        extra = recovered[recovered[:, 0] == frame, 1:]
        ours = tracker.update(boxes, None, extra).astype(np.float32)
        theirs = expected[expected[:, 0] == frame, 1:]
        ours, theirs = ours[np.argsort(ours[:, 4])], theirs[np.argsort(theirs[:, 4])]
        assert ours.shape == theirs.shape, f"frame {frame}: {len(ours)} tracks, Ultralytics {len(theirs)}"
        np.testing.assert_array_equal(ours, theirs, err_msg=f"frame {frame}")
    assert len(np.unique(expected[:, 5])) > 10  # many identities: births, losses and finds all took part
