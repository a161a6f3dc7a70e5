"""Run train.py, test.py, detect.py, export.py and the Python API on bad inputs and check each ends cleanly.

Usage:
    python scripts/bad_input_sweep.py               # all cases, a markdown table on stdout
    python scripts/bad_input_sweep.py -k detect     # only cases whose name matches the regular expression 'detect'
    python scripts/bad_input_sweep.py -k '^([0-9]+|more) '  # only the issue-16 cases (named by the issue's item)

Each case is one command run in a subprocess (or several started together), from a copy of the working tree in a
temporary folder, so that the defaults (weights/, data/, runs/, ../datasets) resolve there and nothing is written
into the repository or ../shared. A case passes when:
- the output has no Python traceback, the exit code is below 128 and the command ended within its timeout (the
  whole process group is killed at the timeout);
- it ends as expected: "error" cases with exit 1 or 2 and one line starting "ERROR:", "ok" cases with exit 0,
  "clean" cases either way;
- no input changed: every file under the temporary folder (fixtures, datasets, weights, the copy of the code) and
  under ../shared is hashed with sha256 before and after the case (a file is re-hashed when its inode, size,
  mtime or ctime changed); a file changed, removed or created anywhere but in a runs*/ output folder or a path
  the case allows fails it. This is also the "nothing written outside the run folder" check: the commands run in
  an empty folder, which must stay empty apart from runs/. Our own label and image caches are not inputs;
- crafted ("hostile") inputs stay under 2 GB of peak resident memory and never reach an out-of-memory error
  (the bounds must refuse them before allocating).

Memory. The issue asks for `prlimit --as=2GiB`, but no command can start under that address-space limit: `import
torch` alone maps 3.3 GB of address space (the CUDA libraries of the wheel). The smallest limits under which normal
commands passed on a 2-core CPU machine (bisected in 128 MiB steps; they vary from run to run) were, in MiB:
detect.py 4112-5712, test.py 4192-4432, train.py 4672-5072, export.py --include openvino 4304, a Detector script
3968-4864. So every command runs under `prlimit --as` at 6 GiB (train.py 6.5 GiB; ADDRESS_LIMITS_MIB), which
every good case passes under and which makes a runaway allocation fail early instead of taking the machine's
memory; the peak resident memory of each is measured with `/usr/bin/time -f %M` and shown in the table, and a
hostile case passes only with a peak under 2 GB (HOSTILE_PEAK_BYTES) and no out-of-memory message. Without
/usr/bin/time or prlimit the cases run without them and the column shows '-'.

Needs ../shared (COCO128 images, yolov5n.pt); exits 1 if any case fails. The issue-16 cases (data safety,
hostile files, path swapping, URL cache, exports) are in scripts/sweep_cases_safety.py.
"""

import argparse
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if __name__ == "__main__":
    sys.modules.setdefault("bad_input_sweep", sys.modules[__name__])  # sweep_cases_safety imports Case from here

from models.checkpoint import checkpoint_dict, load_checkpoint, save_checkpoint  # noqa: E402
from models.yolo import Model  # noqa: E402
from utils.log import one_line  # noqa: E402

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
    expect: str  # "error", "ok" or "clean" (either ok or one ERROR line)
    check: Callable[[str], str] | None = None  # extra check on the output: '' when fine, else why not
    timeout: float = 300.0
    hostile: bool = False  # a crafted input: peak memory under 2 GB, no out-of-memory error
    allow: list[Path] = field(default_factory=list)  # where the case may write, besides runs*/ folders
    protect: list[Path] = field(default_factory=list)  # must stay unchanged even inside a runs*/ folder
    setup: Callable[[], None] | None = None  # builds what only this case needs, run when the case is selected
    copies: int = 1  # the same command started this many times at once


@dataclass
class Outcome:
    """What one case did."""

    case: Case
    code: int
    last_line: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_mb: float | None = None  # the largest peak resident memory among its processes


# ---------------------------------------------------------------------------------------------------------------------
# Fixtures


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


# ---------------------------------------------------------------------------------------------------------------------
# Checks beyond the exit code


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


# ---------------------------------------------------------------------------------------------------------------------
# Cases


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


def detect_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """detect.py: flags out of range, sources that collide or are odd, broken weights."""
    out = tmp / "runs_detect"
    w = ["--weights", str(WEIGHTS), "--project", str(out)]
    bus = str(IMAGES / "bus.jpg")
    video = _detect_sources(tmp)
    return [
        Case("detect --conf-thres 2", ["detect.py", *w, "--source", bus, "--conf-thres", "2"], "error"),
        Case("detect --iou-thres 5", ["detect.py", *w, "--source", bus, "--iou-thres", "5"], "error"),
        Case("detect --max-det -3", ["detect.py", *w, "--source", bus, "--max-det", "-3"], "error"),
        Case("detect --classes 999", ["detect.py", *w, "--source", bus, "--classes", "999"], "error"),
        Case("detect --line-thickness -4", ["detect.py", *w, "--source", bus, "--line-thickness", "-4"], "error"),
        Case("detect --line-thickness 40000", ["detect.py", *w, "--source", bus, "--line-thickness", "40000"], "error"),
        Case("detect --vid-stride 0", ["detect.py", *w, "--source", bus, "--vid-stride", "0"], "error"),
        Case("detect --img-size -1", ["detect.py", *w, "--source", bus, "--img-size", "-1"], "error"),
        Case("detect --device cuda (no CUDA)", ["detect.py", *w, "--source", bus, "--device", "cuda"], "error"),
        Case("detect --device mps", ["detect.py", *w, "--source", bus, "--device", "mps"], "error"),
        Case("detect missing source", ["detect.py", *w, "--source", str(tmp / "nope.jpg")], "error"),
        Case("detect folder of folders", ["detect.py", *w, "--source", str(tmp / "only_dirs")], "error"),
        Case("detect truncated JPEG only", ["detect.py", *w, "--source", str(tmp / "corrupt.jpg")], "error"),
        Case(
            "detect same stem in a glob",
            ["detect.py", *w, "--name", "glob", "--save-txt", "--source", str(tmp / "same_stem" / "*" / "x.jpg")],
            "ok",
            _outputs(out / "glob" / "labels", "*.txt", 2),
        ),
        Case(
            "detect same stem in a list",
            ["detect.py", *w, "--name", "list", "--source", str(tmp / "list.txt")],
            "ok",
            _outputs(out / "list", "x*.jpg", 2),
        ),
        Case(
            "detect x.jpg and x.png",
            ["detect.py", *w, "--name", "png", "--save-txt", "--source", str(tmp / "same_folder")],
            "ok",
            _outputs(out / "png" / "labels", "*.txt", 2),
        ),
        Case("detect file name with [ ]", ["detect.py", *w, "--source", str(tmp / "globchars" / "a[1].jpg")], "ok"),
        Case("detect video cut short", ["detect.py", *w, "--source", str(video)], "ok"),
        Case(
            "detect random-bytes weights",
            ["detect.py", "--weights", str(ckpt["random"]), "--source", bus, "--project", str(out)],
            "error",
        ),
        Case(
            "detect pickle that runs code",
            ["detect.py", "--weights", str(ckpt["pickle_exec"]), "--source", bus, "--project", str(out)],
            "error",
            _no_file(tmp / "PWNED"),
        ),
        Case(
            "detect names shorter than nc",
            ["detect.py", "--weights", str(ckpt["short_names"]), "--source", bus, "--project", str(out)],
            "error",
        ),
        Case(
            "detect NaN weights",
            ["detect.py", "--weights", str(ckpt["nan"]), "--source", bus, "--project", str(out)],
            "error",
        ),
        Case(
            "detect ensemble of different class lists",
            [
                "detect.py",
                "--weights",
                str(WEIGHTS),
                str(ckpt["three_classes"]),
                "--source",
                bus,
                "--project",
                str(out),
            ],
            "error",
        ),
    ]


def _test_data(tmp: Path) -> dict[str, Path]:
    """Data YAMLs and JSON files for the test.py cases."""
    tiny = _data_yaml(_copy_dataset(tmp / "tiny", 3), "tiny")
    corrupt_root = _copy_dataset(tmp / "corrupt", 4)
    next((corrupt_root / "images" / "train").glob("*.jpg")).write_text("not an image")
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("path: [unclosed\n")
    coco16 = _copy_dataset(tmp / "coco16", 16)
    keep = {p.name for p in (coco16 / "images" / "train").glob("*.jpg")}
    _subset_json(COCO / "annotations" / "instances_train2017.json", keep, tmp / "stems.json")
    _renumbered_json(COCO / "annotations" / "instances_train2017.json", keep, tmp / "renumbered.json")
    (tmp / "notjson.json").write_text("{oops")
    (tmp / "pred_bad.json").write_text(json.dumps([{"image_id": 1}]))
    return {
        "tiny": tiny,
        "corrupt": _data_yaml(corrupt_root, "corrupt"),
        "shell": _data_yaml(tmp / "absent", "shell", download=f"bash -c 'touch {tmp / 'SHELL_RAN'}'"),
        "bad_yaml": bad_yaml,
        "stems": _data_yaml(coco16, "coco16_stems", ann_json=str(tmp / "stems.json")),
        "renumbered": _data_yaml(coco16, "coco16_renumbered", ann_json=str(tmp / "renumbered.json")),
    }


def test_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """test.py: flags, tiny and damaged datasets, renumbered COCO ids, broken JSON and weights."""
    out, data = tmp / "runs_test", _test_data(tmp)
    tiny = ["test.py", "--data", str(data["tiny"]), "--project", str(out)]
    w = ["--weights", str(WEIGHTS)]
    coco16 = [*w, "--img", "320", "--batch-size", "16", "--save-json", "--project", str(out)]
    cases = [
        Case("test --batch-size 0", [*tiny, *w, "--batch-size", "0"], "error"),
        Case("test --conf-thres 2", [*tiny, *w, "--conf-thres", "2"], "error"),
        Case("test --device cuda (no CUDA)", [*tiny, *w, "--device", "cuda"], "error"),
        Case("test 3 images, default batch 32", [*tiny, *w, "--img", "160"], "ok"),
        Case(
            "test corrupt image dropped",
            ["test.py", "--data", str(data["corrupt"]), *w, "--img", "160", "--batch-size", "4", "--project", str(out)],
            "ok",
        ),
        Case(
            "test data YAML with a shell download",
            ["test.py", "--data", str(data["shell"]), *w],
            "error",
            _no_file(tmp / "SHELL_RAN"),
        ),
        Case("test data YAML syntax error", ["test.py", "--data", str(data["bad_yaml"]), *w], "error"),
        Case(
            "test ann_json with stem ids", ["test.py", "--data", str(data["stems"]), *coco16, "--name", "stems"], "ok"
        ),
        Case(
            "test ann_json renumbered 1..N",
            ["test.py", "--data", str(data["renumbered"]), *coco16, "--name", "renumbered"],
            "ok",
            _same_map(out / "stems", out / "renumbered"),
        ),
        Case("test --ann-json not JSON", [*tiny, *w, "--ann-json", str(tmp / "notjson.json")], "error"),
        Case(
            "test --pred-json malformed",
            [
                "test.py",
                "--ann-json",
                str(tmp / "stems.json"),
                "--pred-json",
                str(tmp / "pred_bad.json"),
                "--project",
                str(out),
            ],
            "error",
        ),
        Case("test --task test without a test split", [*tiny, *w, "--task", "test"], "error"),
    ]
    broken = {
        "text": "refused weights file",
        "truncated": "truncated weights",
        "no_names": "no names in weights",
        "model_list": "model entry a list",
        "wrong_yaml": "weights not fitting their YAML",
    }
    cases += [Case(f"test {what}", [*tiny, "--weights", str(ckpt[key])], "error") for key, what in broken.items()]
    cases.append(Case("test ensemble of different class lists", [*tiny, *w, str(ckpt["three_classes"])], "error"))
    return cases


def train_cases(tmp: Path) -> list[Case]:
    """train.py: tiny data with the default batch, missing labels, broken configs, crafted checkpoints."""
    out = tmp / "runs_train"
    tiny = _data_yaml(_copy_dataset(tmp / "train_tiny", 3), "train_tiny")
    nolabels = _data_yaml(_copy_dataset(tmp / "nolabels", 3, labels=False), "nolabels")
    base = ["--data", str(tiny), "--img", "64", "--epochs", "1", "--project", str(out), "--workers", "0"]
    cfg = yaml.safe_load((ROOT / "models" / "yolov5n.yaml").read_text())
    (tmp / "cfg_syntax.yaml").write_text("nc: 80\nbackbone: [[-1, 1, Conv, [64, 6, 2, 2]]\n")
    concat = json.loads(json.dumps(cfg))
    concat["head"][2][0] = [-1, 2]  # Concat of layers with other spatial sizes
    _write_yaml(tmp / "cfg_concat.yaml", concat)
    negative = json.loads(json.dumps(cfg))
    negative["backbone"][0][3][0] = -64
    _write_yaml(tmp / "cfg_negative.yaml", negative)
    crafted = tmp / "crafted_last.pt"  # a loadable model whose training options are not a mapping
    ours = load_checkpoint(WEIGHTS)
    resume_state = {
        "epoch": 0,
        "best_fitness": 0.0,
        "ema_updates": 0,
        "optimizer": {"state": {}, "param_groups": []},
        "train_model": ours["model"],
    }
    torch.save({**ours, **resume_state, "train_args": "oops"}, crafted)
    scratch = ["--weights", "", "--cfg", "yolov5n.yaml"]
    (tmp / "evolve" / "exp").mkdir(parents=True)
    (tmp / "evolve" / "exp" / "evolve.csv").write_text("metrics/precision,lr0\nnot-a-number,0.01\n")
    return [
        Case("train --batch-size -2", ["train.py", *base, *scratch, "--batch-size", "-2"], "error"),
        Case(
            "train --batch-size -1 (AutoBatch) on the CPU",
            ["train.py", *base, *scratch, "--batch-size", "-1", "--name", "autobatch", "--noplots"],
            "ok",
        ),
        Case("train --quad with a batch of 6", ["train.py", *base, *scratch, "--quad", "--batch-size", "6"], "error"),
        Case("train --evolve with --resume", ["train.py", *base, *scratch, "--evolve", "2", "--resume"], "error"),
        Case(
            "train --evolve continuing a malformed evolve.csv",
            ["train.py", *base, *scratch, "--evolve", "2", "--project", str(tmp / "evolve"), "--exist-ok"],
            "error",
        ),
        Case("train --epochs 0", ["train.py", *base, *scratch, "--epochs", "0"], "error"),
        Case(
            "train 3 images, default batch 16",
            ["train.py", *base, *scratch, "--name", "tiny", "--noplots"],
            "ok",
            _outputs(out / "tiny" / "weights", "*.pt", 2),
        ),
        Case(
            "train without labels",
            ["train.py", *[a if a != str(tiny) else str(nolabels) for a in base], *scratch],
            "error",
        ),
        Case(
            "train --cfg YAML syntax error",
            ["train.py", *base, "--weights", "", "--cfg", str(tmp / "cfg_syntax.yaml")],
            "error",
        ),
        Case(
            "train --cfg Concat mismatch",
            ["train.py", *base, "--weights", "", "--cfg", str(tmp / "cfg_concat.yaml")],
            "error",
        ),
        Case(
            "train --cfg negative channels",
            ["train.py", *base, "--weights", "", "--cfg", str(tmp / "cfg_negative.yaml")],
            "error",
        ),
        Case("train --freeze every layer", ["train.py", *base, *scratch, "--freeze", "25"], "error"),
        Case("train --resume crafted last.pt", ["train.py", "--resume", str(crafted)], "error"),
        Case(
            "train data YAML with a shell download",
            ["train.py", *base, *scratch, "--data", str(tmp / "shell.yaml")],
            "error",
            _no_file(tmp / "SHELL_RAN"),
        ),
    ]


def export_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """export.py on broken and malicious checkpoints and impossible requests; detect.py on a non-YOLO .onnx."""
    not_yolo = tmp / "linear.onnx"
    try:
        torch.onnx.export(torch.nn.Linear(4, 7), (torch.zeros(1, 3, 4),), str(not_yolo), dynamo=False)
    except Exception:  # no onnx package: detect.py must still end in one line (it names the package)
        not_yolo.write_bytes(b"\x08\x07")
    w = ["--weights", str(WEIGHTS)]
    bus = str(IMAGES / "bus.jpg")
    return [
        Case("export random bytes .pt", ["export.py", "--weights", str(ckpt["random"])], "error"),
        Case(
            "export malicious pickle",
            ["export.py", "--weights", str(ckpt["pickle_exec"])],
            "error",
            _no_file(tmp / "PWNED"),
        ),
        Case("export missing weights", ["export.py", "--weights", str(tmp / "none.pt")], "error"),
        Case("export --half on the CPU", ["export.py", *w, "--include", "onnx", "--half"], "error"),
        Case("export --include engine without CUDA", ["export.py", *w, "--include", "engine"], "error"),
        Case("export --img 100 (not a stride multiple)", ["export.py", *w, "--img", "100"], "error"),
        Case("detect with a non-YOLO .onnx", ["detect.py", "--weights", str(not_yolo), "--source", bus], "error"),
        Case("detect with a missing .onnx", ["detect.py", "--weights", str(tmp / "x.onnx"), "--source", bus], "error"),
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Inputs unchanged: sha256 snapshots


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


# ---------------------------------------------------------------------------------------------------------------------
# Running


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


def copy_code(dst: Path) -> Path:
    """The working tree's tracked and untracked (not ignored) files in dst, plus weights/yolov5n.pt from ../shared."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=False
    )
    if listing.returncode == 0:
        for name in filter(None, listing.stdout.decode().split("\0")):
            if (ROOT / name).is_file():
                (dst / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dst / name)
    else:  # not a git checkout: everything but outputs and caches
        ignore = shutil.ignore_patterns(".git", "runs", "__pycache__", "*.pt", "*.onnx", "*_openvino_model")
        shutil.copytree(ROOT, dst, ignore=ignore)
    (dst / "weights").mkdir(exist_ok=True)
    shutil.copy(WEIGHTS, dst / "weights" / "yolov5n.pt")
    return dst


def _command(case: Case, sweep: Sweep, peak_file: Path) -> list[str]:
    """The case's command under prlimit --as and /usr/bin/time (when present)."""
    script = case.argv[0]
    cmd = [sys.executable, *case.argv] if script == "-c" else [sys.executable, str(sweep.code / script), *case.argv[1:]]
    if PRLIMIT:
        cmd = [PRLIMIT, f"--as={ADDRESS_LIMITS_MIB.get(Path(script).name, 6144) << 20}", *cmd]
    if TIME:
        cmd = [TIME, "-f", "%M", "-o", str(peak_file), *cmd]
    return cmd


def _start(case: Case, sweep: Sweep, tag: str) -> tuple[subprocess.Popen, Path, Path]:
    """Start one copy of the case in its own process group; output to a log file (no pipe can fill and stall)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(sweep.code)}
    log, peak = sweep.logs / f"{tag}.log", sweep.logs / f"{tag}.peak"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            _command(case, sweep, peak),
            cwd=sweep.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log, peak


def _wait(proc: subprocess.Popen, deadline: float) -> int:
    """The exit code, or 124 after killing the process group at the deadline; leftover children are ended too."""
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        code = 124
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of this case's own process (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    return code


def _peak_bytes(file: Path) -> int | None:
    """Peak resident memory from /usr/bin/time -f %M (KiB, its last line)."""
    try:
        return int(file.read_text().split()[-1]) * 1024
    except (OSError, ValueError, IndexError):
        return None


def _judge(case: Case, code: int, text: str) -> tuple[list[str], str]:
    """Problems with one process's ending, and the line to show (its ERROR line, else its last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    problems = []
    if "Traceback (most recent call last)" in text:
        problems.append("traceback")
    if code == 124:
        problems.append(f"no end within {case.timeout:.0f} s (killed)")
    elif code >= 128 or code < 0:
        problems.append(f"exit code {code}")
    errors = [line for line in lines if line.startswith("ERROR")]
    one_error = code in (1, 2) and len(errors) == 1
    if case.expect == "error" and not one_error:
        problems.append(f"expected one ERROR line and exit 1/2, got {len(errors)} lines, exit {code}")
    if case.expect == "ok" and code != 0:
        problems.append(f"expected success, exit {code}")
    if case.expect == "clean" and code != 0 and not one_error:
        problems.append(f"expected success or one ERROR line, got {len(errors)} ERROR lines, exit {code}")
    if case.hostile and (oom := [w for w in OUT_OF_MEMORY if w.lower() in text.lower()]):
        problems.append(f"ran out of memory ('{oom[0]}'): not bounded before allocating")
    return problems, errors[0] if errors else lines[-1] if lines else ""


def run_case(case: Case, sweep: Sweep, tag: str) -> Outcome:
    """Run one case (its setup first, then every copy together) and judge it."""
    start = time.perf_counter()
    if case.setup is not None:
        try:
            case.setup()
        except Exception as e:  # a fixture of this script failed: the case cannot be judged
            return Outcome(case, -1, "", [f"setup failed: {type(e).__name__}: {one_line(e)[:300]}"])
    roots = [sweep.work, SHARED]
    before = sweep.snapshots.take(roots, sweep.is_output)
    started = [_start(case, sweep, f"{tag}.{i}") for i in range(case.copies)]
    deadline = time.monotonic() + case.timeout
    codes = [_wait(proc, deadline) for proc, _, _ in started]
    texts = [log.read_text(errors="replace") for _, log, _ in started]
    peaks = [p for p in (_peak_bytes(peak) for _, _, peak in started) if p is not None]
    outcome = Outcome(case, max(codes, key=abs), "", seconds=time.perf_counter() - start)
    outcome.peak_mb = max(peaks) / 1e6 if peaks else None
    for i, (code, text) in enumerate(zip(codes, texts)):
        problems, line = _judge(case, code, text)
        outcome.problems += [f"run {i + 1}: {p}" if case.copies > 1 else p for p in problems]
        outcome.last_line = outcome.last_line or line
    if case.check is not None and (why := case.check("\n".join(texts))):
        outcome.problems.append(why)
    if case.hostile and peaks and max(peaks) >= HOSTILE_PEAK_BYTES:
        outcome.problems.append(f"peak memory {max(peaks) / 1e9:.2f} GB >= {HOSTILE_PEAK_BYTES / 1e9:.0f} GB")
    after = sweep.snapshots.take(roots, sweep.is_output)

    def may_write(path: str) -> bool:
        return (sweep.is_output(path) or _under(path, case.allow)) and not _under(path, case.protect)

    if changes := changed_inputs(before, after, may_write):
        shown = "; ".join(c.replace(str(sweep.work), "<tmp>") for c in changes[:3])
        more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
        outcome.problems.append(f"inputs touched: {shown}{more}")
    return outcome


def _markdown(outcomes: list[Outcome]) -> str:
    rows = [
        "| case | exit | peak MB | last line (ERROR line for errors) | s | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        line = o.last_line.replace("|", "\\|")[:220]
        verdict = "pass" if not o.problems else "FAIL: " + "; ".join(o.problems).replace("|", "\\|")
        peak = f"{o.peak_mb:.0f}" if o.peak_mb is not None else "-"
        rows.append(f"| {o.case.name} | {o.code} | {peak} | {line} | {o.seconds:.1f} | {verdict} |")
    return "\n".join(rows)


def all_cases(sweep: Sweep) -> list[Case]:
    """Every case of the sweep (building their shared fixtures)."""
    from sweep_cases_safety import safety_cases  # imported here: it imports Case from this module

    tmp = sweep.work
    ckpt = _checkpoints(tmp)
    cases = detect_cases(tmp, ckpt) + test_cases(tmp, ckpt) + train_cases(tmp) + export_cases(tmp, ckpt)
    return cases + safety_cases(sweep)


def main(argv: list[str] | None = None) -> int:
    """Build the fixtures, run the cases, print the table; 1 when any case failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name matches this regular expression")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    opt = parser.parse_args(argv)
    if not (WEIGHTS.is_file() and COCO.is_dir()):
        print(f"ERROR: {SHARED} (COCO128, yolov5n.pt) is needed for the sweep")
        return 1
    base = Path(tempfile.mkdtemp(prefix="bad_inputs_"))
    work, logs, cwd = base / "work", base / "logs", base / "work" / "cwd"
    for folder in (logs, cwd):
        folder.mkdir(parents=True)
    sweep = Sweep(work, logs, copy_code(work / "code"), cwd)
    shared_before = Snapshots().take([SHARED], lambda _p: False)
    try:
        outcomes = []
        for i, case in enumerate(c for c in all_cases(sweep) if re.search(opt.k, c.name)):
            outcomes.append(run_case(case, sweep, f"{i:03d}"))
            print(f"{'pass' if not outcomes[-1].problems else 'FAIL'}  {case.name}", file=sys.stderr, flush=True)
        print(_markdown(outcomes))
        failed = [o for o in outcomes if o.problems]
        shared_changes = changed_inputs(shared_before, Snapshots().take([SHARED], lambda _p: False), lambda _p: False)
        print(f"\n{len(outcomes) - len(failed)} passed, {len(failed)} failed")
        if shared_changes:
            print(f"{SHARED} changed (full re-hash): {'; '.join(shared_changes[:5])}")
        return 1 if failed or shared_changes else 0
    finally:
        for cleanup in sweep.cleanups:
            cleanup()
        if opt.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
