"""The sweep's tracking cases: detect.py --track with unusable tracker names and YAMLs, --track on a single image (a
warning, not an error), a tracked video (a MOTChallenge file written), and score_tracks.py with unusable files.
See scripts/bad_input_sweep.py, which registers tracking_cases.
"""

from pathlib import Path

from sweep_common import IMAGES, WEIGHTS, Case, _outputs, _video


def _tracker_yaml(folder: Path, name: str, text: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return str(folder / name)


def _says(*words: str):
    """A check that the output holds every one of words."""
    return lambda out: "" if all(w in out for w in words) else f"output lacks {words}"


def _detect_track_cases(tmp: Path) -> list[Case]:
    out = tmp / "runs_track"
    w = ["detect.py", "--weights", str(WEIGHTS), "--project", str(out), "--img", "160"]
    video = str(_video(tmp / "track_clip.avi"))
    bus = str(IMAGES / "bus.jpg")
    yamls = tmp / "tracker_yamls"
    byte = "tracker_type: bytetrack\n"
    bad = {
        "unknown key": _tracker_yaml(yamls, "typo.yaml", byte + "track_hihg_thresh: 0.3\n"),
        "not a mapping": _tracker_yaml(yamls, "list.yaml", "- bytetrack\n- botsort\n"),
        "track_high_thresh 1.5": _tracker_yaml(yamls, "high.yaml", byte + "track_high_thresh: 1.5\n"),
        "track_buffer -1": _tracker_yaml(yamls, "buffer.yaml", byte + "track_buffer: -1\n"),
        "low above high": _tracker_yaml(yamls, "low.yaml", byte + "track_low_thresh: 0.6\ntrack_high_thresh: 0.5\n"),
        "unknown tracker_type": _tracker_yaml(yamls, "type.yaml", "tracker_type: deepsort\n"),
    }
    cases = [
        Case(
            "detect --track strongsort.yaml (unknown name)",
            [*w, "--source", video, "--track", "strongsort.yaml"],
            "error",
        )
    ]
    cases += [
        Case(f"detect --track YAML: {what}", [*w, "--source", video, "--track", path], "error")
        for what, path in bad.items()
    ]
    cases += [
        Case(
            "detect --track on a single image (warning)",
            [*w, "--source", bus, "--track", "--name", "single"],
            "ok",
            check=_says("WARNING", "tracking needs frames"),
        ),
        Case(
            "detect --track bytetrack.yaml on a video (MOT file)",
            [*w, "--source", video, "--track", "bytetrack.yaml", "--name", "tracked"],
            "ok",
            check=_outputs(out / "tracked" / "tracks", "*.txt", 1),
        ),
    ]
    return cases


def _score_cases(tmp: Path) -> list[Case]:
    folder = tmp / "score_tracks"
    folder.mkdir(parents=True, exist_ok=True)
    good = folder / "gt.txt"
    good.write_text("".join(f"{f},1,{10 + f},10,20,20,1,1,1\n" for f in range(1, 11)))
    (folder / "bad.txt").write_text("1,1,ten,10,20,20\n")
    (folder / "short.txt").write_text("1,1,10\n")
    s = ["score_tracks.py", "--gt", str(good)]
    return [
        Case("score_tracks: missing track file", [*s, "--tracks", str(folder / "absent.txt")], "error"),
        Case("score_tracks: a row that is not numbers", [*s, "--tracks", str(folder / "bad.txt")], "error"),
        Case("score_tracks: a row too short", [*s, "--tracks", str(folder / "short.txt")], "error"),
        Case("score_tracks: --min-visibility 2", [*s, "--tracks", str(good), "--min-visibility", "2"], "error"),
        Case(
            "score_tracks: a folder as --gt", ["score_tracks.py", "--gt", str(folder), "--tracks", str(good)], "error"
        ),
    ]


def tracking_cases(sweep) -> list[Case]:
    """Every tracking case; fixtures go into the sweep's work folder."""
    tmp = Path(sweep.work)
    return _detect_track_cases(tmp) + _score_cases(tmp)
