"""benchmark.py (engine: utils/eval/benchmark.py): real exports of the official yolov5n measured on a few COCO128
images at 160 px, a format that fails or cannot run here carried as a row with its reason, bad inputs refused in one
line before anything is written. Skips without ../shared."""

import csv
import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
import yaml

import benchmark
from models.export.formats import FORMATS
from utils.eval.benchmark import BenchmarkCommand
from utils.files import DATA_DIR

SIZE = 160
IMAGES = 4


@pytest.fixture(scope="module")
def few_images(shared, tmp_path_factory) -> Path:
    """A data YAML whose val split is the first IMAGES COCO128 images (a .txt list; labels beside them in ../shared)."""
    folder = tmp_path_factory.mktemp("bench_data")
    images = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:IMAGES]
    (folder / "val.txt").write_text("".join(f"{image}\n" for image in images))
    names = yaml.safe_load((DATA_DIR / "coco128.yaml").read_text())["names"]  # as read, without the download
    config = {"path": str(folder), "train": "val.txt", "val": "val.txt", "nc": len(names), "names": names}
    (folder / "few.yaml").write_text(yaml.safe_dump(config))
    return folder / "few.yaml"


@pytest.fixture
def weights(shared, tmp_path) -> Path:
    """yolov5n in a folder of its own: the benchmark must write nothing beside it."""
    (tmp_path / "src").mkdir()
    return Path(shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "src/yolov5n.pt"))


def _rows(save_dir: Path) -> dict[str, dict]:
    with open(save_dir / "benchmark.csv", newline="", encoding="utf-8") as f:
        return {row["format"]: row for row in csv.DictReader(f)}


def test_flags_are_the_dataclass_fields():
    flags = vars(benchmark.parse_opt([]))
    fields = {f.name: f.default for f in dataclasses.fields(BenchmarkCommand)}
    assert flags == fields


def test_formats_measured_side_by_side(weights, few_images, tmp_path):
    argv = ["--weights", str(weights), "--data", str(few_images), "--img", str(SIZE), "--batch-size", "2"]
    argv += ["--include", "onnx", "pytorch", "torchscript", "--workers", "0", "--project", str(tmp_path / "runs")]
    assert benchmark.main(argv) == 0
    save_dir = tmp_path / "runs/exp"
    rows = _rows(save_dir)
    assert list(rows) == ["pytorch", "torchscript", "onnx"]  # the weights first, then the formats' order
    assert all(row["status"] == "ok" and not row["reason"] for row in rows.values()), rows
    reference = float(rows["pytorch"]["map50_95"])
    assert 0.1 < reference <= 1  # real detections on real images: the official weights find COCO objects
    for name in ("torchscript", "onnx"):  # dynamic exports letterbox as the .pt does: the same mAP
        assert abs(float(rows[name]["map50_95"]) - reference) < 0.002
        assert abs(float(rows[name]["map50"]) - float(rows["pytorch"]["map50"])) < 0.002
        export = save_dir / "weights" / rows[name]["file"]
        assert float(rows[name]["size_mb"]) == pytest.approx(export.stat().st_size / 1e6, abs=1e-6)
    for row in rows.values():
        assert float(row["forward_ms"]) > 0 and float(row["detect_s"]) > float(row["forward_ms"]) * IMAGES / 1000
    assert sorted(p.name for p in weights.parent.iterdir()) == ["yolov5n.pt"]  # nothing written beside the weights
    assert sorted(p.name for p in (save_dir / "detect").iterdir()) == list(sorted(rows))  # detect.py ran for each
    markdown = (save_dir / "benchmark.md").read_text()
    assert "| format | precision | status |" in markdown and f"({IMAGES} val images)" in markdown
    assert markdown.count("| ok |") == 3


def test_a_failing_format_is_a_row_with_its_reason(weights, few_images, tmp_path, log):
    """--int8 is not offered for TorchScript: its export fails in one line and the row says so; TensorRT cannot run
    on this CPU and is skipped, saying why; the run still writes its table. --hard-fail then exits 1."""
    argv = ["--weights", str(weights), "--data", str(few_images), "--include", "torchscript", "engine", "--int8"]
    argv += ["--project", str(tmp_path / "runs")]
    assert benchmark.main(argv) == 0
    rows = _rows(tmp_path / "runs/exp")
    assert rows["torchscript"]["status"] == "failed" and rows["torchscript"]["map50_95"] == ""
    assert rows["torchscript"]["reason"].startswith("export: --int8 quantizes onnx, openvino")
    if FORMATS["engine"].cannot_run_here(torch.device("cpu")):
        assert rows["engine"]["status"] == "skipped" and "CUDA" in rows["engine"]["reason"]
    assert "WARNING: torchscript failed: export: --int8" in log.text
    assert benchmark.main([*argv, "--hard-fail"]) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and "--hard-fail: torchscript failed" in errors[0]
    assert (tmp_path / "runs/exp2/benchmark.md").is_file()  # the table is written before the exit


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--weights", "missing.pt"], "--weights missing.pt: no such file"),
        (["--include", "pytorch", "--data", "nowhere.yaml"], "nowhere.yaml"),
    ],
)
def test_bad_inputs_are_one_line_and_write_nothing(argv, error, few_images, tmp_path, log):
    argv = [*argv, "--project", str(tmp_path / "runs")]
    if "--data" not in argv:
        argv += ["--data", str(few_images)]
    assert benchmark.main(argv) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and error in errors[0]
    assert not (tmp_path / "runs").exists()
