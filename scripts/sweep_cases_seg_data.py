"""The sweep's segment-data cases (issue 32, scope 9): polygon label rows of fewer than 3 vertices or an odd count of
coordinates, vertices outside [0, 1], NaN, a row of 10^6 vertices (bounded memory), a self-intersecting outline, a
segment model given box-only labels, and COCO RLE masks whose size disagrees with their image, whose runs overrun
it, or which claim a huge size. Every case name starts with 'seg data '; run them with
`python scripts/bad_input_sweep.py -k '^seg data'`. Registered in OPTIONAL_CASES.
"""

import json
import shutil
from pathlib import Path

from sweep_common import COCO, IMAGES, Case, Sweep

# the Python API, as a segment model's training loader reads a dataset: every image's labels, polygons and masks
PROBE = """
import sys
from utils.cli import run_cli

def main():
    from utils.data.config import load_data_config
    from utils.data.loader import create_dataloader
    cfg = load_data_config(sys.argv[1])
    loader, ds = create_dataloader(cfg["train"], 160, 2, 32, workers=0, nc=cfg["nc"], label_rows="polygon",
                                   require_labels=True)
    pixels = sum(int(batch[4].sum()) for batch in loader)
    rows = sum(len(x) for x in ds.labels)
    vertices = sum(len(p) for image in ds.segments for p in image)
    print(f"segment data: {len(ds)} images, {rows} rows, {vertices} vertices, {pixels} mask pixels")
    return 0

sys.exit(run_cli(main))
"""

SQUARE = "0 0.2 0.2 0.6 0.2 0.6 0.7 0.2 0.7\n"  # a good polygon row


def _says(*words: str):
    return lambda out: "" if all(w in out for w in words) else f"output lacks {words}"


def _split(root: Path, name: str, label: str | bytes) -> str:
    """root/name: a YOLO split of two images, good.jpg (a good polygon) and bad.jpg (the label given), its YAML."""
    folder = root / name
    (folder / "images").mkdir(parents=True)
    (folder / "labels").mkdir()
    for stem in ("good", "bad"):
        shutil.copy(IMAGES / "zidane.jpg", folder / "images" / f"{stem}.jpg")
    (folder / "labels" / "good.txt").write_text(SQUARE)
    bad = folder / "labels" / "bad.txt"
    bad.write_bytes(label) if isinstance(label, bytes) else bad.write_text(label)
    file = root / f"{name}.yaml"
    file.write_text(f"path: {folder}\ntrain: images\nval: images\nnames: [thing]\n")
    return str(file)


def _million_vertices() -> bytes:
    """One row of 10^6 vertices (8 MB, under the 10 MB label-file bound): a square walked round 250 000 times."""
    return b"0 " + b"0.1 0.1 0.9 0.1 0.9 0.9 0.1 0.9 " * 250_000 + b"\n"


def _coco_rle(root: Path, name: str, rle: dict, size: tuple[int, int] = (1280, 720)) -> str:
    """root/name: one COCO128 image (zidane, 1280x720) with one good polygon and one RLE object, its YAML."""
    folder = root / name
    (folder / "images").mkdir(parents=True)
    shutil.copy(IMAGES / "zidane.jpg", folder / "images" / "z.jpg")
    square = [100, 100, 400, 100, 400, 500, 100, 500]
    anns = [
        {
            "id": 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": [100, 100, 300, 400],
            "iscrowd": 0,
            "segmentation": [square],
        },
        {"id": 2, "image_id": 1, "category_id": 1, "bbox": [600, 200, 200, 300], "iscrowd": 0, "segmentation": rle},
    ]
    image = {"id": 1, "file_name": "z.jpg", "width": size[0], "height": size[1]}
    data = {"images": [image], "annotations": anns, "categories": [{"id": 1, "name": "person"}]}
    (folder / "instances.json").write_text(json.dumps(data))
    file = root / f"{name}.yaml"
    file.write_text(f"path: {folder}\ntrain: instances.json\nval: instances.json\nimages: images\n")
    return str(file)


def _label_cases(root: Path) -> list[Case]:
    corrupt = "bad.jpg: ignoring corrupt image/label: line 1:"
    probe = ["-c", PROBE]
    cases = [
        ("a polygon of 1 vertex", "0 0.3 0.3\n", (corrupt, "a polygon of 1 vertices needs at least 3")),
        ("an odd count of coordinates", "0 0.1 0.1 0.5 0.1 0.5 0.6 0.3\n", (corrupt, "7 coordinates, an odd count")),
        ("vertices just outside [0, 1]", "0 -0.004 0.2 1.006 0.2 0.5 0.9\n", ("2 polygon vertices outside the image")),
        ("vertices far outside [0, 1]", "0 12 20 300 20 150 400\n", (corrupt, "must be normalised")),
        ("a NaN vertex", "0 0.1 0.1 0.5 nan 0.5 0.6\n", (corrupt, "non-finite")),
        ("a self-intersecting polygon (bowtie)", "0 0.1 0.1 0.9 0.9 0.9 0.1 0.1 0.9\n", ("2 images, 2 rows",)),
    ]
    out = [
        Case(f"seg data label: {name}", [*probe, _split(root, f"s{i}", label)], "ok", _says("segment data:", *words))
        for i, (name, label, words) in enumerate(cases)
    ]
    out.append(
        Case(
            "seg data label: 10^6 vertices in one row (bounded memory)",
            [*probe, _split(root, "million", _million_vertices())],
            "ok",
            _says("segment data: 2 images, 2 rows, 1000004 vertices"),
            hostile=True,
            timeout=600,
        )
    )
    boxes = _split(root, "boxes", "0 0.5 0.5 0.2 0.2\n")
    (Path(boxes).parent / "boxes" / "labels" / "good.txt").write_text("0 0.4 0.4 0.2 0.2\n")
    out.append(
        Case("seg data: a segment model given box-only labels", [*probe, boxes], "error", _says("box labels only"))
    )
    return out


def _rle_cases(root: Path) -> list[Case]:
    probe = ["-c", PROBE]
    return [
        Case(
            "seg data COCO RLE whose size disagrees with its image",
            [*probe, _coco_rle(root, "rle_size", {"size": [700, 1280], "counts": [700 * 1280]})],
            "ok",
            _says("skipped 1 RLE masks whose size disagrees with their image (box only)", "2 rows"),
        ),
        Case(
            "seg data COCO RLE whose runs overrun its mask (pycocotools would write past it)",
            [*probe, _coco_rle(root, "rle_overrun", {"size": [720, 1280], "counts": [0, 10**9]})],
            "ok",
            _says("skipped 1 RLE masks whose runs do not cover their size exactly", "2 rows"),
        ),
        Case(
            "seg data COCO RLE of 10^10 pixels in an image annotated as that large",
            [*probe, _coco_rle(root, "rle_huge", {"size": [100_000, 100_000], "counts": [10**10]}, (100_000, 100_000))],
            "error",
            _says("RLE masks over", "no usable images"),
            hostile=True,
        ),
    ]


def seg_data_cases(sweep: Sweep) -> list[Case]:
    """Every segment-data case, with its fixtures (zidane.jpg copies and their labels) under the sweep."""
    root = sweep.work / "seg_data"
    root.mkdir()
    assert COCO.is_dir()  # the sweep's shared data; the fixtures here need only its sample images
    return _label_cases(root) + _rle_cases(root)
