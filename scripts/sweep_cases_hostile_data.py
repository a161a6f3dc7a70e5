"""The sweep's hostile-dataset cases (issue 35, classes 1, 2, 5, 6, 9 and the first two of 11): VOC ids and COCO
file_names that leave their root, whole numbers Python cannot convert in a COCO JSON, a hyp or a tracker YAML,
class names that forge log lines, converter outputs that would be silently wrong, a 100 MB JSON of empty objects, a
sparse 'image' under --copy, a killed conversion's folder and a conversion that writes nothing. Every case name
starts with 'hostile data <class>'. See scripts/bad_input_sweep.py, which registers hostile_data_cases.
"""

import json
import shutil
import socket
import subprocess
from pathlib import Path

from sweep_cases_datasets import _coco_root, _convert, _data_yaml, _says
from sweep_common import COCO, IMAGES, ROOT, WEIGHTS, Case, Sweep

BIG = "1" + "0" * 400  # a whole number beyond float range (float() of it: OverflowError)
LONG = "9" * 5000  # over Python's 4300 digits (int() of its text: ValueError)


def _both(*checks):
    return lambda out: next((why for why in (c(out) for c in checks) if why), "")


def _json_case(root: Path, gt: dict, name: str, change) -> str:
    """A copy of the COCO subset's JSON with one change (a function of its text), and its data YAML."""
    (root / "annotations" / f"{name}.json").write_text(change(json.dumps(gt)))
    return _data_yaml(root, f"hd_{name}", f"annotations/{name}.json", images="images")


def _victim(work: Path) -> Path:
    """work/victim: a VOC annotation, its image and a user's file where an escaped label would go."""
    victim = work / "victim"
    victim.mkdir(exist_ok=True)
    shutil.copy(IMAGES / "bus.jpg", victim / "x.jpg")
    (victim / "x.xml").write_text(
        "<annotation><size><width>810</width><height>1080</height></size><object><name>person</name>"
        "<bndbox><xmin>50</xmin><ymin>400</ymin><xmax>250</xmax><ymax>900</ymax></bndbox></object></annotation>\n"
    )
    (victim / "x.txt").write_text("a user's file\n")
    return victim


def _voc_escape(work: Path, ids: list[str], name: str) -> str:
    """A VOC root 3 levels under work (so that an id climbing 4 levels from Annotations/ names work/victim, and the
    converter's link and label for it, under runs_hd/, would land there too) whose list holds one good id and the
    ids given."""
    root = work / "hd" / name / "VOC"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    shutil.copy(IMAGES / "zidane.jpg", root / "JPEGImages" / "a.jpg")
    xml = (work / "victim" / "x.xml").read_text().replace("810", "1280").replace("1080", "720")
    (root / "Annotations" / "a.xml").write_text(xml)
    (root / "ImageSets" / "Main" / "train.txt").write_text("\n".join(["a", *ids]) + "\n")
    file = work / f"hd_{name}.yaml"
    file.write_text(f"path: {root}\ntrain: ImageSets/Main/train.txt\nval: ImageSets/Main/train.txt\nnames: [person]\n")
    return str(file)


def _path_cases(sweep: Sweep, root: Path, gt: dict, out: Path, train: list[str]) -> list[Case]:
    victim = _victim(sweep.work)
    (root / "images" / "link").symlink_to(victim)
    linked = _json_case(root, gt, "linked", lambda t: t.replace(gt["images"][0]["file_name"], "link/x.jpg", 1))
    skipped = _says("WARNING", "skipped")
    return [
        Case(
            "hostile data 1 VOC id climbing out of the root (convert: nothing read or written outside)",
            _convert(_voc_escape(sweep.work, ["../../../../victim/x"], "up"), out / "v1"),
            "ok",
            _both(skipped, _says("not a file name inside")),
        ),
        Case(
            "hostile data 1 VOC absolute id (train reads nothing outside its root)",
            ["train.py", "--data", _voc_escape(sweep.work, [str(victim / "x")], "abs"), *train, "--name", "abs"],
            "ok",
            _says("not a file name inside"),
        ),
        Case(
            "hostile data 1 COCO file_name through a link out of the images folder (convert --copy)",
            [*_convert(linked, out / "c1"), "--copy"],
            "ok",
            _says("not a path inside"),
        ),
    ]


def _number_cases(sweep: Sweep, root: Path, gt: dict, out: Path, train: list[str]) -> list[Case]:
    first = gt["images"][0]["id"]
    long_id = _json_case(root, gt, "long_id", lambda t: t.replace(f'"id": {first},', f'"id": {LONG},', 1))
    box = gt["annotations"][0]["bbox"]
    big_box = _json_case(root, gt, "big_box", lambda t: t.replace(json.dumps(box), f"[1, 2, 3, {BIG}]", 1))
    w = gt["images"][0]["width"]
    inf_width = _json_case(root, gt, "inf_width", lambda t: t.replace(f'"width": {w},', '"width": 1e400,', 1))
    hyp = sweep.work / "hd_hyp.yaml"
    hyp.write_text((ROOT / "data" / "hyp.scratch.yaml").read_text().replace("lr0: 0.01", f"lr0: {BIG}", 1))
    tracker = sweep.work / "hd_tracker.yaml"
    tracker.write_text(f"tracker_type: bytetrack\ntrack_buffer: {LONG}\n")
    detect = ["detect.py", "--weights", str(WEIGHTS), "--project", str(out), "--img", "160"]
    in_range = _says("outside the range")
    return [
        Case("hostile data 2 COCO image id of 5000 digits (convert)", _convert(long_id, out / "n1"), "error", in_range),
        Case(
            "hostile data 2 COCO width 1e400 (convert)",
            _convert(inf_width, out / "n4"),
            "error",
            _says("beyond the range of a float"),
        ),
        Case(
            "hostile data 2 COCO bbox value beyond float range (train)",
            ["train.py", "--data", big_box, *train, "--name", "n2"],
            "error",
            in_range,
        ),
        Case(
            "hostile data 2 hyp YAML lr0 beyond float range (train)",
            ["train.py", "--data", _json_case(root, gt, "plain", str), *train, "--hyp", str(hyp), "--name", "n3"],
            "error",
            in_range,
        ),
        Case(
            "hostile data 2 tracker YAML track_buffer of 5000 digits (detect --track)",
            [*detect, "--source", str(IMAGES / "bus.jpg"), "--track", str(tracker)],
            "error",
            in_range,
        ),
    ]


def _name_cases(root: Path, gt: dict, out: Path, train: list[str]) -> list[Case]:
    cats = {c["name"]: c for c in gt["categories"]}
    forged = _json_case(root, gt, "forged", lambda t: t.replace('"name": "person"', '"name": "person\\nERROR: x"', 1))
    long_yaml = _data_yaml(root, "hd_long_name", "annotations/plain.json", images="images", names=f"[{'x' * 300}]")
    twice = _json_case(root, gt, "twice", lambda t: t.replace(f'"name": "{list(cats)[1]}"', '"name": "person"', 1))
    return [
        Case(
            "hostile data 5 COCO category name with a newline (train refuses before training)",
            ["train.py", "--data", forged, *train, "--name", "forged"],
            "error",
            _says("control character"),
        ),
        Case(
            "hostile data 5 data YAML class name of 300 characters (convert)",
            _convert(long_yaml, out / "l1"),
            "error",
            _says("300 characters long"),
        ),
        Case(
            "hostile data 6 two COCO categories of one name (convert)",
            _convert(twice, out / "t1"),
            "error",
            _says("both named 'person'"),
        ),
    ]


def _output_cases(root: Path, gt: dict, out: Path) -> list[Case]:
    name = gt["images"][0]["file_name"]
    stem = name.rsplit(".", 1)[0]
    shutil.copy(root / "images" / name, root / "images" / f"{stem}.png")  # the same picture, another extension
    extra = {**gt["images"][0], "id": 987_654_321, "file_name": f"{stem}.png"}
    stems = _json_case(root, gt, "stems", lambda t: json.dumps({**gt, "images": gt["images"] + [extra]}))
    w = gt["images"][1]["width"]
    wrong_size = _json_case(root, gt, "size", lambda t: t.replace(f'"width": {w},', f'"width": {w * 2},', 1))
    return [
        Case("hostile data 6 two images of one stem (convert)", _convert(stems, out / "s1"), "error", _says("share")),
        Case(
            "hostile data 6 JSON width disagreeing with the image (convert leaves it out)",
            _convert(wrong_size, out / "s2"),
            "ok",
            _says("left out 1 images", "gives its size as"),
        ),
    ]


def _empty_objects(file: Path, megabytes: int) -> None:
    """A COCO JSON of `megabytes` MB whose images list is empty objects: {} takes 3 bytes of text, 72 parsed."""
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file, "w") as f:
        f.write('{"categories": [{"id": 1, "name": "person"}], "images": [{}')
        f.write(",{}" * ((megabytes * 1_000_000 - 64) // 3))
        f.write("]}")


def _peak_at_most(factor: float, file: Path):
    """A check that the command's own peak resident memory (it prints 'peak <bytes>') is at most factor x file."""

    def check(out: str) -> str:
        peaks = [int(line.split()[1]) for line in out.splitlines() if line.startswith("peak ")]
        limit = factor * file.stat().st_size
        return "" if peaks and peaks[0] <= limit else f"peak {peaks} bytes, more than {factor}x {file.name}"

    return check


def _measured(argv: list[str]) -> list[str]:
    """convert_dataset.py's main run in a Python that then prints its own peak resident memory (ru_maxrss)."""
    code = (
        "import resource, sys\nimport convert_dataset\n"
        f"code = convert_dataset.main({argv[1:]!r})\n"
        "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\nsys.exit(code)\n"
    )
    return ["-c", code]


def _amplification_cases(sweep: Sweep, root: Path, out: Path) -> list[Case]:
    big = sweep.work.parent / "hd_big" / "empty_objects.json"  # outside the hashed work folder
    yaml_file = _data_yaml(root, "hd_empty_objects", str(big), images="images", names="[person]")
    sparse = root.parent / "hd_sparse"
    (sparse / "images").mkdir(parents=True)
    shutil.copy(COCO / "images" / "train2017" / "000000000009.jpg", sparse / "images" / "a.jpg")
    images = [{"id": i, "file_name": n, "width": 640, "height": 480} for i, n in enumerate(["a.jpg", "b.jpg"])]
    (sparse / "ann.json").write_text(json.dumps({"images": images, "categories": [{"id": 1, "name": "person"}]}))
    sparse_yaml = _data_yaml(sparse, "hd_sparse", "ann.json", images="images")

    def make_sparse() -> None:
        with open(sparse / "images" / "b.jpg", "wb") as f:
            f.truncate(2 << 30)  # 2 GB on paper, nothing on disk

    def written_under(folder: Path, limit: int):
        return lambda _out: "" if _disk_use(folder) < limit else f"{folder} takes {_disk_use(folder)} bytes"

    return [
        Case(
            "hostile data 9 COCO JSON of 100 MB of empty objects (peak at most 10x the file)",
            _measured(_convert(yaml_file, out / "e1")),
            "error",
            _peak_at_most(10, big),
            hostile=True,
            setup=lambda: _empty_objects(big, 100),
        ),
        Case(
            "hostile data 9 --copy of a sparse 2 GB 'image' (checked before it is copied)",
            [*_convert(sparse_yaml, out / "p1"), "--copy"],
            "ok",
            _both(_says("left out 1 images"), written_under(out / "p1", 50 << 20)),
            hostile=True,
            setup=make_sparse,
        ),
    ]


def _disk_use(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _leftover_case(root: Path, gt: dict, out: Path) -> Case:
    """A hidden folder that a SIGKILLed conversion into out/k1 left (its owner file names a process that is gone)."""
    left = out / ".k1.deadbeef.tmp"
    yaml_file = _json_case(root, gt, "leftover", str)

    def setup() -> None:
        (left / "images" / "train").mkdir(parents=True, exist_ok=True)
        boot = Path("/proc/sys/kernel/random/boot_id")
        owner = {"pid": _dead_pid(), "host": socket.gethostname(), "boot": boot.read_text().strip()}
        (left / ".yolo-convert-owner").write_text(json.dumps(owner))

    return Case(
        "hostile data 11 a SIGKILLed conversion's hidden folder is removed by the next",
        _convert(yaml_file, out / "k1"),
        "ok",
        lambda _out: f"{left} is still there" if left.exists() else "",
        setup=setup,
    )


def hostile_data_cases(sweep: Sweep) -> list[Case]:
    """Every hostile-dataset case, building its fixtures (8 COCO128 images as COCO JSON, VOC roots) under the sweep."""
    root, gt = _coco_root(sweep.work / "hd_coco")
    _json_case(root, gt, "plain", str)
    out = sweep.work / "runs_hd"
    train = ["--img", "64", "--epochs", "1", "--batch-size", "4", "--workers", "0", "--project", str(out)]
    train += ["--weights", "", "--cfg", "yolov5n.yaml"]
    broken = root.parent / "hd_broken"
    (broken / "images").mkdir(parents=True)
    (broken / "images" / "a.jpg").write_bytes(b"not an image")
    (broken / "ann.json").write_text(json.dumps({**gt, "images": [{**gt["images"][0], "file_name": "a.jpg"}]}))
    cases = _path_cases(sweep, root, gt, out, train) + _number_cases(sweep, root, gt, out, train)
    cases += _name_cases(root, gt, out, train) + _output_cases(root, gt, out)
    cases += _amplification_cases(sweep, root, out)
    cases.append(
        Case(
            "hostile data 11 a conversion that writes no image exits 1",
            _convert(_data_yaml(broken, "hd_broken", "ann.json", images="images"), out / "z1"),
            "error",
            _says("no image of the train split"),
        )
    )
    return [*cases, _leftover_case(root, gt, out)]


if __name__ == "__main__":
    raise SystemExit("run scripts/bad_input_sweep.py -k '^hostile data '")
