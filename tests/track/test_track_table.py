"""TrackTrack's table of track rows: the ring of last boxes answers as a per-track history of the last frames would,
and dropping the rows of gone tracks changes no track."""

import dataclasses

import numpy as np

from utils.track.config import load_tracker_config
from utils.track.track_table import DELTA_T, TrackTable
from utils.track.track_track import TrackTrack


def test_ring_answers_as_a_history_of_the_last_frames():
    """Random frames seen (with gaps) and random box kinds: each asked frame 1..DELTA_T back gives that frame's box
    if the track was seen then, else its last box, with its kind (what a dict of the last DELTA_T + 1 boxes gives)."""
    rng = np.random.default_rng(0)
    table = TrackTable(capacity=2)  # grows on the third row
    rows = np.array([table.add(np.zeros(8), np.eye(8), np.float32(0.5)) for _ in range(3)])
    history = [{} for _ in rows]
    for frame in range(1, 200):
        seen = rows[rng.random(len(rows)) < 0.6]
        if len(seen):
            boxes, wide = rng.normal(size=(len(seen), 4)), bool(rng.random() < 0.3)
            table.remember(seen, frame, boxes, wide)
            for row, box in zip(seen, boxes):
                history[row][frame] = (box, wide)
        asked = frame + 1  # the next frame asks back before it remembers
        got, got_wide = table.back(rows, asked, np.arange(1, DELTA_T + 1))
        for k, dt in enumerate(range(1, DELTA_T + 1)):
            for row in rows:
                if not history[row]:
                    continue
                box, kind = history[row].get(asked - dt, history[row][max(history[row])])
                assert np.array_equal(got[k, row], box) and got_wide[k, row] == kind


def _detections(frames: int, seed: int = 3) -> list[np.ndarray]:
    """Objects that live 10-30 frames each (many tracks born and removed), moving on straight lines."""
    rng = np.random.default_rng(seed)
    out = []
    objects = []
    for _ in range(frames):
        objects = [o for o in objects if o["left"] > 0]
        while len(objects) < 12:
            objects.append({"xy": rng.uniform(0, 600, 2), "v": rng.normal(0, 2, 2), "left": int(rng.integers(10, 30))})
        rows = []
        for o in objects:
            o["xy"] += o["v"]
            o["left"] -= 1
            rows.append([*o["xy"], *(o["xy"] + 40), float(rng.uniform(0.5, 0.95)), 0])
        out.append(np.array(rows))
    return out


def test_dropping_gone_rows_changes_no_track(monkeypatch):
    """The same stream with the table's compaction (which runs: rows are renumbered) and without it."""
    config = dataclasses.replace(load_tracker_config("tracktrack.yaml"), min_track_len=2)
    stream = _detections(300)
    with_compaction = TrackTrack(config)
    outputs = [with_compaction.update(d) for d in stream]
    assert with_compaction.table.used < 150  # rows were dropped: over 300 frames far more tracks than that began
    monkeypatch.setattr(TrackTable, "compact", lambda self, tracks: None)
    without = TrackTrack(config)
    for d, expected in zip(stream, outputs):
        assert np.array_equal(without.update(d), expected)
    assert without.table.used > with_compaction.table.used
