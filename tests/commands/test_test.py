"""test.py end to end on coco128 (official COCO JSON and YOLO labels as ground truth) and bad input.

train.py's path (evaluate() on a live model) is tested in test_validate_evaluate.py."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from models import Model
from models.weights.checkpoint import checkpoint_dict, save_checkpoint
from utils.eval.coco_io import COCO80_NAMES, pycocotools_stats

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)

REFERENCE_AP, REFERENCE_AP50 = 0.3701, 0.5759  # pycocotools on the official YOLOv5's predictions (reference/)


def data_yaml(
    tmp_path: Path,
    shared: Path,
    val: str = "images/train2017",
    ann_json: bool = True,
    nc: int = 80,
    name: str = "data.yaml",
) -> Path:
    """A data YAML in tmp_path for ../shared/datasets/coco128."""
    names = list(COCO80_NAMES)[:nc]
    lines = [
        f"path: {shared / 'datasets/coco128'}",
        "train: images/train2017",
        f"val: {val}",
        f"nc: {nc}",
        f"names: {json.dumps(names)}",
    ]
    if ann_json:
        lines.append("ann_json: annotations/instances_train2017.json")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def image_list(tmp_path: Path, shared: Path, n: int) -> Path:
    """A .txt split of the first n coco128 images."""
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:n]
    path = tmp_path / f"first{n}.txt"
    path.write_text("".join(f"{f}\n" for f in files))
    return path


@pytest.mark.slow
def test_coco128_640_against_the_official_json(tmp_path, shared):
    """The acceptance run: reference settings (640, batch 16), --save-json, plots on."""
    weights = shared / "weights/yolov5n.pt"
    result = yolo_test.run(
        data_yaml(tmp_path, shared),
        weights=str(weights),
        batch_size=16,
        imgsz=640,
        save_json=True,
        project=tmp_path / "runs",
        workers=2,
    )
    (mp, mr, map50, map_, *losses), maps, speed = result.summary, result.metrics.maps, result.speed_ms
    run_dir = tmp_path / "runs/exp"
    results = json.loads((run_dir / "results.json").read_text())
    m = results["metrics"]
    assert abs(m["mAP50-95"] - REFERENCE_AP) < 0.005 and abs(m["mAP50"] - REFERENCE_AP50) < 0.005
    ours = [
        m[k] for k in ("mAP50-95", "mAP50", "mAP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
    ]
    np.testing.assert_allclose(ours, results["pycocotools"]["stats"], rtol=0, atol=1e-6)
    assert (map_, map50, mp, mr) == (m["mAP50-95"], m["mAP50"], m["precision"], m["recall"])
    assert results["images"] == 128 and results["instances"] == 929  # crowd regions are not instances
    assert 0.5 < mp < 0.7 and 0.4 < mr < 0.6  # YOLOv5's own P 0.586, R 0.508
    assert result.fitness == 0.1 * map50 + 0.9 * map_
    np.testing.assert_array_equal(result.pycocotools, results["pycocotools"]["stats"])
    # pycocotools scores our predictions as it scores the official YOLOv5 predictions of the same images
    ann_json = shared / "datasets" / "coco128" / "annotations" / "instances_train2017.json"
    official = json.loads((shared / "reference" / "coco128_yolov5n_640_predictions.json").read_text())
    coco_ids = sorted(c["id"] for c in json.loads(ann_json.read_text())["categories"])  # class index -> COCO id
    official = [{**d, "category_id": coco_ids[d["category_id"]]} for d in official]
    ref_ap, ref_ap50 = pycocotools_stats(ann_json, official)[:2]
    assert abs(m["mAP50-95"] - ref_ap) <= 5e-4 and abs(m["mAP50"] - ref_ap50) <= 5e-4, (m, ref_ap, ref_ap50)

    assert losses == [0.0, 0.0, 0.0] and maps.shape == (80,) and len(speed) == 3 and all(t > 0 for t in speed)
    assert set(results["speed_ms"]) == {"preprocess", "inference", "nms"}
    assert results["per_class"]["person"]["instances"] > 200
    predictions = json.loads((run_dir / "predictions.json").read_text())
    assert len(predictions) > 20_000 and {p["category_id"] for p in predictions} <= set(range(1, 91))
    for f in (
        "PR_curve.png",
        "F1_curve.png",
        "P_curve.png",
        "R_curve.png",
        "confusion_matrix.png",
        "val_batch0_labels.jpg",
        "val_batch0_pred.jpg",
    ):
        assert (run_dir / f).stat().st_size > 1000, f


@pytest.mark.slow
def test_yolo_labels_as_ground_truth_cli(tmp_path, shared, log):
    """Without ann_json: labels scaled back to original pixels, a generated COCO JSON for pycocotools, txt labels."""
    split = image_list(tmp_path, shared, 24)
    data = data_yaml(tmp_path, shared, val=str(split), ann_json=False)
    code = yolo_test.main(
        [
            "--data",
            str(data),
            "--weights",
            str(shared / "weights/yolov5n.pt"),
            "--img",
            "320",
            "--batch-size",
            "8",
            "--save-json",
            "--save-txt",
            "--save-conf",
            "--verbose",
            "--no-plots",
            "--project",
            str(tmp_path / "runs"),
            "--name",
            "labels",
            "--workers",
            "1",
        ]
    )
    out = "\n".join(log.messages)
    assert code == 0
    run_dir = tmp_path / "runs/labels"
    results = json.loads((run_dir / "results.json").read_text())
    stats = [
        results["metrics"][k]
        for k in ("mAP50-95", "mAP50", "mAP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
    ]
    np.testing.assert_allclose(stats, results["pycocotools"]["stats"], rtol=0, atol=1e-6)
    assert 0.15 < stats[0] < 0.6 and results["images"] == 24
    gt = json.loads((run_dir / "ground_truth.json").read_text())
    assert {im["id"] for im in gt["images"]} == {int(Path(f).stem) for f in split.read_text().split()}
    assert "pycocotools agrees" in out and "person" in out  # per-class rows with --verbose
    assert not list(run_dir.glob("*.png"))  # --no-plots
    label_files = sorted((run_dir / "labels").glob("*.txt"))
    assert len(label_files) >= 20
    row = label_files[0].read_text().split("\n")[0].split()
    assert len(row) == 6 and 0 <= int(row[0]) < 80 and all(0 <= float(v) <= 1 for v in row[1:])


def _cli(tmp_path: Path, log, *args: str) -> tuple[int, list[str]]:
    """main() with these arguments (exceptions would escape it and fail the test); its exit code and new lines."""
    log.clear()
    code = yolo_test.main([*args, "--project", str(tmp_path / "runs"), "--no-plots"])
    return code, [line for message in log.messages for line in message.splitlines()]


@pytest.mark.slow
def test_bad_inputs_give_one_line_errors(tmp_path, shared, log):
    weights = str(shared / "weights/yolov5n.pt")
    cases = []
    cases.append((["--data", str(tmp_path / "nope.yaml"), "--weights", weights], "not found"))
    cases.append(
        (
            ["--data", str(data_yaml(tmp_path, shared, name="w.yaml")), "--weights", str(tmp_path / "missing.pt")],
            "not found",
        )
    )
    cases.append(
        (
            ["--data", str(data_yaml(tmp_path, shared, val="images/nope", name="split.yaml")), "--weights", weights],
            "does not exist",
        )
    )
    (tmp_path / "empty").mkdir()
    cases.append(
        (
            [
                "--data",
                str(data_yaml(tmp_path, shared, val=str(tmp_path / "empty"), name="empty.yaml")),
                "--weights",
                weights,
            ],
            "no images",
        )
    )
    corrupt = tmp_path / "corrupt/images"
    corrupt.mkdir(parents=True)
    for i in range(3):
        (corrupt / f"{i}.jpg").write_bytes(b"not an image" * 10)
    cases.append(
        (
            ["--data", str(data_yaml(tmp_path, shared, val=str(corrupt), name="corrupt.yaml")), "--weights", weights],
            "corrupt",
        )
    )
    cases.append(
        (["--data", str(data_yaml(tmp_path, shared, nc=3, name="nc3.yaml")), "--weights", weights], "80 classes")
    )
    cases.append((["--data", str(data_yaml(tmp_path, shared, name="now.yaml"))], "--weights"))
    gt = str(shared / "datasets/coco128/annotations/instances_train2017.json")
    bad_preds = tmp_path / "bad_preds.json"
    bad_preds.write_text(json.dumps([{"image_id": 123456789, "category_id": 1, "bbox": [0, 0, 5, 5], "score": 0.5}]))
    cases.append((["--ann-json", gt, "--pred-json", str(bad_preds)], "123456789"))
    cases.append((["--pred-json", str(bad_preds)], "--ann-json"))
    for args, expected in cases:
        code, lines = _cli(tmp_path, log, *args)
        errors = [line for line in lines if line.startswith("ERROR")]
        assert code == 1 and len(errors) == 1 and expected in errors[0], (args, lines[-5:])


def test_score_an_existing_results_file(tmp_path, shared, log):
    gt = shared / "datasets/coco128/annotations/instances_train2017.json"
    preds = shared / "reference/coco128_yolov5n_640_predictions.json"
    code, lines = _cli(tmp_path, log, "--ann-json", str(gt), "--pred-json", str(preds))
    assert code == 0 and " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.370" in lines
    results = json.loads((tmp_path / "runs/exp/results.json").read_text())
    assert abs(results["metrics"]["mAP50-95"] - REFERENCE_AP) < 5e-5
    assert abs(results["metrics"]["mAP50"] - REFERENCE_AP50) < 5e-5


@pytest.mark.slow
def test_single_class_and_speed_task(tmp_path, shared, log):
    from utils.torch_utils import cpu_supports_bf16

    split = image_list(tmp_path, shared, 6)
    data = data_yaml(tmp_path, shared, val=str(split))  # ann_json is not used for --single-cls
    weights = str(shared / "weights/yolov5n.pt")
    code, lines = _cli(
        tmp_path,
        log,
        "--data",
        str(data),
        "--weights",
        weights,
        "--img",
        "192",
        "--batch-size",
        "3",
        "--single-cls",
        "--save-json",
        "--workers",
        "0",
        "--name",
        "single",
    )
    assert code == 0
    results = json.loads((tmp_path / "runs/single/results.json").read_text())
    assert list(results["per_class"]) == ["item"] and results["instances"] > 10
    np.testing.assert_allclose(results["metrics"]["mAP50-95"], results["pycocotools"]["stats"][0], atol=1e-6)
    # --bf16 runs bfloat16 autocast on CPUs that have the instructions, else float32 with a warning
    code, lines = _cli(
        tmp_path,
        log,
        "--data",
        str(data),
        "--weights",
        weights,
        "--img",
        "192",
        "--task",
        "speed",
        "--workers",
        "0",
        "--name",
        "speed",
        "--bf16",
    )
    assert code == 0 and any(line.startswith("Speed:") and "(6, 3, 192, 192)" in line for line in lines)
    assert cpu_supports_bf16() or any("--bf16 needs a CPU" in line for line in lines)


def _map(tmp_path: Path, log, data: Path, name: str, *weights_and_flags: str) -> dict:
    """test.py on data at 320 (4 images a batch, no workers); results.json's metrics."""
    args = ["--data", str(data), "--img", "320", "--batch-size", "4", "--workers", "0", "--name", name]
    code, lines = _cli(tmp_path, log, *args, "--weights", *weights_and_flags)
    assert code == 0, lines[-5:]
    return json.loads((tmp_path / f"runs/{name}/results.json").read_text())["metrics"]


@pytest.mark.slow
def test_ensemble_of_the_same_weights_and_augment(tmp_path, shared, log):
    """--weights a a scores as a alone (NMS merges the duplicates); --augment runs and scores about as well."""
    data = data_yaml(tmp_path, shared, val=str(image_list(tmp_path, shared, 8)))
    weights = str(shared / "weights/yolov5n.pt")
    plain = _map(tmp_path, log, data, "plain", weights)
    pair = _map(tmp_path, log, data, "pair", weights, weights)
    augmented = _map(tmp_path, log, data, "tta", weights, "--augment")
    assert plain["mAP50-95"] > 0.2
    assert abs(pair["mAP50-95"] - plain["mAP50-95"]) < 0.002 and abs(pair["mAP50"] - plain["mAP50"]) < 0.002
    assert abs(augmented["mAP50-95"] - plain["mAP50-95"]) < 0.1 and augmented["mAP50-95"] != plain["mAP50-95"]
    pair_tta = _map(tmp_path, log, data, "pair_tta", weights, weights, "--augment")
    assert abs(pair_tta["mAP50-95"] - augmented["mAP50-95"]) < 0.002


def test_ensemble_of_different_class_lists_is_one_line(tmp_path, shared, log):
    other = tmp_path / "three.pt"
    save_checkpoint(checkpoint_dict(Model("yolov5n.yaml", nc=3).eval()), other)
    data = data_yaml(tmp_path, shared, val=str(image_list(tmp_path, shared, 2)))
    code, lines = _cli(tmp_path, log, "--data", str(data), "--weights", str(shared / "weights/yolov5n.pt"), str(other))
    errors = [line for line in lines if line.startswith("ERROR")]
    assert code == 1 and len(errors) == 1 and "80 classes" in errors[0] and "3 classes" in errors[0], lines[-5:]


@pytest.mark.parametrize("model", ["yolo11n-seg", "yolov5n-seg"])
def test_a_segment_model_reports_box_and_mask_metrics(tmp_path, shared, log, model):
    """A segment checkpoint (random weights: a low threshold gives it detections) on coco128 against the official
    JSON: the table's mask columns, results.json's mask_metrics (metrics' keys), predictions.json's RLEs, and
    pycocotools' segm numbers on them equal to the mask metrics."""
    weights = shared / f"reference/seg/{model}_random.pt"
    data = data_yaml(tmp_path, shared, val=str(image_list(tmp_path, shared, 6)))
    args = ["--data", str(data), "--img", "160", "--workers", "0", "--conf-thres", "0.0001", "--save-json"]
    code, lines = _cli(tmp_path, log, *args, "--weights", str(weights), "--name", model)
    assert code == 0, lines[-5:]
    assert any("Box(P" in line and "Mask(P" in line for line in lines)
    run = tmp_path / "runs" / model
    results = json.loads((run / "results.json").read_text())
    assert set(results["mask_metrics"]) == set(results["metrics"]) and "mask_per_class" in results
    predictions = json.loads((run / "predictions.json").read_text())
    assert len(predictions) > 100 and all(set(p["segmentation"]) == {"size", "counts"} for p in predictions)
    ann_json = shared / "datasets/coco128/annotations/instances_train2017.json"
    ids = [int(Path(f).stem) for f in (tmp_path / "first6.txt").read_text().split()]
    segm = pycocotools_stats(ann_json, run / "predictions.json", image_ids=ids, iou_type="segm")
    mask_metrics = [results["mask_metrics"][k] for k in ("mAP50-95", "mAP50", "mAP75")]
    assert np.abs(segm[:3] - mask_metrics).max() <= 1e-4 and results["pycocotools"]["segm_stats"] == segm.tolist()
