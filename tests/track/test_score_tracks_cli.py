"""score_tracks.py: one line of scores per track file; a bad file is one ERROR line."""

import pytest

import score_tracks
from utils.cli import run_cli

pytest.importorskip("trackeval")


def test_scores_each_file(tmp_path, capsys):
    gt = tmp_path / "gt.txt"
    gt.write_text("".join(f"{f},1,{10 + f},10,20,20,1,1,1\n" for f in range(1, 11)))
    half = tmp_path / "half.txt"
    half.write_text("".join(f"{f},7,{10 + f},10,20,20,0.9,-1,-1,-1\n" for f in range(1, 6)))
    assert score_tracks.main(["--gt", str(gt), "--tracks", str(gt), str(half)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("IDsw 0  FP 0  FN 0  GT ids 1  track ids 1") and "HOTA 100.00" in lines[0]
    assert "MOTA 50.00" in lines[1] and "FN 5" in lines[1]


def test_bad_file_is_one_error_line(tmp_path, log):
    bad = tmp_path / "bad.txt"
    bad.write_text("not,a,row\n")
    assert run_cli(lambda: score_tracks.main(["--gt", str(bad), "--tracks", str(bad)])) == 1
    assert log.messages == [f"ERROR: {bad}:1 is not a MOTChallenge row (comma-separated numbers)"]
