"""COCO image ids in test.py (utils/eval/coco_json.py): images are matched to a COCO annotations JSON by file_name,
then by numeric stem, so a JSON whose ids are not the file stems (1..N, as exported datasets often number them)
gives the same mAP."""

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

from utils.errors import MetricsError
from utils.eval import coco_json, validate, validate_weights
from utils.eval.coco_io import COCO80_NAMES, load_coco_ground_truth

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)

STATS = ("mAP50-95", "mAP50", "mAP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def _coco(shared: Path) -> dict:
    return json.loads((shared / "datasets/coco128/annotations/instances_train2017.json").read_text())


def renumbered(shared: Path, path: Path, seed: int = 8) -> tuple[Path, dict[int, int]]:
    """The coco128 JSON with image ids 1..128 in a shuffled order (annotations follow; file_name unchanged)."""
    data = _coco(shared)
    new_ids = list(range(1, len(data["images"]) + 1))
    random.Random(seed).shuffle(new_ids)
    new_of = {im["id"]: n for im, n in zip(data["images"], new_ids)}
    assert any(new_of[i] != i for i in new_of)
    for im in data["images"]:
        im["id"] = new_of[im["id"]]
    for ann in data["annotations"]:
        ann["image_id"] = new_of[ann["image_id"]]
    path.write_text(json.dumps(data))
    return path, new_of


def _split(tmp_path: Path, shared: Path, n: int = 24) -> Path:
    """The first n coco128 images: their numeric stems (9 ... 127) are all valid ids of a 1..128 renumbering,
    which is what made the old stem-as-id rule silently score each image against another image's boxes."""
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:n]
    path = tmp_path / f"first{n}.txt"
    path.write_text("".join(f"{f}\n" for f in files))
    return path


def _data_yaml(tmp_path: Path, shared: Path, val: Path, ann_json: Path | None, name: str) -> Path:
    lines = [
        f"path: {shared / 'datasets/coco128'}",
        "train: images/train2017",
        f"val: {val}",
        "nc: 80",
        f"names: {json.dumps(list(COCO80_NAMES))}",
    ]
    lines += [f"ann_json: {ann_json}"] if ann_json else []
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(tmp_path: Path, shared: Path, log, name: str, *args: str) -> tuple[int, list[str]]:
    """test.py's main at 256 px on yolov5n; its exit code and log lines."""
    log.clear()
    code = yolo_test.main(
        [
            *args,
            "--weights",
            str(shared / "weights/yolov5n.pt"),
            "--img",
            "256",
            "--batch-size",
            "8",
            "--workers",
            "0",
            "--no-plots",
            "--project",
            str(tmp_path / "runs"),
            "--name",
            name,
        ]
    )
    return code, [line for m in log.messages for line in m.splitlines()]


@pytest.mark.slow
def test_renumbered_json_gives_the_same_map(tmp_path, shared, log):
    split = _split(tmp_path, shared)
    original = shared / "datasets/coco128/annotations/instances_train2017.json"
    renamed, new_of = renumbered(shared, tmp_path / "renumbered.json")
    plain = _data_yaml(tmp_path, shared, split, None, "plain.yaml")
    in_yaml = _data_yaml(tmp_path, shared, split, renamed, "in_yaml.yaml")
    runs = {
        "original": ("--data", str(plain), "--ann-json", str(original)),
        "renumbered": ("--data", str(plain), "--ann-json", str(renamed)),
        "yaml": ("--data", str(in_yaml)),
    }
    results, predictions = {}, {}
    for name, args in runs.items():
        code, lines = _run(tmp_path, shared, log, name, *args, "--save-json")
        assert code == 0, lines[-5:]
        assert any("pycocotools agrees" in line for line in lines), lines[-20:]
        results[name] = json.loads((tmp_path / "runs" / name / "results.json").read_text())
        predictions[name] = json.loads((tmp_path / "runs" / name / "predictions.json").read_text())
    reference = [results["original"]["metrics"][k] for k in STATS]
    assert reference[0] > 0.2 and results["original"]["instances"] > 150
    for name in ("renumbered", "yaml"):
        ours = [results[name]["metrics"][k] for k in STATS]
        # mAP to 1e-6; the rest to 1e-5, since pycocotools itself orders detections of equal (5-decimal) score by
        # image id, so renumbering moves AP50 by ~1e-6 on all of coco128 (the same detections, remapped, do too)
        pycocotools = results[name]["pycocotools"]["stats"]
        assert abs(ours[0] - reference[0]) <= 1e-6 and abs(pycocotools[0] - reference[0]) <= 1e-6
        np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-5)
        np.testing.assert_allclose(pycocotools, reference, rtol=0, atol=1e-5)
        assert results[name]["instances"] == results["original"]["instances"]
        # predictions.json carries the JSON's ids: the same detections, each under its image's new id
        expected = sorted((new_of[p["image_id"]], p["category_id"], p["score"]) for p in predictions["original"])
        assert sorted((p["image_id"], p["category_id"], p["score"]) for p in predictions[name]) == expected


@pytest.mark.slow
def test_an_image_the_json_lacks_is_a_one_line_error(tmp_path, shared, log):
    split = _split(tmp_path, shared, 4)
    data = _coco(shared)
    lost = next(im for im in data["images"] if im["file_name"] == "000000000030.jpg")
    lost["file_name"], lost["id"] = "elsewhere.jpg", 999_999  # neither its name nor its stem 30 is in the JSON
    for ann in data["annotations"]:
        ann["image_id"] = 999_999 if ann["image_id"] == 30 else ann["image_id"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    cases = {
        "explicit": ("--data", str(_data_yaml(tmp_path, shared, split, None, "a.yaml")), "--ann-json", str(broken)),
        "yaml": ("--data", str(_data_yaml(tmp_path, shared, split, broken, "b.yaml"))),
    }
    for name, args in cases.items():
        code, lines = _run(tmp_path, shared, log, name, *args)
        errors = [line for line in lines if line.startswith("ERROR")]
        assert code == 1 and len(errors) == 1 and "000000000030.jpg" in errors[0] and str(broken) in errors[0], lines
    assert "remove it to score against the YOLO labels" in errors[0]  # the data YAML's ann_json says how to opt out


def test_training_falls_back_to_the_labels_once(tmp_path, shared, log):
    """During training the data YAML's unusable ann_json is one warning, not an error after the first epoch."""
    files = sorted(str(f) for f in (shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:3]
    missing = str(tmp_path / "missing.json")
    options = validate.ValidationOptions(ann_json=missing, ann_json_fallback=True)
    for _ in range(2):
        assert validate._ground_truth(options, list(COCO80_NAMES), files) is None
    assert sum("scoring against the YOLO labels" in m for m in log.messages) == 1
    with pytest.raises(MetricsError, match="missing.json"):  # evaluate() without the fallback
        validate._ground_truth(validate.ValidationOptions(ann_json=missing), list(COCO80_NAMES), files)
    with pytest.raises(validate.TestError, match="missing.json.*the data YAML's ann_json"):  # test.py's side
        validate_weights._ground_truth_json(None, {"ann_json": missing, "names": COCO80_NAMES}, files, use=True)


def _ground_truth(tmp_path: Path, images: list[dict]) -> object:
    path = tmp_path / "gt.json"
    path.write_text(json.dumps({"images": images, "annotations": [], "categories": [{"id": 1, "name": "a"}]}))
    return load_coco_ground_truth(path)


def test_matching_rules(tmp_path):
    gt = _ground_truth(
        tmp_path,
        [
            {"id": 7, "file_name": "b.jpg"},
            {"id": 3, "file_name": "a.jpg"},
            {"id": 12},
            {"id": 20, "file_name": "x/d.jpg"},
            {"id": 21, "file_name": "y/d.jpg"},
        ],
    )
    # by basename whatever the folders, then by numeric stem (12.png has no file_name entry), a longer path
    # suffix settles a basename used twice
    assert coco_json.json_image_ids(["/data/a.jpg", "/other/b.jpg", "/data/12.png", "/r/y/d.jpg"], gt) == [3, 7, 12, 21]
    with pytest.raises(MetricsError, match="no image for /data/c.jpg"):
        coco_json.json_image_ids(["/data/a.jpg", "/data/c.jpg"], gt)
    with pytest.raises(MetricsError, match="no image for /data/13.jpg"):
        coco_json.json_image_ids(["/data/13.jpg"], gt)
    with pytest.raises(MetricsError, match="several images are named d.jpg"):
        coco_json.json_image_ids(["/r/z/d.jpg"], gt)
    with pytest.raises(MetricsError, match="both match image id 3"):
        coco_json.json_image_ids(["/data/a.jpg", "/data/3.jpg"], gt)  # 3.jpg falls back to id 3, which a.jpg has


def test_ids_without_a_json_still_come_from_the_names():
    assert coco_json.image_ids_for(["/d/000000000009.jpg", "/d/25.jpg"]) == [9, 25]
    assert coco_json.image_ids_for(["/d/cat.jpg", "/d/dog.jpg", "/d/7.jpg"]) == [0, 1, 2]  # not all numeric: positions
    assert coco_json.image_ids_for(["/a/1.jpg", "/b/1.jpg"]) == [0, 1]  # repeated stems: positions


@pytest.mark.slow
def test_json_sizes_that_differ_from_the_images_warn(tmp_path, shared, log):
    """A JSON written for resized copies of the images: its boxes no longer fit, so the mAP would mislead."""
    split = _split(tmp_path, shared, 4)
    data = _coco(shared)
    for im in data["images"]:
        if im["file_name"] == "000000000025.jpg":
            im["height"], im["width"] = im["height"] // 2, im["width"] // 2
    halved = tmp_path / "halved.json"
    halved.write_text(json.dumps(data))
    plain = _data_yaml(tmp_path, shared, split, None, "plain.yaml")
    code, lines = _run(
        tmp_path,
        shared,
        log,
        "ok",
        "--data",
        str(plain),
        "--ann-json",
        str(shared / "datasets/coco128/annotations/instances_train2017.json"),
    )
    assert code == 0 and not any("differ in size" in line for line in lines)
    code, lines = _run(tmp_path, shared, log, "halved", "--data", str(plain), "--ann-json", str(halved))
    warnings = [line for line in lines if "differ in size" in line]
    assert code == 0 and len(warnings) == 1 and "1 image(s)" in warnings[0] and "000000000025.jpg" in warnings[0]
