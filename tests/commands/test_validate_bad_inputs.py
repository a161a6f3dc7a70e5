"""test.py on bad input: range-checked flags (exit 2, one line), tiny datasets, unusable JSON files, an unusable
--project and repeated file stems with --save-txt. No traceback, no lost output."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)

NAMES = json.dumps([f"c{i}" for i in range(80)])


@pytest.mark.parametrize(
    "flag, value, words",
    [
        ("--conf-thres", "2", "[0, 1]"),
        ("--conf-thres", "-0.1", "[0, 1]"),
        ("--conf-thres", "nan", "finite"),
        ("--iou-thres", "5", "[0, 1]"),
        ("--max-det", "-3", ">= 1"),
        ("--max-det", "0", ">= 1"),
        ("--batch-size", "0", ">= 1"),
        ("--batch-size", "-3", ">= 1"),
        ("--img-size", "8", ">= 32"),
        ("--img", "abc", "an integer"),
        ("--workers", "-1", ">= 0"),
    ],
)
def test_flags_out_of_range_exit_2_with_one_line(tmp_path, flag, value, words, capsys):
    with pytest.raises(SystemExit) as exit_:  # before the fix most ran, so the data YAML must not exist
        yolo_test.main(["--data", str(tmp_path / "none.yaml"), "--weights", "x.pt", flag, value])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err and err.startswith("ERROR"), err
    assert ("--img-size" if flag.startswith("--img") else flag) in err and words in err, err


def _tiny(tmp_path: Path, shared: Path, corrupt: bool = True) -> Path:
    """A 4-image dataset: 3 coco128 images with labels and one corrupt file; its data YAML."""
    root = tmp_path / "tiny"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for image in sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:3]:
        shutil.copy(image, root / "images")
        shutil.copy(shared / "datasets/coco128/labels/train2017" / f"{image.stem}.txt", root / "labels")
    if corrupt:
        (root / "images/broken.jpg").write_bytes(b"not an image" * 10)
    data = tmp_path / "tiny.yaml"
    data.write_text(f"path: {root}\ntrain: images\nval: images\nnc: 80\nnames: {NAMES}\n")
    return data


def _main(tmp_path: Path, log, *args: str) -> tuple[int, list[str]]:
    log.clear()
    code = yolo_test.main([*args, "--img", "128", "--workers", "0", "--no-plots"])
    return code, [line for m in log.messages for line in m.splitlines()]


@pytest.mark.parametrize("batch", [None, "4", "32"])
def test_a_dataset_smaller_than_the_batch_after_dropping_a_corrupt_image(tmp_path, shared, log, batch):
    args = [
        "--data",
        str(_tiny(tmp_path, shared)),
        "--weights",
        str(shared / "weights/yolov5n.pt"),
        "--project",
        str(tmp_path / "runs"),
    ] + (["--batch-size", batch] if batch else [])
    code, lines = _main(tmp_path, log, *args)
    assert code == 0, lines[-5:]
    assert any("broken.jpg" in line for line in lines)  # the corrupt file is reported, not fatal
    results = json.loads((tmp_path / "runs/exp/results.json").read_text())
    assert results["images"] == 3 and results["instances"] > 0


@pytest.mark.slow
def test_unusable_json_files_are_one_line_errors(tmp_path, shared, log):
    data = _tiny(tmp_path, shared, corrupt=False)
    weights = str(shared / "weights/yolov5n.pt")
    gt = str(shared / "datasets/coco128/annotations/instances_train2017.json")
    files = {
        "list.json": ([1, 2], "not a COCO annotations file"),
        "keys.json": ({"annotations": []}, "needs 'images' and 'categories'"),
        "empty.json": ({"images": [], "annotations": [], "categories": [{"id": 1}]}, "'images' list is empty"),
    }
    cases = []
    for name, (content, words) in files.items():
        (tmp_path / name).write_text(json.dumps(content))
        cases.append((["--data", str(data), "--weights", weights, "--ann-json", str(tmp_path / name)], words))
    (tmp_path / "broken.json").write_text("{not json")
    cases.append(
        (["--data", str(data), "--weights", weights, "--ann-json", str(tmp_path / "broken.json")], "cannot read")
    )
    predictions = {
        "nan.json": (
            '[{"image_id": 9, "category_id": 1, "bbox": [NaN, 0, 5, 5], "score": 0.5}]',
            "detection 0 has a non-finite bbox",
        ),
        "eight.json": (
            json.dumps([{"image_id": 9, "category_id": 1, "bbox": [0, 0, 5, 5, 1, 1, 1, 1], "score": 0.5}]),
            "not [x, y, w, h]",
        ),
        "score.json": (
            '[{"image_id": 9, "category_id": 1, "bbox": [0, 0, 5, 5], "score": Infinity}]',
            "non-finite score",
        ),
        "dict.json": ('{"a": 1}', "list of detections"),
        "keys.json": ('[{"image_id": 9}]', "category_id"),
    }
    for name, (text, words) in predictions.items():
        (tmp_path / f"pred_{name}").write_text(text)
        cases.append((["--ann-json", gt, "--pred-json", str(tmp_path / f"pred_{name}")], words))
    for args, words in cases:
        code, lines = _main(tmp_path, log, *args, "--project", str(tmp_path / "runs"))
        errors = [line for line in lines if line.startswith("ERROR")]
        assert code == 1 and len(errors) == 1 and words in errors[0], (args, lines[-3:])


@pytest.mark.slow
def test_project_that_is_a_file(tmp_path, shared, log):
    (tmp_path / "file").write_text("x")
    data = _tiny(tmp_path, shared, corrupt=False)
    gt = str(shared / "datasets/coco128/annotations/instances_train2017.json")
    preds = str(shared / "reference/coco128_yolov5n_640_predictions.json")
    for args in (
        ["--data", str(data), "--weights", str(shared / "weights/yolov5n.pt")],
        ["--ann-json", gt, "--pred-json", preds],
    ):
        code, lines = _main(tmp_path, log, *args, "--project", str(tmp_path / "file"))
        errors = [line for line in lines if line.startswith("ERROR")]
        assert code == 1 and len(errors) == 1 and "cannot create the results folder" in errors[0], lines[-3:]
    assert (tmp_path / "file").read_text() == "x"


def test_save_txt_keeps_every_label_file_for_repeated_stems(tmp_path, shared, log):
    images = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:3]
    for folder, image, name in (("a", images[0], "x.jpg"), ("b", images[1], "x.jpg"), ("a", images[2], "x.png")):
        (tmp_path / folder).mkdir(exist_ok=True)
        shutil.copy(image, tmp_path / folder / name)
    split = tmp_path / "list.txt"
    split.write_text("".join(f"{tmp_path / p}\n" for p in ("a/x.jpg", "b/x.jpg", "a/x.png")))
    data = tmp_path / "dup.yaml"
    data.write_text(f"path: {tmp_path}\ntrain: list.txt\nval: list.txt\nnc: 80\nnames: {NAMES}\n")
    code, lines = _main(
        tmp_path,
        log,
        "--data",
        str(data),
        "--weights",
        str(shared / "weights/yolov5n.pt"),
        "--save-txt",
        "--conf-thres",
        "0.25",
        "--project",
        str(tmp_path / "runs"),
    )
    assert code == 0, lines[-3:]
    labels = sorted(p.name for p in (tmp_path / "runs/exp/labels").glob("*.txt"))
    assert labels == ["x.txt", "x_2.txt", "x_3.txt"]
    assert len({(tmp_path / "runs/exp/labels" / n).read_text() for n in labels}) == 3  # three images' boxes
    assert any("share a file stem" in line for line in lines)


def test_single_cls_with_an_explicit_ann_json_warns(tmp_path, shared, log):
    data = _tiny(tmp_path, shared, corrupt=False)
    gt = str(shared / "datasets/coco128/annotations/instances_train2017.json")
    code, lines = _main(
        tmp_path,
        log,
        "--data",
        str(data),
        "--weights",
        str(shared / "weights/yolov5n.pt"),
        "--single-cls",
        "--ann-json",
        gt,
        "--project",
        str(tmp_path / "runs"),
    )
    assert code == 0 and any("--ann-json" in line and "not used with --single-cls" in line for line in lines)


def test_missing_test_split(tmp_path, shared, log):
    data = _tiny(tmp_path, shared, corrupt=False)
    code, lines = _main(
        tmp_path,
        log,
        "--data",
        str(data),
        "--weights",
        str(shared / "weights/yolov5n.pt"),
        "--task",
        "test",
        "--project",
        str(tmp_path / "runs"),
    )
    errors = [line for line in lines if line.startswith("ERROR")]
    assert code == 1 and len(errors) == 1 and "no 'test' split" in errors[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB.\nOf the allocated memory 3 GiB is allocated by PyTorch"
        ),
        MemoryError(),
    ],
)
def test_out_of_memory_is_one_line(monkeypatch, tmp_path, log, error):
    def no_memory(**kwargs):
        raise error

    monkeypatch.setattr(yolo_test, "run", no_memory)
    code = yolo_test.main(["--data", str(tmp_path / "d.yaml"), "--weights", "w.pt"])
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert code == 1 and len(errors) == 1 and "\n" not in errors[0] and "--batch-size" in errors[0], errors


def test_annotations_with_a_non_finite_box(tmp_path, shared, log):
    data = json.loads((shared / "datasets/coco128/annotations/instances_train2017.json").read_text())
    data["annotations"][5]["bbox"][2] = float("nan")
    (tmp_path / "nan.json").write_text(json.dumps(data))
    code, lines = _main(
        tmp_path,
        log,
        "--data",
        str(_tiny(tmp_path, shared, corrupt=False)),
        "--weights",
        str(shared / "weights/yolov5n.pt"),
        "--ann-json",
        str(tmp_path / "nan.json"),
        "--project",
        str(tmp_path / "runs"),
    )
    errors = [line for line in lines if line.startswith("ERROR")]
    assert code == 1 and len(errors) == 1 and "annotation 5 has a non-finite bbox" in errors[0], lines[-3:]
