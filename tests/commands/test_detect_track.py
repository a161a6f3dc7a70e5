"""detect.py --track: identities on video frames and image sequences (drawn, a last --save-txt column, a
MOTChallenge file per video), a warning on a single image, one line for an unusable tracker."""

from pathlib import Path

import cv2
import numpy as np
import pytest

import detect
from utils.errors import TrackerError
from utils.track.mot_eval import read_mot

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
WEIGHTS = SHARED / "weights" / "yolov5n.pt"
BUS = SHARED / "images" / "bus.jpg"
pytestmark = pytest.mark.skipif(not WEIGHTS.is_file(), reason="../shared is not available")


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> Path:
    """Six frames panning across bus.jpg, as a video and as numbered images (f1 .. f6, not zero-padded)."""
    folder = tmp_path_factory.mktemp("frames")
    image = cv2.imread(str(BUS))
    writer = cv2.VideoWriter(str(folder / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 10, (480, 640))
    (folder / "seq").mkdir()
    for i in range(6):
        frame = np.ascontiguousarray(image[100 : 100 + 640, 8 * i : 8 * i + 480])
        writer.write(frame)
        cv2.imwrite(str(folder / "seq" / f"f{i + 1}.jpg"), frame)
    writer.release()
    return folder


def _run(tmp_path, source, **options):
    return detect.run(weights=str(WEIGHTS), source=str(source), imgsz=320, project=tmp_path, name="exp", **options)


@pytest.mark.slow
def test_tracked_video_writes_identities(tmp_path, frames):
    out = _run(tmp_path, frames / "clip.avi", track="bytetrack.yaml", save_txt=True)
    assert out.frames == 6 and all(r.ids is not None and len(r.ids) == len(r.boxes) for r in out.results)
    mot = read_mot(out.save_dir / "tracks" / "clip.txt")
    assert sorted(set(mot[:, 0].astype(int))) == [1, 2, 3, 4, 5, 6] and np.all(mot[:, 7:] == -1)
    label = (out.save_dir / "labels" / "clip_3.txt").read_text().splitlines()
    ids = {int(line.split()[-1]) for line in label}
    assert ids == set(mot[mot[:, 0] == 3, 1].astype(int))  # the last column is the identity
    assert (out.save_dir / "clip.mp4").is_file()


@pytest.mark.slow
def test_image_folder_is_one_sequence_in_frame_order(tmp_path, frames):
    folder = _run(tmp_path, frames / "seq", track="bytetrack.yaml", nosave=True, save_txt=True)
    assert [Path(r.path).name for r in folder.results] == [f"f{i}.jpg" for i in range(1, 7)]  # f10 would be last
    assert all(r.ids is not None and len(r.ids) == len(r.boxes) for r in folder.results)
    mot = read_mot(folder.save_dir / "tracks" / "seq.txt")  # one sequence: frames 1..6, identities carried on
    assert sorted(set(mot[:, 0].astype(int))) == [1, 2, 3, 4, 5, 6]
    assert set(mot[mot[:, 0] == 6, 1]) <= set(mot[mot[:, 0] <= 2, 1])


def test_single_image_warns_and_detects(tmp_path, log):
    out = _run(tmp_path, BUS, track="botsort.yaml")
    assert any("tracking needs frames" in m for m in log.messages)
    assert out.frames == 1 and out.results[0].ids is None and not (out.save_dir / "tracks").exists()


@pytest.mark.parametrize("tracker, words", [("strongsort.yaml", "neither"), ("bad", "neither")])
def test_unknown_tracker_is_one_line(tmp_path, frames, tracker, words):
    with pytest.raises(TrackerError, match=words):
        _run(tmp_path, frames / "clip.avi", track=tracker)
    assert not (tmp_path / "exp").exists()  # refused before anything was written


def test_tracker_yaml_with_a_bad_value(tmp_path, frames):
    bad = tmp_path / "mine.yaml"
    bad.write_text("tracker_type: bytetrack\nnew_track_thresh: 7\n")
    with pytest.raises(TrackerError, match="new_track_thresh must be a number from 0 to 1"):
        _run(tmp_path, frames / "clip.avi", track=str(bad))


@pytest.mark.slow
def test_vid_stride_numbers_the_videos_frames_and_a_rerun_leaves_no_stale_tracks(tmp_path, frames):
    """With --vid-stride 2 the 2nd, 4th and 6th frames are read: the MOT file numbers them 2, 4, 6 (the video's own
    frames, which the ground truth uses). An --exist-ok rerun removes the tracks an earlier run left in the run
    folder, a link there but not the user's file it points to (issue 35)."""
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine\n")
    first = _run(tmp_path, frames / "seq", track="bytetrack.yaml", nosave=True)
    (first.save_dir / "tracks" / "notes.txt").symlink_to(user_file)
    out = _run(tmp_path, frames / "clip.avi", track="bytetrack.yaml", vid_stride=2, nosave=True, exist_ok=True)
    assert out.save_dir == first.save_dir and out.frames == 3
    assert sorted(p.name for p in (out.save_dir / "tracks").iterdir()) == ["clip.txt"]  # seq.txt, the link: gone
    assert user_file.read_text() == "mine\n"
    mot = read_mot(out.save_dir / "tracks" / "clip.txt")
    assert sorted(set(mot[:, 0].astype(int))) == [2, 4, 6]


def test_sizes_changing_between_frames_track_on(tmp_path, frames, log):
    """BoT-SORT (the default tracker) over frames of three sizes: its camera-motion estimate restarts on each new
    size, said once, and every frame is tracked (issue 35)."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    image = cv2.imread(str(BUS))
    for i, crop in enumerate([image, image, image[100:740, :480], image[100:740, :480], image[:600, :600], image]):
        cv2.imwrite(str(mixed / f"f{i + 1}.jpg"), crop)
    out = _run(tmp_path, mixed, track="botsort.yaml", nosave=True)
    assert out.frames == 6 and all(r.ids is not None for r in out.results)
    assert sum("frame size changed" in m for m in log.messages) == 1
