"""detect.py reliability (issue #8): no output overwritten, options range-checked, honest logs, one-line errors."""

import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

import detect
from utils.errors import SourceError
from utils.files import RUN_MARKER
from utils.infer.predict import DetectRun, ImageResult
from utils.infer.sources import check_source

ROOT = Path(__file__).resolve().parents[2]


def _run(shared: Path, source, tmp_path: Path, **kwargs) -> DetectRun:
    """detect.run with the official yolov5n at 320 (fast), saving into tmp_path/runs."""
    kwargs = {"imgsz": 320, "project": tmp_path / "runs", **kwargs}
    return detect.run(weights=str(shared / "weights" / "yolov5n.pt"), source=str(source), **kwargs)


def _classes(file: Path) -> list[int]:
    return sorted(np.loadtxt(file, ndmin=2)[:, 0].astype(int).tolist())


def _result_classes(result: ImageResult) -> list[int]:
    return sorted(result.boxes[:, 5].astype(int).tolist())


# --- item 2: inputs with the same stem keep their own outputs ------------------------------------------------


def _argv(shared, tmp_path, source=None, project=None) -> list[str]:
    """detect.py arguments: the official yolov5n on bus.jpg (or source) at --img 64, saving under tmp_path/runs."""
    source = str(shared / "images" / "bus.jpg") if source is None else source
    project = str(tmp_path / "runs") if project is None else project
    return [
        "--weights",
        str(shared / "weights" / "yolov5n.pt"),
        "--source",
        source,
        "--project",
        project,
        "--img",
        "64",
    ]


@pytest.mark.slow
def test_same_stem_inputs_keep_their_outputs(shared, tmp_path, log):
    images = shared / "images"
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    shutil.copy(images / "bus.jpg", tmp_path / "a" / "x.jpg")
    shutil.copy(images / "zidane.jpg", tmp_path / "b" / "x.jpg")
    cv2.imwrite(str(tmp_path / "a" / "x.png"), cv2.imread(str(images / "zidane.jpg")))
    listing = tmp_path / "list.txt"  # two folders, x.jpg beside x.png, and one file listed twice
    listing.write_text("\n".join(str(tmp_path / p) for p in ("a/x.jpg", "b/x.jpg", "a/x.png", "a/x.jpg")))
    out = _run(shared, listing, tmp_path, save_txt=True, save_crop=True)
    assert len(out.results) == 4
    labels = out.save_dir / "labels"
    assert sorted(p.name for p in labels.iterdir()) == ["x.txt", "x_2.txt", "x_3.txt", "x_4.txt"]
    for result, stem in zip(out.results, ("x", "x_2", "x_3", "x_4")):  # each label file holds its own input's boxes
        assert _classes(labels / f"{stem}.txt") == _result_classes(result)
    assert _classes(labels / "x.txt") != _classes(labels / "x_2.txt")  # bus vs zidane: not one copied over another
    saved = sorted(p.name for p in out.save_dir.iterdir() if p.is_file() and p.name != RUN_MARKER)
    assert saved == ["x.jpg", "x_2.jpg", "x_3.png", "x_4.jpg"]
    assert cv2.imread(str(out.save_dir / "x.jpg")).shape == (1080, 810, 3)  # the first keeps its name: the bus
    assert cv2.imread(str(out.save_dir / "x_2.jpg")).shape == (720, 1280, 3)
    assert {p.name for p in (out.save_dir / "crops" / "person").iterdir()} >= {"x.jpg", "x_2.jpg", "x_3.jpg"}
    warnings = [m for m in log.messages if "are saved as" in m]
    assert len(warnings) == 3 and all("\n" not in w for w in warnings)


@pytest.mark.slow
def test_repeated_input_without_saving_is_quiet(shared, tmp_path, log):
    listing = tmp_path / "list.txt"
    listing.write_text(f"{shared / 'images' / 'bus.jpg'}\n" * 3)  # as benchmarks/run.py times one image
    out = _run(shared, listing, tmp_path, nosave=True)
    assert len(out.results) == 3 and not any(m.startswith("WARNING") for m in log.messages)


@pytest.mark.slow
def test_same_stem_from_a_glob(shared, tmp_path):
    for folder, name in (("a", "bus.jpg"), ("b", "zidane.jpg")):
        (tmp_path / folder).mkdir()
        shutil.copy(shared / "images" / name, tmp_path / folder / "x.jpg")
    out = _run(shared, tmp_path / "*" / "x.jpg", tmp_path, save_txt=True)
    assert sorted(p.name for p in (out.save_dir / "labels").iterdir()) == ["x.txt", "x_2.txt"]
    assert _classes(out.save_dir / "labels" / "x_2.txt") == _result_classes(out.results[1])


@pytest.mark.slow
def test_video_frame_labels_do_not_collide_with_an_image(shared, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    shutil.copy(shared / "images" / "zidane.jpg", source / "clip_1.jpg")  # named like the video's first frame
    frame = cv2.resize(cv2.imread(str(shared / "images" / "bus.jpg")), (240, 320))
    writer = cv2.VideoWriter(str(source / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 5, (240, 320))
    for _ in range(2):
        writer.write(frame)
    writer.release()
    out = _run(shared, source, tmp_path, save_txt=True)
    assert [r.frame for r in out.results] == [0, 1, 2]
    labels = out.save_dir / "labels"
    assert sorted(p.name for p in labels.iterdir()) == ["clip_1.txt", "clip_2_1.txt", "clip_2_2.txt"]
    assert _classes(labels / "clip_1.txt") == _result_classes(out.results[0])  # the image's, not frame 1's
    assert (out.save_dir / "clip_1.jpg").is_file() and (out.save_dir / "clip_2.mp4").is_file()


def test_same_video_twice_keeps_both_videos(shared, tmp_path):
    frame = cv2.resize(cv2.imread(str(shared / "images" / "bus.jpg")), (240, 320))
    writer = cv2.VideoWriter(str(tmp_path / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 5, (240, 320))
    for _ in range(2):
        writer.write(frame)
    writer.release()
    listing = tmp_path / "list.txt"
    listing.write_text(f"{tmp_path / 'clip.avi'}\n" * 2)
    out = _run(shared, listing, tmp_path, save_txt=True)
    assert [r.frame for r in out.results] == [1, 2, 1, 2]  # frames counted per input, not per path
    labels = sorted(p.name for p in (out.save_dir / "labels").iterdir())
    assert labels == ["clip_1.txt", "clip_2.txt", "clip_2_1.txt", "clip_2_2.txt"]
    for video in ("clip.mp4", "clip_2.mp4"):
        saved = cv2.VideoCapture(str(out.save_dir / video))
        assert saved.isOpened() and int(saved.get(cv2.CAP_PROP_FRAME_COUNT)) == 2


# --- item 5: option ranges, at parse time and in run() -------------------------------------------------------


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--conf-thres", "2", "must be in [0, 1]"),
        ("--iou-thres", "5", "must be in [0, 1]"),
        ("--conf-thres", "nan", "finite"),
        ("--max-det", "-3", ">= 1"),
        ("--max-det", "0", ">= 1"),
        ("--vid-stride", "0", ">= 1"),
        ("--img-size", "-5", "in [1, 8192]"),
        ("--classes", "-1", ">= 0"),
        ("--line-thickness", "0", "in [1, 100]"),
    ],
)
def test_out_of_range_flags_are_refused_at_parsing(shared, tmp_path, capsys, flag, value, expected):
    argv = _argv(shared, tmp_path) + [flag, value]
    with pytest.raises(SystemExit) as info:
        detect.main(argv)
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "\n" not in err and flag in err and expected in err, err
    assert not (tmp_path / "runs").exists()


def test_three_image_sizes_is_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        detect.parse_opt(["--img-size", "320", "320", "3"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err == "ERROR: --img-size takes one or two values, got 3 (see detect.py --help)"


@pytest.mark.slow
@pytest.mark.parametrize("value", ["-4", "40000"])
def test_line_thickness_out_of_range_is_one_line_not_a_crash(shared, tmp_path, value):
    # -4 used to kill Python inside OpenCV (exit 139) and 40000 was a cv2 traceback: a subprocess survives both.
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "detect.py"),
            "--weights",
            str(shared / "weights" / "yolov5n.pt"),
            "--source",
            str(shared / "images" / "bus.jpg"),
            "--img",
            "320",
            "--line-thickness",
            value,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = (result.stdout + result.stderr).strip()
    assert result.returncode == 2 and "Traceback" not in out and "\n" not in out, out
    assert out.startswith("ERROR: argument --line-thickness: must be an integer in [1, 100]"), out


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"conf_thres": 2.0}, "--conf-thres"),
        ({"iou_thres": -0.1}, "--iou-thres"),
        ({"max_det": 0}, "--max-det"),
        ({"line_thickness": -4}, "--line-thickness"),
        ({"vid_stride": 0}, "--vid-stride"),
        ({"imgsz": (640, -1)}, "--img-size"),
        ({"imgsz": (320, 320, 3)}, "--img-size (imgsz=) takes one or two values, got 3"),
        ({"classes": [0, -2]}, "--classes"),
    ],
)
def test_run_checks_the_same_ranges(shared, tmp_path, kwargs, expected):
    with pytest.raises(detect.DetectError) as info:
        _run(shared, shared / "images" / "bus.jpg", tmp_path, **kwargs)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)
    assert not (tmp_path / "runs").exists()


def test_run_takes_one_class_id_as_an_int(shared, tmp_path):
    out = _run(shared, shared / "images" / "bus.jpg", tmp_path, classes=5, nosave=True)
    assert _result_classes(out.results[0]) == [5]


def test_class_ids_beyond_the_model_are_refused(shared, tmp_path, log):
    argv = _argv(shared, tmp_path) + ["--classes", "0", "999", "80"]
    assert detect.main(argv) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert errors == ["ERROR: --classes 80 999: this model's class ids are in [0, 80)"]
    assert not (tmp_path / "runs").exists()


# --- item 11 (detect): honest speed line, sources -------------------------------------------------------------


def test_speed_line_reports_the_letterboxed_shape(shared, tmp_path, log):
    _run(shared, shared / "images" / "bus.jpg", tmp_path, imgsz=640, nosave=True)
    speed = [m for m in log.messages if m.startswith("Speed: ")]
    assert len(speed) == 1 and speed[0].endswith("per image at shape (1, 3, 640, 480)"), speed


def test_file_with_glob_characters_is_detected(shared, tmp_path):
    shutil.copy(shared / "images" / "bus.jpg", tmp_path / "a[1].jpg")
    out = _run(shared, tmp_path / "a[1].jpg", tmp_path, save_txt=True)
    assert [Path(r.path).name for r in out.results] == ["a[1].jpg"]
    assert (out.save_dir / "labels" / "a[1].txt").is_file()


def test_annotated_image_in_a_format_opencv_cannot_write(shared, tmp_path):
    # .mpo files are JPEGs OpenCV reads but cannot encode: the annotated copy is saved as .jpg.
    shutil.copy(shared / "images" / "bus.jpg", tmp_path / "bus.mpo")
    out = _run(shared, tmp_path / "bus.mpo", tmp_path)
    assert cv2.imread(str(out.save_dir / "bus.jpg")).shape == (1080, 810, 3)


def test_project_that_is_a_file_is_one_line(shared, tmp_path, log):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    argv = _argv(shared, tmp_path, project=str(blocker))
    assert detect.main(argv) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert errors == [f"ERROR: cannot create the output folder {blocker / 'exp'}: Not a directory"]


def test_empty_name_is_refused(shared, tmp_path):
    # project/'' is project itself, which was incremented to a sibling folder 'runs2' outside the project.
    with pytest.raises(detect.DetectError, match="--name is empty"):
        _run(shared, shared / "images" / "bus.jpg", tmp_path, name="")
    assert not (tmp_path / "runs2").exists()


def test_long_file_names_get_shorter_output_names(shared, tmp_path, log):
    long = "b" * 251  # the longest name a .jpg can have; '<stem>2.jpg' (a second crop) would be too long
    shutil.copy(shared / "images" / "bus.jpg", tmp_path / f"{long}.jpg")
    out = _run(shared, tmp_path / f"{long}.jpg", tmp_path, save_txt=True, save_crop=True)
    short = long[:200]
    assert (out.save_dir / "labels" / f"{short}.txt").is_file() and (out.save_dir / f"{short}.jpg").is_file()
    persons = _result_classes(out.results[0]).count(0)
    assert persons >= 2 and len(list((out.save_dir / "crops" / "person").iterdir())) == persons
    assert sum(f"are saved as {short}.* (its name is too long)" in m for m in log.messages) == 1


@pytest.mark.parametrize(
    "source, expected",
    [
        ("", "--source is empty"),
        ("x" * 10_000 + ".jpg", "File name too long"),
    ],
)
def test_bad_source_strings_are_one_line(shared, tmp_path, log, source, expected):
    argv = _argv(shared, tmp_path, source=source)
    assert detect.main(argv) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and expected in errors[0] and len(errors[0]) < 300, errors
    assert not (tmp_path / "runs").exists()


def test_offline_url_source_is_one_line(shared, tmp_path, log):
    argv = _argv(shared, tmp_path, source="http://127.0.0.1:9/nothing_here.jpg")
    assert detect.main(argv) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and "cannot download http://127.0.0.1:9/nothing_here.jpg" in errors[0], errors


def test_odd_images_run_or_are_skipped(shared, tmp_path, log):
    source = tmp_path / "in"
    source.mkdir()
    cv2.imwrite(str(source / "pixel.png"), np.full((1, 1, 3), 128, np.uint8))
    cv2.imwrite(str(source / "gray16.png"), np.full((40, 30), 30000, np.uint16))
    cv2.imwrite(str(source / "alpha.png"), np.zeros((40, 30, 4), np.uint8))
    (source / "zero.jpg").write_bytes(b"")
    (source / "text.jpg").write_text("not an image")
    (source / "folder.jpg").mkdir()
    out = _run(shared, source, tmp_path, save_txt=True, save_crop=True)
    assert sorted(Path(r.path).name for r in out.results) == ["alpha.png", "gray16.png", "pixel.png"]
    assert sorted(Path(p).name for p in out.skipped) == ["text.jpg", "zero.jpg"]
    assert all(r.shape in ((1, 1), (40, 30)) for r in out.results)


def test_glob_matching_only_folders_is_one_line(tmp_path):
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2.jpg").mkdir()
    with pytest.raises(SourceError, match=r"matches only folders \(2\), no files"):
        check_source(str(tmp_path / "d*"))


def test_bad_source_fails_before_any_weights_download(tmp_path, monkeypatch):
    """detect.run checks --source before it resolves weights: a typo costs no download."""

    def no_download(*args, **kwargs):
        raise AssertionError("weights were resolved before the source was checked")

    monkeypatch.setattr("models.api.detector.attempt_download_weights", no_download)
    with pytest.raises(SourceError, match="source not found"):
        detect.run(weights="yolov5x.pt", source=str(tmp_path / "typo.jpg"), project=tmp_path / "runs", device="cpu")
    assert not (tmp_path / "runs").exists()
