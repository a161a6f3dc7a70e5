"""Sweep cases for files a run reads (issue 16 items 9-10, issue 19's INT8 inputs): damaged exports, images with
EXIF and odd formats, FIFOs, devices and symlink loops, INT8 exports without calibration data. See
scripts/bad_input_sweep.py.
"""

import functools
import os
import re
import shutil
from pathlib import Path

from sweep_common import WEIGHTS, Case, _coco_names, _copy_dataset, _data_yaml
from sweep_safety_fixtures import (
    BUS,
    SMALL,
    Fixtures,
    _contains,
    _dataset_images,
    _images_done,
    _write,
    api,
    error,
    ok,
    png_bomb,
    rotated_copies,
)

from utils.data.shapes import write_data_yaml


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


OPENVINO_DAMAGE = {
    "truncated .bin": lambda d: _truncate(d / "yolov5n.bin"),
    "corrupt .xml": lambda d: (d / "yolov5n.xml").write_bytes(b"<?xml version='1.0'?><net><layers><lay"),
    "metadata.yaml syntax error": lambda d: (d / "metadata.yaml").write_text("names: [unclosed\nstride: 32\n"),
    "metadata.yaml names not a list": lambda d: (d / "metadata.yaml").write_text("stride: 32\nnames: 7\n"),
    "no metadata.yaml": lambda d: (d / "metadata.yaml").unlink(),
}


def broken_export_cases(f: Fixtures) -> list[Case]:
    cases = []
    for what, damage in OPENVINO_DAMAGE.items():
        name = "item9_" + re.sub(r"\W+", "_", what)
        folder = f.root / name / "yolov5n_openvino_model"
        build = functools.partial(lambda d, n, fn: d.exists() or fn(f.openvino_copy(n)), folder, name, damage)
        cases += [
            error(f"9 detect OpenVINO {what}", f.detect(BUS, *SMALL, weights=folder), setup=build),
            error(f"9 test OpenVINO {what}", f.test(f.coco, weights=folder), setup=build),
        ]
        if what == "truncated .bin":
            cases.append(
                error(
                    f"9 Detector OpenVINO {what}",
                    api(f"from models import Detector\nDetector({str(folder)!r})"),
                    setup=build,
                )
            )
    item = f.root / "item9_files"
    files = {suffix: item / f"yolov5n{suffix}" for suffix in (".onnx", ".torchscript")}

    def truncated() -> None:
        item.mkdir(exist_ok=True)
        for suffix, dst in files.items():
            if not dst.exists():
                shutil.copy(f.exports[suffix], dst)
                _truncate(dst)

    for suffix, file in files.items():
        cases += [
            error(f"9 detect truncated {suffix}", f.detect(BUS, *SMALL, weights=file), setup=truncated),
            error(f"9 test truncated {suffix}", f.test(f.coco, weights=file), setup=truncated),
        ]
    for shape in ((1, 5000, 3), (5000, 1, 3), (1, 1, 3)):
        body = f"""
            from models import Detector
            results = Detector({str(WEIGHTS)!r})(np.zeros({shape}, np.uint8))
            print("RESULTS", len(results), len(results[0]))
        """
        cases.append(Case(f"9 Detector on a {shape} array", api(body), "clean"))
    return cases


def image_cases(f: Fixtures) -> list[Case]:
    folder = rotated_copies(f.root / "item10_exif")
    detector = f"from models import Detector\ndetector = Detector({str(WEIGHTS)!r})"
    rotated = f"{detector}\nprint('SHAPES', detector({str(folder / 'bus_rotated.png')!r})[0].orig_shape)"
    sixteen = f"""
        from PIL import Image
        from models import Detector
        detector = Detector({str(WEIGHTS)!r})
        grey = np.asarray(Image.open({str(BUS)!r}).convert("L"))
        eight, sixteen = Image.fromarray(grey), Image.fromarray(grey.astype(np.uint16) * 257)
        print("BOXES", len(detector(eight)[0]), len(detector(sixteen)[0]), sixteen.mode)
    """

    def same_boxes(out: str) -> str:
        found = re.search(r"BOXES (\d+) (\d+) I;16", out)
        return "" if found and found[1] == found[2] != "0" else f"8-bit and I;16 boxes differ: {found and found[0]}"

    return [
        ok(
            "10 detect PNG/WebP/TIFF with EXIF orientation 6",
            f.detect(folder),
            lambda out: "" if out.count(": 480x640 ") == 3 else "not every rotated image read as 810x1080",
        ),
        ok("10 Detector on a PNG with EXIF orientation 6", api(rotated), _contains("SHAPES (810, 1080)")),
        ok("10 Detector on a PIL I;16 image", api(sixteen), same_boxes),
    ]


def special_file_cases(f: Fixtures) -> list[Case]:
    item = f.folder("item10_special")
    fifo, bomb = item / "pipe.jpg", png_bomb(item / "huge.png")
    for name in ("pipe.jpg", "pipe_list.txt", "pipe.yaml"):
        os.mkfifo(item / name)
    os.symlink("/dev/zero", item / "zero_list.txt")
    (item / "list.txt").write_text(f"{BUS}\n{fifo}\n/dev/zero\n{bomb}\n")
    detector = f"from models import Detector\nDetector({str(WEIGHTS)!r})"
    shapes = ["--data", str(f.shapes)]
    cases = [
        error("10 detect --source a FIFO", f.detect(fifo)),
        error("10 detect --source /dev/zero", f.detect("/dev/zero"), hostile=True),
        Case("10 detect --source a 30000x30000 PNG", f.detect(bomb), "clean", hostile=True),
        error("10 detect --source a FIFO named .txt", f.detect(item / "pipe_list.txt")),
        error("10 detect --source a .txt link to /dev/zero", f.detect(item / "zero_list.txt"), hostile=True),
        ok(
            "10 detect --source a list of an image, a FIFO, /dev/zero, a PNG bomb",
            f.detect(item / "list.txt"),
            _images_done(1),
            hostile=True,
        ),
        error("10 Detector on a FIFO", api(f"{detector}({str(fifo)!r})")),
        error("10 Detector on /dev/zero", api(f"{detector}('/dev/zero')"), hostile=True),
        error("10 Detector on a 30000x30000 PNG", api(f"{detector}({str(bomb)!r})"), hostile=True),
        error("10 Detector on a folder", api(f"{detector}({str(item)!r})")),
        error("10 test --data a FIFO", f.test(item / "pipe.yaml")),
        error("10 train --hyp /dev/zero", f.train(*shapes, "--hyp", "/dev/zero"), hostile=True),
        error("10 train --cfg /dev/zero", f.train(*shapes, "--cfg", "/dev/zero"), hostile=True),
    ]
    for case in cases:
        case.timeout = 90
    return cases + _split_cases(f, item, fifo, bomb) + _link_cases(f)


def _split_cases(f: Fixtures, item: Path, fifo: Path, bomb: Path) -> list[Case]:
    """Splits whose .txt lists, images or labels are FIFOs, devices or bombs."""
    root = _copy_dataset(item / "ds", 4)
    images = sorted((root / "images" / "train").glob("*.jpg"))
    (root / "list.txt").write_text("".join(f"{p}\n" for p in images) + f"{fifo}\n/dev/zero\n{bomb}\n")
    os.mkfifo(root / "fifo_list.txt")
    listed, pipe = (
        _write(item / f"{name}.yaml", {"path": str(root), "train": split, "val": split, "names": _coco_names()})
        for name, split in (("listed", "list.txt"), ("pipe_split", "fifo_list.txt"))
    )
    odd = _copy_dataset(item / "odd_labels", 3)
    labels = sorted((odd / "labels" / "train").glob("*.txt"))
    for label, make in zip(labels, (lambda p: os.symlink("/dev/zero", p), os.mkfifo)):
        label.unlink()
        make(label)
    odd_yaml = _data_yaml(odd, "odd_labels")
    cases = [
        ok("10 test split list with a FIFO, /dev/zero, a PNG bomb", f.test(listed), hostile=True),
        ok("10 train split list with a FIFO, /dev/zero, a PNG bomb", f.train("--data", str(listed)), hostile=True),
        error("10 test split list that is a FIFO", f.test(pipe)),
        Case("10 test labels: a link to /dev/zero and a FIFO", f.test(odd_yaml), "clean", hostile=True),
    ]
    for case in cases:
        case.timeout = 150
    return cases


def _link_cases(f: Fixtures) -> list[Case]:
    """A symlink loop under a ** glob source; a symlinked subfolder inside a split."""
    links = f.folder("item10_links")
    (links / "loop" / "sub").mkdir(parents=True)
    shutil.copy(BUS, links / "loop" / "bus.jpg")
    os.symlink("..", links / "loop" / "sub" / "back")
    root, extra = _copy_dataset(links / "ds", 2), _copy_dataset(links / "extra", 4)  # extra's last 2 are new
    for kind, pattern in (("images", "*.jpg"), ("labels", "*.txt")):
        (links / f"more_{kind}").mkdir()
        for file in sorted((extra / kind / "train").glob(pattern))[2:]:
            shutil.copy(file, links / f"more_{kind}")
        os.symlink(links / f"more_{kind}", root / kind / "train" / "more")
    shutil.rmtree(extra)
    return [
        ok(
            "10 detect ** glob over a symlink loop (each image once)",
            f.detect(f"{links / 'loop'}/**/*.jpg", *SMALL),
            _images_done(1),
            timeout=120,
        ),
        ok(
            "10 test split with a symlinked subfolder (4 images)",
            f.test(_data_yaml(root, "linked")),
            _dataset_images(4),
        ),
    ]


def int8_cases(f: Fixtures) -> list[Case]:
    item = f.folder("issue19_int8")
    shutil.copy(WEIGHTS, item / "yolov5n.pt")
    (item / "empty").mkdir()
    empty = _write(item / "empty.yaml", {"path": str(item), "train": "empty", "val": "empty", "names": ["a"]})
    int8 = ["export.py", "--weights", str(item / "yolov5n.pt"), *SMALL, "--int8"]
    broken = f.root / "issue19_broken" / "yolov5n_int8_openvino_model"

    def build_broken() -> None:
        if broken.exists():
            return
        broken.parent.mkdir()
        shutil.copy(WEIGHTS, broken.parent / "yolov5n.pt")
        f.run(
            [
                "export.py",
                "--weights",
                str(broken.parent / "yolov5n.pt"),
                *SMALL,
                "--include",
                "openvino",
                "--int8",
                "--data",
                str(f.coco),
            ]
        )
        _truncate(broken / "yolov5n.bin")

    no_nncf = f"""
        sys.modules["nncf"] = None  # as if nncf were not installed
        import export
        export.run({str(item / "yolov5n.pt")!r}, ["openvino"], imgsz=(64, 64), int8=True, data={str(f.coco)!r})
    """
    return [
        error("19 export --int8 without --data", [*int8, "--include", "openvino"], _contains("--int8 needs --data")),
        error(
            "19 export --int8 --data whose val split has no images",
            [*int8, "--include", "onnx", "--data", str(empty)],
            _contains("no calibration images"),
        ),
        error("19 export --int8 without the nncf package", api(no_nncf), _contains("needs the nncf package")),
        error("19 detect a corrupt INT8 OpenVINO folder", f.detect(BUS, *SMALL, weights=broken), setup=build_broken),
        error("19 test a corrupt INT8 OpenVINO folder", f.test(f.coco, weights=broken), setup=build_broken),
    ]


def more_cases(f: Fixtures) -> list[Case]:
    item = f.folder("more")
    shutil.copytree(f.root / "shapes", item / "mine")
    mine = write_data_yaml(item / "mine", item / "mine.yaml")
    nc = item / "nc_million.yaml"
    nc.write_text(f"path: {f.root / 'shapes'}\ntrain: images/train\nval: images/val\nnc: 1000000\n")
    hub = f"import torch\ntorch.hub.load({str(f.code)!r}, 'yolov5s', source='local')"
    return [
        ok(
            "more train --cache disk: nothing written beside the images",
            f.train("--data", str(mine), "--cache", "disk"),
        ),
        error("more train data YAML nc 10^6 without names", f.train("--data", str(nc)), hostile=True),
        error("more hubconf yolov5s offline (not in weights/)", api(hub)),
    ]
