"""Issue 16's sweep cases for scripts/bad_input_sweep.py: nothing a user owns is changed, hostile files are bounded,
paths are never swapped, the URL cache is keyed on the whole URL, broken exports and odd files end in one line.

Each group says which item of the issue it covers; together they run every command that reads or writes files
(train.py, test.py, detect.py, export.py, hubconf and the Detector) on these classes of input. The harness hashes
every input before and after each case, so a case only has to name where it may write (allow=...).
"""

import functools
import http.server
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from PIL import Image
from sweep_common import COCO, IMAGES, ROOT, WEIGHTS, Case, Sweep, _coco_names, _copy_dataset, _data_yaml

from models.checkpoint import load_checkpoint
from utils.data.shapes import generate_shapes, write_data_yaml

BUS, ZIDANE = IMAGES / "bus.jpg", IMAGES / "zidane.jpg"
SMALL = ["--img", "64"]


# ---------------------------------------------------------------------------------------------------------------------
# Crafted files


def yaml_bomb(head: str, key: str) -> str:
    """A 'billion laughs' YAML of about 600 bytes: 10 levels of 9 aliases (9^9 strings once expanded) under key,
    after the lines of head."""
    rows = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    rows += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    return head + "\n".join(rows) + f"\n{key}: *l9\n"


def write_zip(path: Path, members: list[tuple[str, bytes | tuple[bytes, int, int]]]) -> Path:
    """A zip of (name, bytes) members stored as torch.save stores them, or (name, (deflate stream, crc, size))
    members written compressed as given: torch's reader accepts both."""
    local, central = struct.Struct("<4s5H3L2H"), struct.Struct("<4s6H3L5H2L")
    entries = []
    with open(path, "wb") as f:
        for name, data in members:
            raw = name.encode()
            method, (stream, crc, size) = (
                (0, (data, zlib.crc32(data), len(data))) if isinstance(data, bytes) else (8, data)
            )
            entries.append((raw, method, crc, len(stream), size, f.tell()))
            f.write(local.pack(b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(stream), size, len(raw), 0) + raw)
            f.write(stream)
        start = f.tell()
        for raw, method, crc, csize, size, offset in entries:
            f.write(
                central.pack(b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc, csize, size, len(raw), *[0] * 5, offset)
            )
            f.write(raw)
        end = f.tell()
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), end - start, start, 0))
    return path


def deflated_zeros(n_bytes: int, chunk: int = 16 << 20) -> tuple[bytes, int, int]:
    """(raw deflate stream, crc32, size) of n_bytes zeros, without compressing them all: after a full flush the
    compressor's state is reset, so every further chunk compresses to the same bytes."""
    block, packer = bytes(chunk), zlib.compressobj(9, zlib.DEFLATED, -15)
    first = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    repeat = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(n_bytes // chunk):
        crc = zlib.crc32(block, crc)
    return first + repeat * (n_bytes // chunk - 1) + packer.flush(), crc, n_bytes // chunk * chunk


def _saved_members(ckpt: dict, path: Path) -> list[tuple[str, bytes]]:
    """The (name, bytes) members of ckpt as torch.save writes it."""
    torch.save(ckpt, path)
    with zipfile.ZipFile(path) as z:
        return [(info.filename, z.read(info)) for info in z.infolist()]


def zip_bomb_checkpoint(ours: dict, path: Path) -> Path:
    """Our checkpoint plus one float tensor whose 3 GiB of zeros are a ~3 MB deflated member (a ~7 MB file)."""
    marker, size = 1234567, 3 << 30
    members = _saved_members({**ours, "model": {**ours["model"], "padding": torch.zeros(marker)}}, path)
    old, new = (b"J" + struct.pack("<i", v) for v in (marker, size // 4))  # the storage size and shape in data.pkl
    crafted = []
    for name, data in members:
        if name.endswith("data.pkl"):
            data = data.replace(old, new)
        crafted.append((name, deflated_zeros(size) if len(data) == marker * 4 else data))
    return write_zip(path, crafted)


def nested_names_checkpoint(ours: dict, path: Path, depth: int = 100_000) -> Path:
    """Our checkpoint whose names is a list nested depth levels deep ([[[...]]]), written as raw pickle opcodes
    (Python's pickler cannot nest that deep): any recursive walk of it overflows."""
    placeholder = "NESTED_NAMES_PLACEHOLDER"
    members = _saved_members({**ours, "names": placeholder}, path)
    opcode = b"X" + struct.pack("<I", len(placeholder)) + placeholder.encode()
    nested = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST depth times, then APPEND each into the one below
    return write_zip(path, [(n, d.replace(opcode, nested) if n.endswith("data.pkl") else d) for n, d in members])


def shared_names_checkpoint(ours: dict, path: Path) -> Path:
    """Our checkpoint whose names is a tree of shared lists: 10^12 strings when walked, a few hundred bytes pickled."""
    names: list = ["x"] * 10
    for _ in range(11):
        names = [names] * 10
    torch.save({**ours, "names": names}, path)
    return path


def crafted_checkpoints(folder: Path) -> dict[str, Path]:
    """The hostile .pt files of item 5 (and one more of each kind)."""
    ours = load_checkpoint(WEIGHTS)
    folder.mkdir(parents=True)
    out = {
        "zip member inflating to 3 GiB": zip_bomb_checkpoint(ours, folder / "zip_bomb.pt"),
        "names nested 100000 deep": nested_names_checkpoint(ours, folder / "nested_names.pt"),
        "names of shared lists (10^12 as a tree)": shared_names_checkpoint(ours, folder / "shared_names.pt"),
    }
    out["nc 10^6"] = folder / "nc_million.pt"  # one name shared 10^6 times: a small pickle, so nc itself is checked
    torch.save({**ours, "names": ["c"] * 10**6, "yaml": {**ours["yaml"], "nc": 10**6}}, out["nc 10^6"])
    for key, value, file in (("depth_multiple", 3000, "depth3000.pt"), ("width_multiple", 1000, "width1000.pt")):
        out[f"{key} {value}"] = folder / file
        torch.save({**ours, "yaml": {**ours["yaml"], key: value}}, out[f"{key} {value}"])
    return out


def png_bomb(path: Path, side: int = 30000) -> Path:
    """A ~1 MB grey PNG of side x side zero pixels (2.7 GB once decoded to BGR), written row by row."""
    packer, row = zlib.compressobj(9), b"\x00" * (side + 1)  # filter byte 0, then the row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    idat = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    header = struct.pack(">2I5B", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


def rotated_copies(folder: Path) -> Path:
    """bus.jpg as PNG, WebP and TIFF files with EXIF orientation 6 (shown turned 90 degrees: 810 high, 1080 wide)."""
    folder.mkdir(parents=True)
    image = Image.open(BUS).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6
    for suffix in ("png", "webp", "tif"):
        image.save(folder / f"bus_rotated.{suffix}", exif=exif.tobytes())
    return folder


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the sweep's table is its output
        pass


def serve_folder(folder: Path) -> tuple[str, Callable]:
    """http://127.0.0.1:<port> serving folder from a thread, and the function that stops it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server.shutdown


# ---------------------------------------------------------------------------------------------------------------------
# Fixtures: built once, some only when a case that needs them runs


STOP_AFTER_FIRST_EPOCH = """
import sys
import train
from utils.train.callbacks import Callback

class StopAfterFirstEpoch(Callback):
    def on_checkpoint_saved(self, trainer, path, result):
        if path.name == "last.pt":
            raise KeyboardInterrupt  # as Ctrl-C would, once last.pt holds epoch 0: --resume continues at epoch 1

sys.exit(train.main(train.parse_opt(sys.argv[1:]), [StopAfterFirstEpoch()]))
"""


def api(body: str) -> list[str]:
    """["-c", code] running body (Python statements using the project) through run_cli: a YoloError it raises
    ends in one ERROR line and exit 1, as the commands do."""
    code = "import sys\nimport numpy as np\nfrom utils.cli import run_cli\n\ndef main():\n"
    return ["-c", code + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n\nsys.exit(run_cli(main))\n"]


def error(name: str, argv: list[str], check: Callable[[str], str] | None = None, **kw) -> Case:
    return Case(name, argv, "error", check, **kw)


def ok(name: str, argv: list[str], check: Callable[[str], str] | None = None, **kw) -> Case:
    return Case(name, argv, "ok", check, **kw)


def _write(file: Path, content: dict) -> Path:
    file.write_text(yaml.safe_dump(content, sort_keys=False))
    return file


class Fixtures:
    """Folders and files of the safety cases, under <work>/safety, and the commands' usual flags."""

    def __init__(self, sweep: Sweep):
        self.sweep, self.root, self.code = sweep, sweep.work / "safety", sweep.code
        self.runs = self.root / "runs"  # where cases write by default: an output folder for the harness
        self.root.mkdir()
        shapes = generate_shapes(self.root / "shapes", n_train=8, n_val=4, img_size=64)
        self.shapes = write_data_yaml(shapes, self.root / "shapes.yaml")
        self.coco = _data_yaml(_copy_dataset(self.root / "coco4", 4), "coco4")
        self.crafted = crafted_checkpoints(self.root / "crafted")
        self.missing = self.root / "nowhere"  # never created: --weights/--data/--hyp paths under it do not exist

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True)
        return path

    def detect(self, source: str | Path, *extra: str, weights: str | Path = WEIGHTS) -> list[str]:
        return ["detect.py", "--weights", str(weights), "--source", str(source), "--project", str(self.runs), *extra]

    def test(self, data: str | Path, *extra: str, weights: str | Path = WEIGHTS) -> list[str]:
        return ["test.py", "--weights", str(weights), "--data", str(data), *SMALL, "--project", str(self.runs), *extra]

    def train(self, *extra: str, model: tuple[str, ...] = ("--weights", "", "--cfg", "yolov5n.yaml")) -> list[str]:
        """train.py for one epoch at 64 px, no plots, no workers (later flags in extra win)."""
        fast = [*SMALL, "--epochs", "1", "--noplots", "--workers", "0", "--project", str(self.runs)]
        return ["train.py", *model, *fast, *extra]

    def run(self, argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> str:
        """Run a fixture command (a script of the code copy, or -c code) from the sweep's cwd; its output."""
        script = argv if argv[0] == "-c" else [str(self.code / argv[0]), *argv[1:]]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(self.code)}
        proc = subprocess.run(
            [sys.executable, *script], cwd=self.sweep.cwd, env=env, capture_output=True, text=True, timeout=600
        )
        if proc.returncode not in ok_codes:
            tail = " ".join((proc.stdout + proc.stderr).split()[-40:])
            raise RuntimeError(f"{' '.join(argv[:3])} exited {proc.returncode}: {tail}")
        return proc.stdout

    @functools.cached_property
    def exports(self) -> dict[str, Path]:
        """yolov5n exported at 64 px to TorchScript, ONNX and OpenVINO (only copies of them are damaged)."""
        folder = self.folder("fixture_export")
        shutil.copy(WEIGHTS, folder / "yolov5n.pt")
        self.run(["export.py", "--weights", str(folder / "yolov5n.pt"), *SMALL, "--include", "torchscript", "onnx"])
        self.run(["export.py", "--weights", str(folder / "yolov5n.pt"), *SMALL, "--include", "openvino"])
        return {k: folder / f"yolov5n{k}" for k in (".torchscript", ".onnx", "_openvino_model")}

    @functools.cached_property
    def resumable(self) -> Path:
        """last.pt of a 2-epoch shapes run stopped (as by Ctrl-C) once its first epoch was saved."""
        project = self.runs / "fixture_resumable"
        argv = ["--data", str(self.shapes), "--weights", "", "--cfg", "yolov5n.yaml", *SMALL, "--epochs", "2"]
        argv += ["--batch-size", "8", "--workers", "0", "--noplots", "--project", str(project), "--name", "run"]
        self.run(["-c", STOP_AFTER_FIRST_EPOCH, *argv], ok_codes=(130,))
        last = project / "run" / "weights" / "last.pt"
        if not last.is_file():
            raise RuntimeError(f"the stopped run left no {last}")
        return last

    def openvino_copy(self, name: str) -> Path:
        """A copy of the OpenVINO export, in its own folder, to damage."""
        dst = self.root / name / "yolov5n_openvino_model"
        shutil.copytree(self.exports["_openvino_model"], dst)
        return dst


# ---------------------------------------------------------------------------------------------------------------------
# Checks on a case's output and folders


def _contains(*texts: str) -> Callable[[str], str]:
    return lambda out: "; ".join(f"no '{t}' in the output" for t in texts if t not in out)


def _all(*checks: Callable[[str], str]) -> Callable[[str], str]:
    return lambda out: "; ".join(why for check in checks if (why := check(out)))


def _images_done(n: int) -> Callable[[str], str]:
    """detect.py logged n images ('image i/N ...' lines), so none twice."""

    def check(out: str) -> str:
        seen = re.findall(r"^image \d+/\d+ (.*?): \d+x\d+ ", out, re.M)
        return "" if len(seen) == n else f"{len(seen)} images processed, not {n}: {seen[:3]}"

    return check


def _dataset_images(n: int) -> Callable[[str], str]:
    def check(out: str) -> str:
        found = re.findall(r": (\d+) images, \d+ backgrounds", out)
        return "" if found and int(found[0]) == n else f"dataset scan found {found} images, not {n}"

    return check


def _run_folders(project: Path, names: set[str], epochs: list[str]) -> Callable[[str], str]:
    """project holds exactly the run folders names, each with a results.csv of these epochs' rows."""

    def check(_out: str) -> str:
        found = {p.name for p in project.iterdir()} if project.is_dir() else set()
        if found != names:
            return f"run folders {sorted(found)} in {project}, expected {sorted(names)}"
        for name in sorted(names):
            lines = (project / name / "results.csv").read_text().splitlines()[1:]
            found = [line.split(",")[0].strip() for line in lines if line.strip()]
            if found != epochs:
                return f"{name}/results.csv has rows of epochs {found}, expected {epochs}"
        return ""

    return check


def _label_files(folder: Path, n: int) -> Callable[[str], str]:
    def check(_out: str) -> str:
        found = sorted(p.name for p in folder.glob("*.txt"))
        return "" if len(found) == n else f"{folder} holds {found}, expected {n} label file(s)"

    return check


# ---------------------------------------------------------------------------------------------------------------------
# Item 1: generate: shapes never writes into an existing dataset


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 2: --resume of a last.pt outside a run folder writes nothing beside it


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 3: --project/--name/--exist-ok never write over inputs


def exist_ok_cases(f: Fixtures) -> list[Case]:
    item = f.folder("item3")
    for folder, images in (("photos", (BUS, ZIDANE)), ("two", (BUS, ZIDANE)), ("one", (BUS,))):
        (item / folder).mkdir()
        for image in images:
            shutil.copy(image, item / folder / image.name)
    flat = item / "flat"  # a dataset without splits: images/*.jpg, labels/*.txt
    for kind in ("images", "labels"):
        (flat / kind).mkdir(parents=True)
    for image in sorted((COCO / "images" / "train2017").glob("*.jpg"))[:4]:
        shutil.copy(image, flat / "images")
        shutil.copy(COCO / "labels" / "train2017" / f"{image.stem}.txt", flat / "labels")
    flat_yaml = _write(
        item / "flat.yaml", {"path": str(flat), "train": "images", "val": "images", "names": _coco_names()}
    )
    (item / "a_file").write_text("not a folder\n")
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


# ---------------------------------------------------------------------------------------------------------------------
# Item 4: export replaces only its own earlier exports


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 5: YAML alias bombs and crafted checkpoints, everywhere they are read


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 6: two runs started together get two folders


def concurrent_cases(f: Fixtures) -> list[Case]:
    project = f.runs / "together"
    argv = f.train("--data", str(f.shapes), "--project", str(project), "--name", "exp")
    check = _run_folders(project, {"exp", "exp2"}, ["0"])
    return [ok("6 two train.py runs started together, same --name", argv, check, copies=2, timeout=400)]


# ---------------------------------------------------------------------------------------------------------------------
# Items 7 and 13: a missing path is never swapped for a same-named file in weights/, data/ or models/


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 8: image URLs cached by the whole URL


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 9: broken exports and odd arrays end in one line


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


# ---------------------------------------------------------------------------------------------------------------------
# Item 10: EXIF orientation, FIFOs, devices, decompression bombs, symlink loops and folders, 16-bit images


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


# ---------------------------------------------------------------------------------------------------------------------
# Issue 19: INT8 exports refuse what they cannot calibrate or load in one line


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


# ---------------------------------------------------------------------------------------------------------------------
# More found by sweeping the flags that read or write files


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


def safety_cases(sweep: Sweep) -> list[Case]:
    """Every issue-16 case, in the order of the issue's items (and issue 19's INT8 cases)."""
    f = Fixtures(sweep)
    groups = (generate_cases, resume_cases, exist_ok_cases, export_safety_cases, yaml_bomb_cases)
    groups += (checkpoint_bomb_cases, concurrent_cases, swap_cases, url_cases, broken_export_cases, image_cases)
    groups += (special_file_cases, readme_export_cases, int8_cases, more_cases)
    return [case for group in groups for case in group(f)]


if __name__ == "__main__":
    sys.exit("run scripts/bad_input_sweep.py (-k 'text' selects cases)")
