"""utils.outputs: unique output names, crop folders, and each writer on real predictions."""

from pathlib import Path

import cv2
import numpy as np
import pytest

from utils.outputs import OutputNames, OutputOptions, Outputs, crop_folder, make_save_dir, output_stem
from utils.predict import DetectError, ImageResult, Prediction


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


