"""utils.infer.outputs: unique output names, crop folders, and each writer on real predictions."""

import cv2
import numpy as np
import pytest

from utils.errors import DetectError
from utils.infer.outputs import (
    OutputNames,
    OutputOptions,
    Outputs,
    crop_folder,
    make_save_dir,
    mot_rows,
    output_stem,
)
from utils.infer.predict import ImageResult, Prediction
from utils.track.session import Tracked


def test_output_names_unit():
    names = OutputNames()
    assert [names.claim(p) for p in ("a/x.jpg", "b/x.jpg", "b/X.png", "x_2.jpg")] == ["x", "x_2", "X_3", "x_2_2"]
    assert names.claim("v/x_2.avi", video=True) == "x_2_3"  # x_2_2 (an image) would be its frame 2
    assert names.claim("w.jpg") == "w" and names.claim("w.mp4", video=True) == "w_2"
    assert names.claim("x_2_3_1.jpg") == "x_2_3_1_2"  # frame 1 of video x_2_3
    long = "é" * 150  # 300 bytes: cut to fit the file system's 255-byte names with suffixes
    assert len(names.claim(f"{long}.jpg").encode()) <= 200


def test_crop_folders_stay_inside_crops():
    assert crop_folder("person", 0) == "person" and crop_folder("traffic light", 9) == "traffic light"
    assert crop_folder("cat/dog", 3) == "cat_dog" and crop_folder("..\\x", 4) == ".._x"
    assert [crop_folder(n, 7) for n in ("", "..", ".", " ")] == ["class7"] * 4


def _prediction(path: str, boxes, frame: int = 0, video: bool = False) -> Prediction:
    image = np.full((100, 200, 3), 60, np.uint8)
    image[20:80, 40:160] = (0, 200, 255)  # something to crop
    result = ImageResult(path, frame, (100, 200), np.asarray(boxes, np.float32).reshape(-1, 6), 1.0)
    return Prediction(result, image, video, None, 30.0, (1, 3, 64, 128), (0.0, 0.0, 0.0))


BOXES = [[40, 20, 160, 80, 0.9, 1], [0, 0, 50, 50, 0.3, 0]]  # highest confidence first, as NMS returns them


def test_labels_are_written_lowest_confidence_first(tmp_path):
    outputs = Outputs(tmp_path, ["cat", "dog"], OutputOptions(save_img=False, save_txt=True, save_conf=True))
    assert outputs.write(_prediction("in/a.jpg", BOXES))
    lines = (tmp_path / "labels" / "a.txt").read_text().splitlines()
    assert lines == ["0 0.125 0.25 0.25 0.5 0.3", "1 0.5 0.5 0.6 0.6 0.9"]
    assert outputs.write(_prediction("in/empty.jpg", []))  # no detections: no label file
    assert sorted(p.name for p in (tmp_path / "labels").iterdir()) == ["a.txt"]
    assert outputs.saved_line() == f"Results saved to {tmp_path}, 1 label file in {tmp_path / 'labels'}"


def test_annotated_image_and_crops(tmp_path):
    options = OutputOptions(save_crop=True, line_thickness=2)
    outputs = Outputs(tmp_path, ["cat", "../dog"], options)
    prediction = _prediction("in/a.png", BOXES)
    outputs.write(prediction)
    saved = cv2.imread(str(tmp_path / "a.png"))
    assert saved.shape == (100, 200, 3) and (saved != 60).any()  # boxes were drawn, at the original size
    crop = cv2.imread(str(tmp_path / "crops" / ".._dog" / "a.jpg"))  # class name made one safe folder
    assert crop is not None and abs(int(crop[crop.shape[0] // 2, crop.shape[1] // 2, 2]) - 255) < 40  # untouched
    assert (tmp_path / "crops" / "cat" / "a.jpg").is_file()
    outputs.write(_prediction("other/a.png", BOXES[:1]))  # same stem, another input: its own name
    assert (tmp_path / "a_2.png").is_file() and (tmp_path / "crops" / ".._dog" / "a_2.jpg").is_file()


def test_nosave_claims_no_names_and_writes_nothing(tmp_path, log):
    outputs = Outputs(tmp_path, ["cat", "dog"], OutputOptions(save_img=False))
    assert not outputs.options.writes_files and outputs.saved_line() == ""
    for _ in range(3):  # one image repeated (a benchmark): nothing to keep apart, nothing to warn about
        assert outputs.write(_prediction("a.jpg", BOXES))
    assert not list(tmp_path.iterdir()) and not log.messages


def test_video_frames_share_one_stem(tmp_path):
    outputs = Outputs(tmp_path, ["cat", "dog"], OutputOptions(save_img=False, save_txt=True))
    for frame in (1, 2, 3):
        outputs.write(_prediction("clip.avi", BOXES, frame=frame, video=True))
    outputs.write(_prediction("clip_2.jpg", BOXES))  # would be named like the video's frame 2: renamed
    outputs.close()
    names = sorted(p.name for p in (tmp_path / "labels").iterdir())
    assert names == ["clip_1.txt", "clip_2.txt", "clip_2_2.txt", "clip_3.txt"]
    assert output_stem("clip", 0) == "clip" and output_stem("clip", 12) == "clip_12"


def test_make_save_dir(tmp_path):
    assert make_save_dir(tmp_path, "exp", False) == tmp_path / "exp"
    assert make_save_dir(tmp_path, "exp", False) == tmp_path / "exp2"
    assert make_save_dir(tmp_path, "exp", True) == tmp_path / "exp"
    with pytest.raises(DetectError, match="--name is empty"):
        make_save_dir(tmp_path, " ", False)
    (tmp_path / "file").write_text("")
    with pytest.raises(DetectError, match="cannot create the output folder"):
        make_save_dir(tmp_path / "file", "exp", False)


def test_tracked_frames_write_ids_in_labels_and_one_mot_file_per_sequence(tmp_path):
    options = OutputOptions(save_txt=True, save_conf=True, line_thickness=2)
    outputs = Outputs(tmp_path, ["cat", "dog"], options)
    ids = np.array([7, 3])
    for frame in (1, 2):
        outputs.write(_prediction("in/clip.mp4", BOXES, frame, video=True), Tracked(ids, "in/clip.mp4", frame))
    outputs.write(_prediction("in/seq/000001.jpg", BOXES[:1]), Tracked(ids[:1], "in/seq", 1))
    outputs.write(_prediction("in/other/clip.mp4", BOXES[1:], 1, video=True), Tracked(ids[1:], "in/other/clip.mp4", 1))
    outputs.close()
    # the identity is the last column, after the confidence; rows lowest confidence first as before
    assert (tmp_path / "labels" / "clip_2.txt").read_text().splitlines() == [
        "0 0.125 0.25 0.25 0.5 0.3 3",
        "1 0.5 0.5 0.6 0.6 0.9 7",
    ]
    mot = (tmp_path / "tracks" / "clip.txt").read_text().splitlines()
    assert mot == [
        "1,7,40.00,20.00,120.00,60.00,0.9000,-1,-1,-1",
        "1,3,0.00,0.00,50.00,50.00,0.3000,-1,-1,-1",
        "2,7,40.00,20.00,120.00,60.00,0.9000,-1,-1,-1",
        "2,3,0.00,0.00,50.00,50.00,0.3000,-1,-1,-1",
    ]
    assert (tmp_path / "tracks" / "seq.txt").read_text() == "1,7,40.00,20.00,120.00,60.00,0.9000,-1,-1,-1\n"
    assert (tmp_path / "tracks" / "clip_2.txt").read_text().startswith("1,3,")  # same stem, its own file
    untracked = Outputs(tmp_path / "b", ["cat", "dog"], options)
    untracked.write(_prediction("in/clip.mp4", BOXES, 1, video=True))
    assert not (tmp_path / "b" / "tracks").exists()


def test_tracked_boxes_are_drawn_in_their_identitys_colour(tmp_path):
    outputs = Outputs(tmp_path, ["cat", "dog"], OutputOptions(line_thickness=2, hide_labels=True))
    one = [[40, 20, 160, 80, 0.9, 1]]
    outputs.write(_prediction("in/a.png", one), Tracked(np.array([5]), "in", 1))
    outputs.write(_prediction("in/b.png", one), Tracked(np.array([6]), "in", 2))
    a, b = cv2.imread(str(tmp_path / "a.png")), cv2.imread(str(tmp_path / "b.png"))
    assert tuple(a[20, 100]) != tuple(b[20, 100])  # same class, other identity: another colour on the box edge


def test_mot_rows():
    rows = mot_rows(12, np.array([[10.0, 20.0, 40.0, 60.0, 0.5, 2.0]]), np.array([4]))
    assert rows == "12,4,10.00,20.00,30.00,40.00,0.5000,-1,-1,-1\n"


def test_mot_file_is_written_with_nosave(tmp_path):
    outputs = Outputs(tmp_path, ["cat", "dog"], OutputOptions(save_img=False))
    outputs.write(_prediction("in/clip.mp4", BOXES[:1], 1, video=True), Tracked(np.array([2]), "in/clip.mp4", 1))
    outputs.close()
    assert (tmp_path / "tracks" / "clip.txt").read_text().startswith("1,2,40.00,20.00,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tracks"]
