"""OC-SORT and TrackTrack through TrackingSession on a generated video (camera pan, crossings, occlusions), the
frames passed so that TrackTrack's camera-motion estimate runs: fed the ground truth's visible boxes as detections,
no identity is ever given to two objects (no swap), and objects keep their identity but for at most one (here an
object that is out of sight longer than track_buffer and comes back as a new track)."""

import numpy as np
import pytest

from utils.track.session import TrackingSession
from utils.track.synth import SceneOptions, SceneRenderer


@pytest.mark.parametrize("tracker", ["ocsort.yaml", "tracktrack.yaml"])
def test_ground_truth_detections_keep_one_identity_per_object(tracker):
    session = TrackingSession(tracker)
    owners: dict[int, set[int]] = {}  # ground-truth object -> track ids it was reported under
    for img, rows in SceneRenderer(SceneOptions(frames=150, seed=4)):
        shown = [r for r in rows if r[6] >= 0.5]  # objects at least half visible are detected
        boxes = np.array([[x, y, x + w, y + h, 0.9, cls] for _, cls, x, y, w, h, _ in shown], np.float32)
        tracked, ids = session.update("synth", boxes.reshape(-1, 6), img)
        for (gt_id, *_rest), det in zip(shown, boxes):
            hits = np.flatnonzero(np.abs(tracked[:, :4] - det[:4]).max(axis=1) < 3.0) if len(tracked) else []
            owners.setdefault(gt_id, set()).update(int(ids[i]) for i in hits)
    assert len(owners) >= 8
    all_ids = [i for track_ids in owners.values() for i in track_ids]
    assert len(all_ids) == len(set(all_ids)), owners  # no identity reported for two objects
    assert sum(len(track_ids) != 1 for track_ids in owners.values()) <= 2, owners
    assert sum(len(track_ids) > 1 for track_ids in owners.values()) <= 1, owners
