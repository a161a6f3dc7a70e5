"""What test_int8.py and int8_checks.py (both here) share: the export packages each format needs, a COCO128 data
YAML, and export.py / test.py run in a process of their own."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from utils.eval.coco_io import COCO80_NAMES

ROOT = Path(__file__).resolve().parents[3]
NEEDS = {"openvino": ("openvino", "nncf"), "onnx": ("onnx", "onnxruntime")}


def needs(fmt: str) -> None:
    """Skip the test unless the export packages of fmt are installed."""
    for package in NEEDS[fmt]:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"optional {package} is not installed: pip install -r requirements-export.txt")


def data_yaml(folder: Path, shared: Path, images: int | None = None, ann: bool = False) -> Path:
    """A data YAML over COCO128 (its first `images` images as the val split, or all of them)."""
    root = shared / "datasets/coco128"
    val = "images/train2017"
    if images:
        files = sorted((root / "images/train2017").glob("*.jpg"))[:images]
        (folder / "val.txt").write_text("".join(f"{f}\n" for f in files))
        val = str(folder / "val.txt")
    lines = [f"path: {root}", "train: images/train2017", f"val: {val}", "nc: 80", f"names: {list(COCO80_NAMES)}"]
    lines += ["ann_json: annotations/instances_train2017.json"] if ann else []
    path = folder / "data.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(script: str, *args) -> str:
    """A command line in a process of its own, its output returned: NNCF calibrations run in the pytest process left
    it to crash later (a segmentation fault in the full suite, while this file alone passed), so every calibration
    here runs apart."""
    done = subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout + done.stderr
