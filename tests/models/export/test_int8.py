"""INT8 exports (models/export/quantize.py, export.py --int8): calibration images, the nodes kept in float,
OpenVINO (NNCF) and ONNX Runtime (QDQ) exports that detect.py, test.py and the Detector run, and one-line refusals.

The quick tests quantize the real yolov5n at 128 px on 8 COCO128 images; the slow ones check COCO128 mAP at 640."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from int8_helpers import ROOT, data_yaml, needs, run


def _coco_map(weights: Path, data: Path, tmp_path: Path, name: str) -> float:
    run(
        "test.py",
        "--weights",
        weights,
        "--data",
        data,
        "--img",
        640,
        "--batch-size",
        16,
        "--project",
        tmp_path,
        "--name",
        name,
        "--no-plots",
    )
    return json.loads((tmp_path / name / "results.json").read_text())["metrics"]["mAP50-95"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["openvino", "onnx"])
def test_int8_coco128_map_within_0_01_of_the_pt(tmp_path, shared, fmt):
    needs(fmt)
    weights = tmp_path / "yolov5n.pt"
    shutil.copy(shared / "weights/yolov5n.pt", weights)
    data = data_yaml(tmp_path, shared, ann=True)
    run("export.py", "--weights", weights, "--include", fmt, "--int8", "--data", data)
    path = tmp_path / ("yolov5n_int8_openvino_model" if fmt == "openvino" else "yolov5n_int8.onnx")
    int8 = _coco_map(path, data, tmp_path, "int8")
    reference = _coco_map(weights, data, tmp_path, "pt")
    assert abs(reference - 0.3701) < 5e-4  # the official weights' COCO128 mAP50-95 (README)
    assert abs(int8 - reference) <= 0.01, (int8, reference)


def test_in_process_int8_checks_pass_in_a_process_of_their_own():
    """int8_checks.py beside this file (INT8 exports through load_backend, detect and the Detector; the float nodes;
    refusals) in a pytest process of its own: run inside the full suite's process, those in-process INT8 OpenVINO and
    ONNX Runtime models left it to crash later with a segmentation fault, while every file alone passed."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "models" / "export" / "int8_checks.py"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode in (0, 5), done.stdout[-3000:]  # 5: every check skipped (no export packages)
