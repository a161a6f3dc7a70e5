"""What every case of the bad-input sweep shares: the Case and Outcome records, the fixtures built from ../shared,
the snapshots that prove no input changed, and the sweep's folders. See scripts/bad_input_sweep.py.
"""

import hashlib
import json
import os
import pickle
import random
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.nn.yolo import Model  # noqa: E402
from models.weights.checkpoint import checkpoint_dict, load_checkpoint, save_checkpoint  # noqa: E402

SHARED = ROOT.parent / "shared"

COCO = SHARED / "datasets" / "coco128"

WEIGHTS = SHARED / "weights" / "yolov5n.pt"

IMAGES = SHARED / "images"

# Address-space limits per command (MiB): the smallest that normal commands passed under, plus headroom.
ADDRESS_LIMITS_MIB = {"detect.py": 6144, "test.py": 6144, "export.py": 6144, "train.py": 6656, "-c": 6144}

HOSTILE_PEAK_BYTES = 2_000_000_000  # a crafted input may not take more resident memory than this

OUT_OF_MEMORY = ("out of memory", "MemoryError", "std::bad_alloc", "Cannot allocate memory")

CACHE_NAMES = (".yolo-labels.npz", ".yolo-images")  # our own caches beside a dataset: not user files

TIME, PRLIMIT = shutil.which("time", path="/usr/bin:/bin"), shutil.which("prlimit")


@dataclass
class Case:
    """One command (or several started together) and what it should end in."""

    name: str
    argv: list[str]  # a script of the repository and its flags, or ["-c", code] for the Python API
    expect: str  # "error", "ok", "clean" (either ok or one ERROR line) or "signal" (ended by terminate_after)
    check: Callable[[str], str] | None = None  # extra check on the output: '' when fine, else why not
    timeout: float = 300.0
    hostile: bool = False  # a crafted input: peak memory under 2 GB, no out-of-memory error
    allow: list[Path] = field(default_factory=list)  # where the case may write, besides runs*/ folders
    protect: list[Path] = field(default_factory=list)  # must stay unchanged even inside a runs*/ folder
    setup: Callable[[], None] | None = None  # builds what only this case needs, run when the case is selected
    copies: int = 1  # the same command started this many times at once
    terminate_after: float | None = None  # send the command SIGTERM this many seconds after it started


@dataclass
class Outcome:
    """What one case did."""

    case: Case
    code: int
    last_line: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_mb: float | None = None  # the largest peak resident memory among its processes


def _coco_names() -> list[str]:
    names = yaml.safe_load((ROOT / "data" / "coco128.yaml").read_text())["names"]
    return [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)


def _write_yaml(file: Path, content: dict) -> Path:
    file.write_text(yaml.safe_dump(content, sort_keys=False))
    return file


def _copy_dataset(dst: Path, n: int, labels: bool = True) -> Path:
    """The first n COCO128 images (and labels) in dst/images/train, dst/labels/train."""
    (dst / "images" / "train").mkdir(parents=True)
    (dst / "labels" / "train").mkdir(parents=True)
    for image in sorted((COCO / "images" / "train2017").glob("*.jpg"))[:n]:
        shutil.copy(image, dst / "images" / "train" / image.name)
        label = COCO / "labels" / "train2017" / f"{image.stem}.txt"
        if labels and label.is_file():
            shutil.copy(label, dst / "labels" / "train" / label.name)
    return dst


def _data_yaml(root: Path, name: str, **extra) -> Path:
    content = {"path": str(root), "train": "images/train", "val": "images/train", "names": _coco_names(), **extra}
    return _write_yaml(root.parent / f"{name}.yaml", content)


def _renumbered_json(src: Path, keep: set[str], dst: Path) -> None:
    """A COCO JSON of the kept images, with image ids renumbered 1..N in a shuffled order."""
    gt = json.loads(src.read_text())
    images = [im for im in gt["images"] if im["file_name"] in keep]
    new_ids = list(range(1, len(images) + 1))
    random.Random(0).shuffle(new_ids)
    id_map = {im["id"]: i for im, i in zip(images, new_ids)}
    gt["images"] = [{**im, "id": id_map[im["id"]]} for im in images]
    gt["annotations"] = [{**a, "image_id": id_map[a["image_id"]]} for a in gt["annotations"] if a["image_id"] in id_map]
    dst.write_text(json.dumps(gt))


def _subset_json(src: Path, keep: set[str], dst: Path) -> None:
    gt = json.loads(src.read_text())
    gt["images"] = [im for im in gt["images"] if im["file_name"] in keep]
    ids = {im["id"] for im in gt["images"]}
    gt["annotations"] = [a for a in gt["annotations"] if a["image_id"] in ids]
    dst.write_text(json.dumps(gt))


def _checkpoints(tmp: Path) -> dict[str, Path]:
    """Broken and wrong weights files."""
    out = {}
    out["random"] = tmp / "random.pt"
    out["random"].write_bytes(os.urandom(4096))
    out["text"] = tmp / "text.pt"
    out["text"].write_text("not a checkpoint\n")
    out["truncated"] = tmp / "truncated.pt"
    out["truncated"].write_bytes(WEIGHTS.read_bytes()[:200_000])

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {tmp / 'PWNED'}",)

    out["pickle_exec"] = tmp / "evil.pt"
    out["pickle_exec"].write_bytes(pickle.dumps({"model": Evil()}))
    ours = load_checkpoint(WEIGHTS)
    out["short_names"] = tmp / "short_names.pt"
    torch.save({**ours, "names": ours["names"][:3]}, out["short_names"])
    out["no_names"] = tmp / "no_names.pt"
    torch.save({k: v for k, v in ours.items() if k != "names"}, out["no_names"])
    out["model_list"] = tmp / "model_list.pt"
    torch.save({**ours, "model": [1, 2, 3]}, out["model_list"])
    out["nan"] = tmp / "nan.pt"
    state = {k: v.clone() for k, v in ours["model"].items()}
    first = next(k for k, v in state.items() if v.is_floating_point())
    state[first].fill_(float("nan"))
    torch.save({**ours, "model": state}, out["nan"])
    out["three_classes"] = tmp / "three_classes.pt"
    three = Model("yolov5n.yaml", nc=3)
    three.names = ["a", "b", "c"]
    save_checkpoint(checkpoint_dict(three), out["three_classes"])
    out["wrong_yaml"] = tmp / "wrong_yaml.pt"
    torch.save({**ours, "yaml": {**ours["yaml"], "width_multiple": 0.5}}, out["wrong_yaml"])
    return out


def _video(file: Path, frames: int = 20, cut: bool = False) -> Path:
    """An MJPG .avi; cut=True keeps its first half, so the header promises more frames than can be read."""
    writer = cv2.VideoWriter(str(file), cv2.VideoWriter_fourcc(*"MJPG"), 10, (160, 128))
    noise = np.random.default_rng(0)
    for _ in range(frames):
        writer.write(noise.integers(0, 255, (128, 160, 3), dtype=np.uint8))
    writer.release()
    if cut:
        data = file.read_bytes()
        file.write_bytes(data[: len(data) // 2])
    return file


def _no_file(path: Path) -> Callable[[str], str]:
    return lambda _out: f"{path} was created" if path.exists() else ""


def _outputs(folder: Path, pattern: str, n: int) -> Callable[[str], str]:
    def check(_out: str) -> str:
        found = sorted(p.name for p in folder.glob(pattern))
        return "" if len(found) == n else f"expected {n} outputs {pattern} in {folder}, found {found}"

    return check


def _same_map(a: Path, b: Path) -> Callable[[str], str]:
    """The two runs' results.json have the same COCO numbers (difference <= 1e-6)."""

    def check(_out: str) -> str:
        try:
            x, y = (json.loads((d / "results.json").read_text())["metrics"] for d in (a, b))
        except (OSError, KeyError, ValueError) as e:
            return f"no results.json to compare: {e}"
        diff = max(abs(x[k] - y[k]) for k in x)
        return "" if diff <= 1e-6 else f"mAP differs by {diff:.2e} between {a.name} and {b.name}"

    return check


def _detect_sources(tmp: Path) -> Path:
    """Same-stem files, a file name with glob characters, a folder of folders, a list, a cut JPEG and video."""
    for sub, src in (("a", "bus.jpg"), ("b", "zidane.jpg")):
        (tmp / "same_stem" / sub).mkdir(parents=True)
        shutil.copy(IMAGES / src, tmp / "same_stem" / sub / "x.jpg")
    (tmp / "same_folder").mkdir()
    shutil.copy(IMAGES / "bus.jpg", tmp / "same_folder" / "x.jpg")
    cv2.imwrite(str(tmp / "same_folder" / "x.png"), cv2.imread(str(IMAGES / "zidane.jpg")))
    (tmp / "globchars").mkdir()
    shutil.copy(IMAGES / "bus.jpg", tmp / "globchars" / "a[1].jpg")
    (tmp / "only_dirs" / "sub").mkdir(parents=True)
    (tmp / "list.txt").write_text(f"{tmp / 'same_stem' / 'a' / 'x.jpg'}\n{tmp / 'same_stem' / 'b' / 'x.jpg'}\n")
    (tmp / "corrupt.jpg").write_bytes(IMAGES.joinpath("bus.jpg").read_bytes()[:5000])
    return _video(tmp / "cut.avi", cut=True)


class Snapshots:
    """What every file under some folders is (sha256, link target, folder, FIFO or device), re-hashing a file only
    when its inode, size, mtime or ctime changed since it was last hashed."""

    def __init__(self):
        self._digests: dict[str, tuple[tuple[int, ...], str]] = {}

    def take(self, roots: list[Path], is_output: Callable[[str], bool]) -> dict[str, str]:
        """path -> description of everything under roots; files of run outputs (is_output) by size and mtime only."""
        found, stack = {}, [str(r) for r in roots if r.is_dir()]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.name == "__pycache__" or any(name in entry.name for name in CACHE_NAMES):
                    continue
                info = entry.stat(follow_symlinks=False)  # links are never followed: a loop or /dev/zero is safe
                found[entry.path] = self._describe(entry.path, info, is_output)
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
        return found

    def _describe(self, path: str, info: os.stat_result, is_output: Callable[[str], bool]) -> str:
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            return f"link to {os.readlink(path)}"
        if stat.S_ISDIR(mode):
            return "folder"
        if not stat.S_ISREG(mode):
            return f"special file {stat.filemode(mode)}"  # a FIFO or device: never opened
        if is_output(path):
            return f"output of {info.st_size} bytes, mtime {info.st_mtime_ns}"
        key = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        known = self._digests.get(path)
        if known is None or known[0] != key:
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
            except OSError as e:
                return f"unreadable ({e.strerror})"
            known = self._digests[path] = key, digest.hexdigest()
        return known[1]


def _under(path: str, folders: list[Path]) -> bool:
    return any(path == str(f) or path.startswith(f"{f}{os.sep}") for f in folders)


def changed_inputs(before: dict[str, str], after: dict[str, str], may_write: Callable[[str], bool]) -> list[str]:
    """'created x', 'changed y', 'removed z' for every difference where nothing may be written."""
    found = []
    for path in sorted(before.keys() | after.keys()):
        if before.get(path) != after.get(path) and not may_write(path):
            found.append(f"{'created' if path not in before else 'removed' if path not in after else 'changed'} {path}")
    return found


@dataclass
class Sweep:
    """The sweep's folders: work (fixtures, the code copy, outputs; all hashed), logs (not), the commands' cwd."""

    work: Path
    logs: Path
    code: Path
    cwd: Path
    snapshots: Snapshots = field(default_factory=Snapshots)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def is_output(self, path: str) -> bool:
        """A path inside a runs*/ folder under work: where commands write their results."""
        rel = Path(path).relative_to(self.work) if _under(path, [self.work]) else None
        return rel is not None and any(part.startswith("runs") for part in rel.parts)
