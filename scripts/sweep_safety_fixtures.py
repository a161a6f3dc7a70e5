"""Fixtures of the data-safety sweep cases: crafted hostile files (YAML, zip and PNG bombs, deep checkpoints),
a local HTTP server, the shared Fixtures of every case, and the output checks. See scripts/bad_input_sweep.py.
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
from sweep_common import IMAGES, WEIGHTS, Case, Sweep, _copy_dataset, _data_yaml

from models.weights.checkpoint import load_checkpoint
from utils.data.shapes import generate_shapes, write_data_yaml

BUS, ZIDANE = IMAGES / "bus.jpg", IMAGES / "zidane.jpg"
SMALL = ["--img", "64"]


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
