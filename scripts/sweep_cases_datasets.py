"""The sweep's dataset cases (issue 26): COCO JSON and Pascal VOC splits that are malformed, truncated, several GB,
name missing images or unknown categories, hold NaN or negative boxes or repeated image ids, or carry an XML
entity bomb; the converter asked to write into its source; training on annotations with no usable box.
Every case name starts with 'dataset '. See scripts/bad_input_sweep.py, which registers dataset_cases.
"""

import json
import shutil
from pathlib import Path

from sweep_common import COCO, Case, Sweep, _no_file

BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n<!ENTITY lol "lol">\n'
    + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n' for i in range(1, 10))
    + "]>\n<annotation><size><width>640</width><height>480</height></size>"
    + "<object><name>&lol9;</name></object></annotation>\n"
)


def _says(*words: str):
    """A check that the output holds every one of words."""
    return lambda out: "" if all(w in out for w in words) else f"output lacks {words}"


def _coco_subset(n: int) -> tuple[list[str], dict]:
    """The first n COCO128 images and their official annotations (a COCO JSON as a dict)."""
    gt = json.loads((COCO / "annotations" / "instances_train2017.json").read_text())
    images = sorted(gt["images"], key=lambda im: im["file_name"])[:n]
    ids = {im["id"] for im in images}
    annotations = [a for a in gt["annotations"] if a["image_id"] in ids]
    names = [im["file_name"] for im in images]
    return names, {"images": images, "annotations": annotations, "categories": gt["categories"]}


def _coco_root(tmp: Path, n: int = 8) -> tuple[Path, dict]:
    root = tmp / "ds_coco"
    (root / "images").mkdir(parents=True)
    (root / "annotations").mkdir()
    names, gt = _coco_subset(n)
    for name in names:
        shutil.copy(COCO / "images" / "train2017" / name, root / "images" / name)
    return root, gt


def _data_yaml(root: Path, name: str, split: str, **extra) -> str:
    file = root.parent / f"{name}.yaml"
    lines = [f"path: {root}", f"train: {split}", f"val: {split}"] + [f"{k}: {v}" for k, v in extra.items()]
    file.write_text("\n".join(lines) + "\n")
    return str(file)


def _bad_jsons(root: Path, gt: dict) -> dict[str, str]:
    """Annotation files of each bad kind, as text, beside the good one (instances.json)."""
    text = json.dumps(gt)
    first = gt["images"][0]
    missing = {**gt, "images": gt["images"] + [{**first, "id": 999_999_001, "file_name": "absent.jpg"}]}
    missing["annotations"] = gt["annotations"] + [{**gt["annotations"][0], "id": 1, "image_id": 999_999_002}]
    unknown = {**gt, "annotations": gt["annotations"] + [{**gt["annotations"][0], "id": 2, "category_id": 4242}]}
    nan_box = {**gt["annotations"][0], "id": 3, "bbox": [float("nan"), 10, 20, 20]}
    negative = {**gt["annotations"][0], "id": 4, "bbox": [10, 10, -20, 20]}
    return {
        "instances": text,
        "malformed": text.replace('"images"', "'images'", 1),
        "truncated": text[: len(text) // 2],
        "missing_image": json.dumps(missing),
        "unknown_category": json.dumps(unknown),
        "nan_negative": json.dumps({**gt, "annotations": gt["annotations"] + [nan_box, negative]}),  # NaN as JSON's NaN
        "duplicate_ids": json.dumps(
            {**gt, "images": gt["images"] + [{**first, "file_name": gt["images"][1]["file_name"]}]}
        ),
        "no_boxes": json.dumps({**gt, "annotations": []}),
    }


def _sparse_json(folder: Path, gigabytes: int) -> Path:
    """A JSON file of `gigabytes` GB on paper (sparse: no disk used), outside the hashed work folder."""
    folder.mkdir(parents=True, exist_ok=True)
    big = folder / "instances_huge.json"
    with open(big, "wb") as f:
        f.write(b'{"images": [')
        f.truncate(gigabytes << 30)
    return big


def _voc_root(tmp: Path, gt: dict) -> Path:
    """A VOC copy of the COCO subset (crowd as difficult) plus a bomb, a malformed and a truncated XML."""
    root = tmp / "ds_voc"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    cats = {c["id"]: c["name"] for c in gt["categories"]}
    ids = []
    for im in gt["images"]:
        stem = Path(im["file_name"]).stem
        ids.append(stem)
        shutil.copy(COCO / "images" / "train2017" / im["file_name"], root / "JPEGImages" / im["file_name"])
        objects = "".join(
            f"<object><name>{cats[a['category_id']]}</name><difficult>{int(bool(a['iscrowd']))}</difficult><bndbox>"
            f"<xmin>{a['bbox'][0] + 1}</xmin><ymin>{a['bbox'][1] + 1}</ymin><xmax>{a['bbox'][0] + a['bbox'][2] + 1}"
            f"</xmax><ymax>{a['bbox'][1] + a['bbox'][3] + 1}</ymax></bndbox></object>"
            for a in gt["annotations"]
            if a["image_id"] == im["id"]
        )
        size = f"<size><width>{im['width']}</width><height>{im['height']}</height></size>"
        (root / "Annotations" / f"{stem}.xml").write_text(f"<annotation>{size}{objects}</annotation>\n")
    bad = {"bomb": BILLION_LAUGHS, "malformed": "<annotation><size></annotation>", "truncated": "<annotation><si"}
    for stem, text in bad.items():
        shutil.copy(COCO / "images" / "train2017" / gt["images"][0]["file_name"], root / "JPEGImages" / f"{stem}.jpg")
        (root / "Annotations" / f"{stem}.xml").write_text(text)
    (root / "ImageSets" / "Main" / "train.txt").write_text("\n".join(ids + list(bad)) + "\n")
    names = "[" + ", ".join(json.dumps(cats[k]) for k in sorted(cats)) + "]"
    _data_yaml(root, "voc_bad", "ImageSets/Main/train.txt", names=names)
    return root


def _convert(yaml_file: str, out: Path) -> list[str]:
    return ["convert_dataset.py", "--data", yaml_file, "--out", str(out)]


def _val_without_images(root: Path, gt: dict, train: list[str]) -> Case:
    """Training on a data YAML whose train split (a copy of the JSON) is cached before its val folder, which holds no
    image, fails: the run must remove that new cache (it fails on the code before the clean-up)."""
    (root / "annotations" / "train_only.json").write_text(json.dumps(gt))
    (root / "no_images").mkdir(exist_ok=True)
    data = root.parent / "coco_bad_val.yaml"
    data.write_text(f"path: {root}\ntrain: annotations/train_only.json\nval: no_images\nimages: images\n")
    left_no_cache = _no_file(root / "annotations" / "train_only.yolo-labels.npz")
    return Case(
        "dataset train whose val folder holds no image, after the train split was cached (no cache left)",
        ["train.py", "--data", str(data), *train, "--name", "bad_val"],
        "error",
        lambda out: _says("no_images")(out) or left_no_cache(out),
    )


def dataset_cases(sweep: Sweep) -> list[Case]:
    """Every dataset case, building its fixtures (8 COCO128 images as COCO JSON and as VOC) under the sweep."""
    tmp = sweep.work
    root, gt = _coco_root(tmp)
    yamls = {}
    for name, text in _bad_jsons(root, gt).items():
        (root / "annotations" / f"{name}.json").write_text(text)
        yamls[name] = _data_yaml(root, f"coco_{name}", f"annotations/{name}.json", images="images")
    huge = _sparse_json(sweep.work.parent / "sparse", 5)
    yamls["huge"] = _data_yaml(root, "coco_huge", str(huge), images="images", names="[person]")
    voc = _voc_root(tmp, gt)
    out = tmp / "runs_datasets"
    skipped = _says("WARNING", "skipped")
    train = ["--img", "64", "--epochs", "1", "--batch-size", "4", "--workers", "0", "--project", str(out)]
    train += ["--weights", "", "--cfg", "yolov5n.yaml"]
    cases = [
        Case("dataset COCO JSON malformed", _convert(yamls["malformed"], out / "c1"), "error", _says("not valid JSON")),
        Case("dataset COCO JSON truncated", _convert(yamls["truncated"], out / "c2"), "error", _says("not valid JSON")),
        Case(
            "dataset COCO JSON of 5 GB (refused by its size)",
            _convert(yamls["huge"], out / "c3"),
            "error",
            _says("more than the 2147483648 bytes"),
            hostile=True,
        ),
        Case(
            "dataset COCO annotation naming a missing image",
            _convert(yamls["missing_image"], out / "c4"),
            "ok",
            skipped,
        ),
        Case("dataset COCO unknown category id", _convert(yamls["unknown_category"], out / "c5"), "ok", skipped),
        Case("dataset COCO NaN and negative boxes", _convert(yamls["nan_negative"], out / "c6"), "ok", skipped),
        Case("dataset COCO duplicate image ids", _convert(yamls["duplicate_ids"], out / "c7"), "error"),
        Case(
            "dataset VOC entity bomb, malformed and truncated XML (skipped)",
            _convert(str(voc.parent / "voc_bad.yaml"), out / "v1"),
            "ok",
            _says("3 unusable XML files", "DTDForbidden"),
            hostile=True,
        ),
        Case("dataset convert into the source", _convert(yamls["instances"], root / "yolo"), "error"),
        Case(
            "dataset convert into a non-empty folder", _convert(yamls["instances"], voc), "error", _says("not an empty")
        ),
        Case(
            "dataset train on a COCO JSON (1 epoch, 64 px)",
            ["train.py", "--data", yamls["instances"], *train, "--name", "coco"],
            "ok",
        ),
        Case(
            "dataset train on a COCO JSON without boxes (no cache left)",
            ["train.py", "--data", yamls["no_boxes"], *train, "--name", "empty"],
            "error",
            _no_file(root / "annotations" / "no_boxes.yolo-labels.npz"),
        ),
        _val_without_images(root, gt, train),
    ]
    return cases


if __name__ == "__main__":
    raise SystemExit("run scripts/bad_input_sweep.py -k '^dataset '")
