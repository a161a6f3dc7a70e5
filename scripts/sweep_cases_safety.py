"""Issue 16's sweep cases for scripts/bad_input_sweep.py: nothing a user owns is changed, hostile files are bounded,
paths are never swapped, the URL cache is keyed on the whole URL, broken exports and odd files end in one line.

Each group says which item of the issue it covers; together they run every command that reads or writes files
(train.py, test.py, detect.py, export.py, hubconf and the Detector) on these classes of input. The harness hashes
every input before and after each case, so a case only has to name where it may write (allow=...).
"""

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from sweep_cases_files import broken_export_cases, image_cases, int8_cases, more_cases, special_file_cases
from sweep_common import COCO, ROOT, WEIGHTS, Case, Sweep, _coco_names
from sweep_safety_fixtures import (
    BUS,
    SMALL,
    ZIDANE,
    Fixtures,
    _all,
    _contains,
    _label_files,
    _run_folders,
    _write,
    api,
    error,
    ok,
    serve_folder,
    yaml_bomb,
)


def generate_cases(f: Fixtures) -> list[Case]:
    mine = f.folder("item1")
    for kind in ("images", "labels"):
        shutil.copytree(f.root / "shapes" / kind / "train", mine / "mydata" / kind / "train")
    (mine / "notes").mkdir()
    (mine / "notes" / "notes.txt").write_text("my notes\n")

    def data(name: str, root: Path, val: str, names: list[str]) -> Path:
        content = {"path": str(root), "train": "images/train", "val": val, "names": names, "generate": "shapes"}
        return _write(mine / f"{name}.yaml", content)

    typo, letters = data("typo", mine / "mydata", "images/vall", list("abcde")), ["--batch-size", "32"]
    coco_typo = data("coco_typo", mine / "mydata", "images/vall", _coco_names())
    notes, fresh = (data(name, mine / name, "images/val", ["a"]) for name in ("notes", "fresh"))
    name = "1 generate: shapes"
    return [
        error(f"{name}, dataset with a typo'd split (train.py)", f.train("--data", str(typo))),
        error(f"{name}, dataset with a typo'd split (test.py)", f.test(coco_typo)),
        error(f"{name} into a folder of the user's notes", f.train("--data", str(notes))),
        ok(
            f"{name} into an absent folder still works", f.train("--data", str(fresh), *letters), allow=[mine / "fresh"]
        ),
    ]


def resume_cases(f: Fixtures) -> list[Case]:
    home, copied = f.folder("item2/home"), f.folder("item2/copied_run")
    for folder in (home, copied):
        (folder / "hyp.yaml").write_text("lr0: 0.5  # my own notes\n")
        (folder / "opt.yaml").write_text("my: options\n")
        (folder / "results.csv").write_text("my,own,table\n1,2,3\n")
    (home / "Downloads").mkdir()
    (copied / "weights").mkdir()
    project = f.runs / "resumed"

    def resume(last: Path, name: str) -> tuple[list[str], Callable[[], None]]:
        argv = ["train.py", "--resume", str(last), "--project", str(project), "--name", name]
        return argv, lambda: None if last.is_file() else shutil.copy(f.resumable, last)

    downloads, setup = resume(home / "Downloads" / "last.pt", "dl")
    by_hand, setup_copied = resume(copied / "weights" / "last.pt", "cp")
    return [
        ok(
            "2 train --resume ~/Downloads/last.pt (user's hyp/opt/results beside)",
            downloads,
            _run_folders(project, {"dl"}, ["1"]),
            setup=setup,
            timeout=400,
        ),
        ok("2 train --resume of a run folder copied by hand (no marker)", by_hand, setup=setup_copied, timeout=400),
    ]


def _exist_ok_fixtures(item: Path) -> Path:
    """Photo folders, a flat dataset (images/*.jpg, labels/*.txt, no splits) and a file in item; the flat data YAML."""
    for folder, images in (("photos", (BUS, ZIDANE)), ("two", (BUS, ZIDANE)), ("one", (BUS,))):
        (item / folder).mkdir()
        for image in images:
            shutil.copy(image, item / folder / image.name)
    flat = item / "flat"
    for kind in ("images", "labels"):
        (flat / kind).mkdir(parents=True)
    for image in sorted((COCO / "images" / "train2017").glob("*.jpg"))[:4]:
        shutil.copy(image, flat / "images")
        shutil.copy(COCO / "labels" / "train2017" / f"{image.stem}.txt", flat / "labels")
    (item / "a_file").write_text("not a folder\n")
    return _write(item / "flat.yaml", {"path": str(flat), "train": "images", "val": "images", "names": _coco_names()})


def exist_ok_cases(f: Fixtures) -> list[Case]:
    item = f.folder("item3")
    flat_yaml = _exist_ok_fixtures(item)
    photos, into_item = item / "photos", ["--project", str(item)]
    rerun = ["--save-txt", "--name", "rerun", "--exist-ok"]
    own = f.runs / "own"
    make_own = lambda: f.run(f.detect(item / "two", "--name", "own"))  # noqa: E731
    into_file = ["--project", str(item / "a_file")]
    return [
        error(
            "3 detect --project/--name = the source folder --exist-ok",
            f.detect(photos, *into_item, "--name", "photos", "--exist-ok"),
        ),
        ok(
            "3 detect --project/--name = the source folder (new photos2)",
            f.detect(photos, *into_item, "--name", "photos", "--save-txt"),
            allow=[item / "photos2"],
        ),
        error(
            "3 test --save-txt --exist-ok into a flat dataset",
            f.test(flat_yaml, "--save-txt", "--exist-ok", *into_item, "--name", "flat"),
        ),
        ok(
            "3 test --save-txt, --project/--name = the dataset (new flat2)",
            f.test(flat_yaml, "--save-txt", *into_item, "--name", "flat"),
            allow=[item / "flat2"],
        ),
        ok(
            "3 detect --exist-ok rerun counts only its own labels",
            f.detect(item / "one", *rerun),
            _all(_contains(", 1 label file in"), _label_files(f.runs / "rerun" / "labels", 1)),
            setup=lambda: f.run(f.detect(item / "two", *rerun)),
        ),
        Case(
            "3 detect --source = its own run folder --exist-ok",
            f.detect(own, "--name", "own", "--exist-ok"),
            "clean",
            protect=[own / "bus.jpg", own / "zidane.jpg"],
            setup=make_own,
        ),
        error(
            "3 train --project/--name = a dataset folder --exist-ok",
            f.train("--data", str(f.shapes), *into_item, "--name", "flat", "--exist-ok"),
        ),
        error("3 detect --project that is a file", f.detect(BUS, *into_file)),
        error("3 test --project that is a file", f.test(flat_yaml, *into_file)),
        error("3 train --project that is a file", f.train("--data", str(f.shapes), *into_file)),
    ]


def export_safety_cases(f: Fixtures) -> list[Case]:
    folders = {name: f.folder(f"item4/{name}") for name in ("ov", "onnx_ov", "onnx", "ts", "again")}
    for folder in folders.values():
        shutil.copy(WEIGHTS, folder / "yolov5n.pt")
    (folders["ov"] / "yolov5n_openvino_model").mkdir()
    (folders["ov"] / "yolov5n_openvino_model" / "my_notes.txt").write_text("mine\n")
    for name in ("onnx_ov", "onnx"):
        (folders[name] / "yolov5n.onnx").write_bytes(b"my own model, not an export of these weights\n")
    (folders["ts"] / "yolov5n.torchscript").write_bytes(b"my own file\n")

    def export(name: str, *formats: str) -> list[str]:
        return ["export.py", "--weights", str(folders[name] / "yolov5n.pt"), *SMALL, "--include", *formats]

    again = folders["again"] / "yolov5n.onnx"
    return [
        error(
            "4 export openvino over a user's <stem>_openvino_model/",
            export("ov", "openvino"),
            _contains(str(folders["ov"] / "yolov5n_openvino_model")),
        ),
        ok(
            "4 export openvino beside a user's <stem>.onnx (not asked for)",
            export("onnx_ov", "openvino"),
            allow=[folders["onnx_ov"] / "yolov5n_openvino_model"],
        ),
        error(
            "4 export onnx over a user's <stem>.onnx",
            export("onnx", "onnx"),
            _contains(str(folders["onnx"] / "yolov5n.onnx")),
        ),
        error("4 export torchscript over a user's <stem>.torchscript", export("ts", "torchscript")),
        ok(
            "4 export onnx again over its own earlier export",
            export("again", "onnx"),
            allow=[again],
            setup=lambda: again.exists() or f.run(export("again", "onnx")),
        ),
        error("4 export --weights a folder", ["export.py", "--weights", str(folders["ov"])]),
    ]


def yaml_bomb_cases(f: Fixtures) -> list[Case]:
    item = f.folder("item5")
    data = item / "data_bomb.yaml"
    data.write_text(yaml_bomb(f"path: {COCO}\ntrain: images/train2017\nval: images/train2017\n", "names"))
    hyp = item / "hyp_bomb.yaml"
    scratch = (ROOT / "data" / "hyp.scratch.yaml").read_text().splitlines(True)
    hyp.write_text(yaml_bomb("".join(line for line in scratch if not line.startswith("fl_gamma")), "fl_gamma"))
    cfg = item / "cfg_bomb.yaml"
    cfg.write_text(yaml_bomb((ROOT / "models" / "yolov5n.yaml").read_text() + "\n", "notes"))
    deep = item / "deep.yaml"
    deep.write_text(f"path: {'[' * 100_000}{']' * 100_000}\ntrain: a\nval: a\nnames: [a]\n")
    big = item / "big.yaml"
    big.write_text("names: [a]\n" + "# padding\n" * 600_000)  # 6 MB: over the 4 MiB cap of a YAML file
    shapes = ["--data", str(f.shapes)]
    cases = [
        error("5 test --data alias bomb", f.test(data)),
        error("5 train --data alias bomb", f.train("--data", str(data))),
        error("5 train --hyp alias bomb", f.train(*shapes, "--hyp", str(hyp))),
        error("5 train --cfg alias bomb", f.train(*shapes, "--cfg", str(cfg))),
        error("5 test --data nested 100000 deep", f.test(deep)),
        error("5 test --data of 6 MB", f.test(big)),
    ]
    folder = f.root / "item5_ov" / "yolov5n_openvino_model"

    def build() -> None:
        if not folder.exists():
            f.openvino_copy("item5_ov")
            meta = yaml.safe_load((folder / "metadata.yaml").read_text())
            head = yaml.safe_dump({k: v for k, v in meta.items() if k != "names"}, sort_keys=False)
            (folder / "metadata.yaml").write_text(yaml_bomb(head, "names"))

    cases += [
        error("5 detect OpenVINO metadata.yaml alias bomb", f.detect(BUS, *SMALL, weights=folder), setup=build),
        error("5 test OpenVINO metadata.yaml alias bomb", f.test(f.coco, weights=folder), setup=build),
    ]
    for case in cases:
        case.hostile, case.timeout = True, 120
    return cases


def checkpoint_bomb_cases(f: Fixtures) -> list[Case]:
    """Every crafted .pt through detect.py, export.py and train.py --weights; the zip bomb and the nested names
    also through --resume, the zip bomb and nc 10^6 through test.py, the Detector and hubconf."""
    cases = []
    for what, pt in f.crafted.items():
        cases += [
            error(f"5 detect .pt {what}", f.detect(BUS, weights=pt)),
            error(f"5 export .pt {what}", ["export.py", "--weights", str(pt), *SMALL, "--include", "onnx"]),
            error(f"5 train --weights .pt {what}", f.train("--data", str(f.coco), model=("--weights", str(pt)))),
        ]
        if what.startswith(("zip", "names nested")):
            cases.append(error(f"5 train --resume .pt {what}", ["train.py", "--resume", str(pt)]))
        if what.startswith(("zip", "nc")):
            hub = f"import torch\ntorch.hub.load({str(f.code)!r}, 'custom', path={str(pt)!r}, source='local')"
            cases += [
                error(f"5 test .pt {what}", f.test(f.coco, weights=pt)),
                error(f"5 Detector .pt {what}", api(f"from models import Detector\nDetector({str(pt)!r})")),
                error(f"5 hubconf custom .pt {what}", api(hub)),
            ]
    for case in cases:
        case.hostile, case.timeout = True, 120
    return cases


def concurrent_cases(f: Fixtures) -> list[Case]:
    project = f.runs / "together"
    argv = f.train("--data", str(f.shapes), "--project", str(project), "--name", "exp")
    check = _run_folders(project, {"exp", "exp2"}, ["0"])
    return [ok("6 two train.py runs started together, same --name", argv, check, copies=2, timeout=400)]


def swap_cases(f: Fixtures) -> list[Case]:
    """Each error must name the path given (the harness's copy of the code has weights/yolov5n.pt,
    data/coco128.yaml, data/hyp.scratch.yaml and models/yolov5n.yaml, so a swap would run instead)."""
    w, gone = str(f.missing / "yolov5n.pt"), f.missing
    data, hyp, cfg = (str(gone / name) for name in ("coco128.yaml", "hyp.scratch.yaml", "yolov5n.yaml"))
    hub = f"import torch\ntorch.hub.load({str(f.code)!r}, 'custom', path={w!r}, source='local')"
    named = _contains(str(gone))
    return [
        error("7 detect missing --weights /dir/yolov5n.pt", f.detect(BUS, weights=w), named),
        error("7 detect missing --weights sub/yolov5n.pt (relative)", f.detect(BUS, weights="sub/yolov5n.pt")),
        error("7 test missing --weights /dir/yolov5n.pt", f.test(f.coco, weights=w), named),
        error("7 export missing --weights /dir/yolov5n.pt", ["export.py", "--weights", w, *SMALL], named),
        error("7 train missing --weights /dir/yolov5n.pt", f.train("--data", str(f.coco), "--weights", w), named),
        error("7 Detector missing /dir/yolov5n.pt", api(f"from models import Detector\nDetector({w!r})"), named),
        error("7 load_model missing /dir/yolov5n.pt", api(f"from models import load_model\nload_model({w!r})"), named),
        error("7 hubconf custom missing /dir/yolov5n.pt", api(hub), named),
        error("7 test missing --data /dir/coco128.yaml", f.test(data), named),
        error("7 train missing --data /dir/coco128.yaml", f.train("--data", data), named),
        error("7 train missing --hyp /dir/hyp.scratch.yaml", f.train("--data", str(f.shapes), "--hyp", hyp), named),
        error("7 train missing --cfg /dir/yolov5n.yaml", f.train("--data", str(f.shapes), "--cfg", cfg), named),
        ok(
            "7 detect bare --weights yolov5n.pt from weights/ (said in a line)",
            f.detect(BUS, *SMALL, weights="yolov5n.pt"),
            _contains(str(f.code / "weights" / "yolov5n.pt")),
        ),
    ]


def readme_export_cases(f: Fixtures) -> list[Case]:
    """Item 13: the README's export sequence with bare names, run from a fresh copy holding weights/yolov5n.pt."""
    weights = f.code / "weights"
    export = ["export.py", "--weights", "yolov5n.pt", "--include", "onnx", "openvino", *SMALL]

    def exported() -> None:
        if not (weights / "yolov5n.onnx").exists():
            f.run(export)

    load = "from models import load_model\nprint(type(load_model('yolov5n.pt')).__name__)"
    return [
        ok("13 export --weights yolov5n.pt (only in weights/)", export, allow=[weights]),
        ok(
            "13 detect --weights yolov5n.onnx (only in weights/)",
            f.detect(BUS, *SMALL, weights="yolov5n.onnx"),
            setup=exported,
        ),
        ok(
            "13 test --weights yolov5n_openvino_model (only in weights/)",
            f.test(f.coco, weights="yolov5n_openvino_model"),
            setup=exported,
        ),
        ok("13 load_model('yolov5n.pt') as in the README", api(load), _contains("Model")),
    ]


def url_cases(f: Fixtures) -> list[Case]:
    www = f.folder("item8_www")
    for sub, image in (("a", BUS), ("b", ZIDANE)):
        (www / sub).mkdir()
        shutil.copy(image, www / sub / "img.jpg")
    base, stop = serve_folder(www)
    f.sweep.cleanups.append(stop)
    url_a, url_b = f"{base}/a/img.jpg", f"{base}/b/img.jpg"
    body = f"""
        from models import Detector
        bus, zidane = Detector({str(WEIGHTS)!r})([{url_a!r}, {url_b!r}])
        print("SHAPES", bus.orig_shape, zidane.orig_shape)
    """
    return [
        ok("8 Detector on two URLs with the same file name", api(body), _contains("SHAPES (1080, 810) (720, 1280)")),
        ok(
            "8 detect.py on a second URL with the same file name",
            f.detect(url_b),
            _contains(": 384x640 "),
            setup=lambda: f.run(f.detect(url_a, "--nosave")),
        ),
    ]


def safety_cases(sweep: Sweep) -> list[Case]:
    """Every issue-16 case, in the order of the issue's items (and issue 19's INT8 cases)."""
    f = Fixtures(sweep)
    groups = (generate_cases, resume_cases, exist_ok_cases, export_safety_cases, yaml_bomb_cases)
    groups += (checkpoint_bomb_cases, concurrent_cases, swap_cases, url_cases, broken_export_cases, image_cases)
    groups += (special_file_cases, readme_export_cases, int8_cases, more_cases)
    return [case for group in groups for case in group(f)]


if __name__ == "__main__":
    sys.exit("run scripts/bad_input_sweep.py (-k 'text' selects cases)")
