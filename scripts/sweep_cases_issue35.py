"""The sweep's cases of issue 35's tracking, checkpoint-family and scoring classes, named '35.<class> ...': BoT-SORT on
frames whose size changes (3), a checkpoint's family of the wrong type or lying (4), score_tracks.py's integrity (7)
and bounds (8), tracking outputs and an export's lying family (10), Detector.stream of an image and a recorded size
off the stride (11). Run them with `python scripts/bad_input_sweep.py -k '^35\\.'`; registered in OPTIONAL_CASES.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import torch
from sweep_common import IMAGES, ROOT, SHARED, WEIGHTS, Case

from models.weights.checkpoint import load_checkpoint
from utils.files import RUN_MARKER

V8 = SHARED / "reference" / "ultralytics" / "yolov8n_random.pt"
SMALL = ["--img", "160"]


def _says(*words: str, once: str = ""):
    """A check that the output holds every one of words (and the text once exactly one time)."""

    def check(out: str) -> str:
        if not all(w in out for w in words):
            return f"output lacks {words}"
        return f"{once!r} appears {out.count(once)} times, not once" if once and out.count(once) != 1 else ""

    return check


def _says_any(*words: str):
    return lambda out: "" if any(w in out for w in words) else f"output has none of {words}"


def _mixed_frames(folder: Path) -> Path:
    """Frames of three sizes, sizes changing back and forth: bus (810x1080), zidane (1280x720), a crop of bus."""
    folder.mkdir(parents=True, exist_ok=True)
    bus, zidane = cv2.imread(str(IMAGES / "bus.jpg")), cv2.imread(str(IMAGES / "zidane.jpg"))
    for i, frame in enumerate([bus, bus, zidane, zidane, bus[100:900, 50:700], bus]):
        cv2.imwrite(str(folder / f"f{i + 1}.jpg"), frame)
    return folder


SIZE_CHANGE = "frame size changed"

TRACK_LOOP = """
import cv2, sys
from models import Detector
d = Detector(sys.argv[1], img_size=160)
bus, zidane = cv2.imread(sys.argv[2]), cv2.imread(sys.argv[3])
for frame in (bus, bus, zidane, zidane, cv2.resize(bus, (333, 211)), bus):
    ids = d.track(frame, persist=True)[0].id
print("tracked", 6, "frames")
"""


def _size_change_cases(tmp: Path) -> list[Case]:
    frames = _mixed_frames(tmp / "mixed_frames")
    out = tmp / "runs_35"
    orb = tmp / "botsort_orb.yaml"
    orb.write_text("tracker_type: botsort\ngmc_method: orb\n")
    w = ["detect.py", "--weights", str(WEIGHTS), "--project", str(out), *SMALL, "--source", str(frames)]
    return [
        Case(
            "35.3 detect --track (BoT-SORT) on frames of changing sizes",
            [*w, "--track", "--name", "mixed"],
            "ok",
            check=_says("Results saved", once=SIZE_CHANGE),
        ),
        Case(
            "35.3 detect --track BoT-SORT orb on frames of changing sizes (said once)",
            [*w, "--track", str(orb), "--name", "mixed_orb"],
            "ok",
            check=_says("Results saved", once=SIZE_CHANGE),
        ),
        Case(
            "35.3 Detector.track(persist=True) loop, frames change size",
            ["-c", TRACK_LOOP, str(WEIGHTS), str(IMAGES / "bus.jpg"), str(IMAGES / "zidane.jpg")],
            "ok",
            check=_says("tracked 6 frames", once=SIZE_CHANGE),
        ),
    ]


def _family_cases(tmp: Path) -> list[Case]:
    folder = tmp / "family_ckpts"
    files = {what: folder / f"{name}.pt" for name, what in (("list", "a list"), ("dict", "a mapping"))}
    files["anchor-free network says yolov5"] = folder / "v8_says_v5.pt"
    entries = {"a list": ["yolov8"], "a mapping": {"name": "yolov8"}, "anchor-free network says yolov5": "yolov5"}

    def build():
        folder.mkdir(parents=True, exist_ok=True)
        ckpt = load_checkpoint(V8)
        for what, path in files.items():
            torch.save({**ckpt, "family": entries[what]}, path)

    source = str(IMAGES / "bus.jpg")
    return [
        Case(
            f"35.4 detect: a checkpoint's family is {what}",
            ["detect.py", "--weights", str(path), "--source", source, *SMALL, "--project", str(tmp / "runs_35")],
            "error",
            check=_says("family"),
            setup=build,
        )
        for what, path in files.items()
    ]


def _mot(path: Path, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r + "\n" for r in rows))
    return path


def _integrity_cases(tmp: Path) -> list[Case]:
    folder = tmp / "score35"
    two = [f"{f},{i},{10 + 60 * i + f},10,20,20,1,1,1" for f in range(1, 11) for i in (1, 2)]
    gt = _mot(folder / "gt.txt", two)
    bad = {
        "tracks give every object one id": ("--tracks", [r.split(",", 2)[0] + ",7," + r.split(",", 2)[2] for r in two]),
        "a fractional frame in the ground truth": ("--gt", [*two, "3.5,1,10,10,20,20,1,1,1"]),
        "a huge id in the tracks": ("--tracks", [*two[:-1], "10,1e12,10,10,20,20,1,-1,-1,-1"]),
        "an id twice in a frame of the ground truth": ("--gt", [*two, "4,2,300,300,20,20,1,1,1"]),
    }
    cases = []
    for n, (what, (flag, rows)) in enumerate(bad.items()):
        file = _mot(folder / f"bad{n}.txt", rows)
        files = {"--gt": str(gt), "--tracks": str(gt), flag: str(file)}
        argv = ["score_tracks.py", "--gt", files["--gt"], "--tracks", files["--tracks"]]
        cases.append(Case(f"35.7 score_tracks: {what}", argv, "error", check=_says_any("whole number", "twice")))
    return cases


def _bounds_cases(tmp: Path) -> list[Case]:
    folder = tmp / "score35"
    gt = _mot(folder / "gt_small.txt", [f"{f},1,10,10,20,20,1,1,1" for f in range(1, 4)])
    fifo = folder / "tracks.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    fresh = _mot(folder / "fresh_ids.txt", [f"{f},{f},10,10,20,20,1,-1,-1,-1" for f in range(1, 20001)])
    long_gt = _mot(folder / "gt_long.txt", [f"{f},1,10,10,20,20,1,1,1" for f in range(1, 20001)])
    s = ["score_tracks.py", "--gt"]
    return [
        Case("35.8 score_tracks: a FIFO as --tracks", [*s, str(gt), "--tracks", str(fifo)], "error", timeout=30),
        Case("35.8 score_tracks: /dev/zero as --gt", [*s, "/dev/zero", "--tracks", str(gt)], "error", hostile=True),
        Case(
            "35.8 score_tracks: a fresh id on every one of 20,000 frames (id matrices bounded)",
            [*s, str(long_gt), "--tracks", str(fresh)],
            "error",
            hostile=True,
            timeout=300,
        ),
    ]


def _bus_clip(file: Path, frames: int = 12) -> Path:
    """A video of the bus photo panning right, 3 px a frame: detections on every frame."""
    file.parent.mkdir(parents=True, exist_ok=True)
    bus = cv2.resize(cv2.imread(str(IMAGES / "bus.jpg")), (320, 420))
    writer = cv2.VideoWriter(str(file), cv2.VideoWriter_fourcc(*"MJPG"), 10, (320, 420))
    for i in range(frames):
        writer.write(np.roll(bus, 3 * i, axis=1))
    writer.release()
    return file


def _mot_frames(file: Path, allowed: set[int]):
    """A check that the MOT file exists and numbers only frames in allowed, the last of them included."""

    def check(_out: str) -> str:
        if not file.is_file():
            return f"no {file}"
        frames = {int(line.split(",")[0]) for line in file.read_text().splitlines() if line}
        return "" if frames <= allowed and max(allowed) in frames else f"MOT frames {sorted(frames)}, not of {allowed}"

    return check


def _only_files(folder: Path, names: set[str]):
    def check(_out: str) -> str:
        found = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        return "" if found == names else f"{folder} holds {sorted(found)}, not {sorted(names)}"

    return check


def _stale_tracks(run: Path, user_file: Path):
    """An earlier run's tracks/ in run: two stale MOT files and a link to a file of the user's outside runs/."""

    def build():
        (run / "tracks").mkdir(parents=True, exist_ok=True)
        (run / RUN_MARKER).write_text("created by a yolo run\n")  # as the earlier run left it
        for name in ("old_a.txt", "old_b.txt"):
            (run / "tracks" / name).write_text("1,1,10,10,20,20,0.9,-1,-1,-1\n")
        user_file.write_text("the user's own notes\n")
        link = run / "tracks" / "notes.txt"
        if not link.is_symlink():
            link.symlink_to(user_file)

    return build


def _track_output_cases(tmp: Path) -> list[Case]:
    clip = _bus_clip(tmp / "videos35" / "busclip.avi")
    out = tmp / "runs_35"
    w = ["detect.py", "--weights", str(WEIGHTS), "--project", str(out), *SMALL, "--source", str(clip), "--nosave"]
    cases = [
        Case(
            f"35.10 detect --track {tracker} --vid-stride {stride}: the MOT file numbers the video's frames",
            [*w, "--track", tracker, "--vid-stride", str(stride), "--name", f"stride{stride}"],
            "ok",
            check=_mot_frames(out / f"stride{stride}" / "tracks" / "busclip.txt", set(range(stride, 13, stride))),
        )
        for tracker, stride in (("bytetrack.yaml", 3), ("botsort.yaml", 2))
    ]
    run = out / "rerun"
    cases.append(
        Case(
            "35.10 detect --track --exist-ok rerun: no stale tracks/*.txt, the user's linked file kept",
            [*w, "--track", "bytetrack.yaml", "--exist-ok", "--name", "rerun"],
            "ok",
            check=_only_files(run / "tracks", {"busclip.txt"}),
            setup=_stale_tracks(run, tmp / "videos35" / "user_notes.txt"),
        )
    )
    return cases


def _lying_export(folder: Path, weights: Path, family: str):
    """An ONNX export of weights whose metadata names another family."""
    onnx_file = folder / f"{weights.stem}_says_{family}.onnx"

    def build():
        if onnx_file.is_file():
            return
        folder.mkdir(parents=True, exist_ok=True)
        pt = folder / weights.name
        pt.write_bytes(weights.read_bytes())
        cmd = [sys.executable, str(ROOT / "export.py"), "--weights", str(pt), "--include", "onnx", *SMALL]
        subprocess.run(cmd, check=True, capture_output=True, cwd=folder, timeout=600)
        import onnx

        model = onnx.load(str(pt.with_suffix(".onnx")))
        for prop in model.metadata_props:
            prop.value = json.dumps(family) if prop.key == "family" else prop.value
        onnx.save(model, str(onnx_file))

    return onnx_file, build


def _export_family_cases(tmp: Path) -> list[Case]:
    cases = []
    for weights, family in ((V8, "yolov5"), (WEIGHTS, "yolov8")):
        onnx_file, build = _lying_export(tmp / "exports35", weights, family)
        argv = ["detect.py", "--weights", str(onnx_file), "--source", str(IMAGES / "bus.jpg")]
        cases.append(
            Case(
                f"35.10 detect: an ONNX export of {weights.stem} whose metadata says {family}",
                [*argv, "--project", str(tmp / "runs_35")],
                "error",
                check=_says("rows for a", "per grid cell"),
                setup=build,
                timeout=600,
            )
        )
    return cases


STREAM_IMAGE = """
import sys, numpy as np, torch
from models import Detector
from utils.errors import SourceError
d = Detector(sys.argv[1], img_size=160)
for image in (np.zeros((100, 100, 3), np.uint8), torch.zeros(1, 3, 64, 64)):
    try:
        next(d.stream(image))
    except SourceError as e:
        print("message lines:", len(str(e).splitlines()))
"""

SIZE_100 = """
import sys
from models import Detector
Detector(sys.argv[1])
"""


def _low_cases(tmp: Path) -> list[Case]:
    ckpt_100 = tmp / "family_ckpts" / "size100.pt"

    def build():
        ckpt_100.parent.mkdir(parents=True, exist_ok=True)
        torch.save({**load_checkpoint(WEIGHTS), "train_args": {"imgsz": 100}}, ckpt_100)

    rounded = "image size 128 (the size the weights record, 100, rounded up to a multiple of stride 32)"
    detect = ["detect.py", "--weights", str(ckpt_100), "--source", str(IMAGES / "bus.jpg")]
    return [
        Case(
            "35.11 Detector.stream of an array and a tensor: one-line SourceError",
            ["-c", STREAM_IMAGE, str(WEIGHTS)],
            "ok",
            check=lambda out: "" if out.count("message lines: 1") == 2 else "a message of more than one line",
        ),
        Case(
            "35.11 detect: a recorded training size of 100 is logged as used (128)",
            [*detect, "--project", str(tmp / "runs_35")],
            "ok",
            check=_says(rounded),
            setup=build,
        ),
        Case(
            "35.11 Detector: a recorded size of 100 logged as 128",
            ["-c", SIZE_100, str(ckpt_100)],
            "ok",
            check=_says(rounded),
            setup=build,
        ),
    ]


def issue35_cases(sweep) -> list[Case]:
    """Every case of this file; fixtures go into the sweep's work folder."""
    tmp = Path(sweep.work)
    cases = _size_change_cases(tmp) + _family_cases(tmp) + _integrity_cases(tmp) + _bounds_cases(tmp)
    return cases + _track_output_cases(tmp) + _export_family_cases(tmp) + _low_cases(tmp)
