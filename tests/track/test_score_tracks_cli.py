"""score_tracks.py: a table with a row per track file; given folders, a row per tracker with its mean over the
sequences (scored on tracks our trackers made on generated sequences); a bad file or layout is one ERROR line."""

from pathlib import Path

import numpy as np
import pytest

import score_tracks
from utils.cli import run_cli
from utils.track.bot_sort import create_tracker
from utils.track.config import load_tracker_config
from utils.track.mot_eval import TABLE_COLUMNS, read_mot
from utils.track.mot_eval import score_tracks as score
from utils.track.synth import SceneOptions, SceneRenderer, camera_offset
from utils.track.synth_dets import SimulatedDetector

pytest.importorskip("trackeval")

TRACKERS = ("bytetrack", "tracktrack")


def _table(text: str) -> dict[str, dict[str, float]]:
    """The rows of a printed table: name -> column -> value (names hold no run of two spaces)."""
    lines = [line for line in text.splitlines() if line and not line.startswith("mean over")]
    header = [c for c in lines[0].split("  ") if c.strip()]
    assert [c.strip() for c in header[1:]] == list(TABLE_COLUMNS)
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        rows[cells[0]] = dict(zip(TABLE_COLUMNS, map(float, cells[1:])))
    return rows


@pytest.fixture(scope="module")
def sequences(tmp_path_factory) -> Path:
    """Two generated sequences (MOTChallenge layout) and the tracks our ByteTrack and TrackTrack made of them from
    simulated detections: root/gt/<seq>/gt/gt.txt and root/<tracker>/<seq>.txt."""
    root = tmp_path_factory.mktemp("scored")
    for seed in (1, 2):
        options = SceneOptions(frames=60, width=240, height=144, objects_in_view=6, seed=seed, occluders=1)
        renderer, detector = SceneRenderer(options), SimulatedDetector(240, 144, seed)
        trackers = {name: create_tracker(load_tracker_config(f"{name}.yaml")) for name in TRACKERS}
        lines = {name: [] for name in ("gt", *TRACKERS)}
        for t, (img, rows) in enumerate(renderer):
            lines["gt"] += [
                f"{t + 1},{i},{x:.2f},{y:.2f},{w:.2f},{h:.2f},1,{c + 1},{v:.3f}\n" for i, c, x, y, w, h, v in rows
            ]
            detections, _ = detector.detect(rows, camera_offset(options, t))
            for name, tracker in trackers.items():
                for x1, y1, x2, y2, track_id, conf, *_ in tracker.update(detections.astype(np.float64), img):
                    lines[name].append(
                        f"{t + 1},{int(track_id)},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},{conf:.3f}\n"
                    )
        (root / "gt" / f"seq{seed}" / "gt").mkdir(parents=True)
        (root / "gt" / f"seq{seed}" / "gt" / "gt.txt").write_text("".join(lines["gt"]))
        for name in TRACKERS:
            (root / name).mkdir(exist_ok=True)
            (root / name / f"seq{seed}.txt").write_text("".join(lines[name]))
    return root


def test_one_sequence_a_row_per_file(sequences, capsys):
    gt = sequences / "gt" / "seq1" / "gt" / "gt.txt"
    files = [str(gt)] + [str(sequences / name / "seq1.txt") for name in TRACKERS]
    assert score_tracks.main(["--gt", str(gt), "--tracks", *files]) == 0
    table = _table(capsys.readouterr().out)
    assert list(table) == files
    perfect = table[str(gt)]
    assert perfect["HOTA"] == perfect["MOTA"] == perfect["IDF1"] == 100 and perfect["IDsw"] == perfect["FN"] == 0
    for name, path in zip(TRACKERS, files[1:]):
        expected = score(read_mot(gt), read_mot(path)).columns()
        assert table[path] == pytest.approx({c: round(v, 2) for c, v in expected.items()}, abs=0.006)
        assert 20 < table[path]["HOTA"] < 100 and table[path]["FN"] > 0, name  # real tracks: good, not perfect


def test_folders_give_each_trackers_mean_over_sequences(sequences, capsys):
    folders = [str(sequences / name) for name in TRACKERS]
    argv = ["--gt", str(sequences / "gt"), "--tracks", *folders, "--per-sequence"]
    assert score_tracks.main(argv) == 0
    out = capsys.readouterr().out
    assert "mean over 2 sequences:" in out
    per_sequence, means = out.split("mean over 2 sequences:")
    rows, mean_rows = _table(per_sequence), _table(means)
    assert list(mean_rows) == folders and len(rows) == 4
    for folder in folders:
        for column in TABLE_COLUMNS:
            mean = (rows[f"{folder} seq1"][column] + rows[f"{folder} seq2"][column]) / 2
            assert mean_rows[folder][column] == pytest.approx(mean, abs=0.011)
    assert mean_rows[folders[0]] != mean_rows[folders[1]]  # two trackers, two rows of their own
    assert score_tracks.main(["--gt", str(sequences / "gt"), "--tracks", folders[0]]) == 0
    assert "seq1" not in capsys.readouterr().out  # without --per-sequence, only the means


def test_bad_file_is_one_error_line(tmp_path, log):
    bad = tmp_path / "bad.txt"
    bad.write_text("not,a,row\n")
    assert run_cli(lambda: score_tracks.main(["--gt", str(bad), "--tracks", str(bad)])) == 1
    assert log.messages == [f"ERROR: {bad}:1 is not a MOTChallenge row (comma-separated numbers)"]


def test_folder_layouts_that_do_not_fit_are_one_error_line(sequences, tmp_path, log):
    gt, tracks = sequences / "gt", sequences / "bytetrack"
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "seq1.txt").write_text((tracks / "seq1.txt").read_text())
    cases = [
        (["--gt", str(gt), "--tracks", str(partial)], f"{partial / 'seq2.txt'} is missing"),
        (["--gt", str(gt), "--tracks", str(tracks / "seq1.txt")], "--tracks must be folders too"),
        (["--gt", str(gt / "seq1" / "gt" / "gt.txt"), "--tracks", str(tracks)], "--gt must be a folder of sequences"),
        (["--gt", str(tmp_path), "--tracks", str(tracks)], "holds no sequence"),
    ]
    for argv, message in cases:
        log.clear()
        assert run_cli(lambda argv=argv: score_tracks.main(argv)) == 1
        assert len(log.messages) == 1 and message in log.messages[0], log.messages
