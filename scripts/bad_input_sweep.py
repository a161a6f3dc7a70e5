"""Run train.py, test.py, detect.py and export.py on bad inputs and check each ends cleanly.

Usage:
    python scripts/bad_input_sweep.py               # all cases, a markdown table on stdout
    python scripts/bad_input_sweep.py -k detect     # only cases whose name contains 'detect'

Each case is one command run in a subprocess. It passes when the output has no Python traceback, the exit
code is below 128, and it ends as expected: "error" cases with exit 1 or 2 and one line starting "ERROR:",
"ok" cases with exit 0. Some cases check more (nothing run from a data YAML, no output overwritten, the same
mAP with renumbered COCO image ids). Needs ../shared (COCO128 images, yolov5n.pt); exits 1 if any case fails.
"""

import argparse
import json
import os
import pickle
import random
import shutil
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

from models.checkpoint import checkpoint_dict, load_checkpoint, save_checkpoint  # noqa: E402
from models.yolo import Model  # noqa: E402

SHARED = ROOT.parent / "shared"
COCO = SHARED / "datasets" / "coco128"
WEIGHTS = SHARED / "weights" / "yolov5n.pt"
IMAGES = SHARED / "images"


@dataclass
class Case:
    """One command and what it should end in."""

    name: str
    argv: list[str]
    expect: str  # "error" or "ok"
    check: Callable[[str], str] | None = None  # extra check on the output: '' when fine, else why not
    timeout: float = 300.0


@dataclass
class Outcome:
    """What one case did."""

    case: Case
    code: int
    last_line: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


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
# Running


def run_case(case: Case, cwd: Path) -> Outcome:
    """Run one case and judge it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / case.argv[0]), *case.argv[1:]],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=case.timeout,
        )
        code, text = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        code, text = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
    lines = [line for line in text.splitlines() if line.strip()]
    outcome = Outcome(case, code, lines[-1].strip() if lines else "", seconds=time.perf_counter() - start)
    if "Traceback (most recent call last)" in text:
        outcome.problems.append("traceback")
    if code >= 128 or code < 0 or code == 124:
        outcome.problems.append(f"exit code {code}")
    errors = [line for line in lines if line.startswith("ERROR")]
    if case.expect == "error" and (code not in (1, 2) or len(errors) != 1):
        outcome.problems.append(f"expected one ERROR line and exit 1/2, got {len(errors)} lines, exit {code}")
    if case.expect == "ok" and code != 0:
        outcome.problems.append(f"expected success, exit {code}")
    if case.expect == "error" and errors:
        outcome.last_line = errors[0]
    if case.check is not None and (why := case.check(text)):
        outcome.problems.append(why)
    return outcome


def _markdown(outcomes: list[Outcome]) -> str:
    rows = ["| case | exit | last line (ERROR line for errors) | s | verdict |", "| --- | --- | --- | --- | --- |"]
    for o in outcomes:
        line = o.last_line.replace("|", "\\|")[:220]
        verdict = "pass" if not o.problems else "FAIL: " + "; ".join(o.problems)
        rows.append(f"| {o.case.name} | {o.code} | {line} | {o.seconds:.1f} | {verdict} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Build the fixtures, run the cases, print the table; 1 when any case failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this text")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    opt = parser.parse_args(argv)
    if not (WEIGHTS.is_file() and COCO.is_dir()):
        print(f"ERROR: {SHARED} (COCO128, yolov5n.pt) is needed for the sweep")
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="bad_inputs_"))
    try:
        ckpt = _checkpoints(tmp)
        cases = detect_cases(tmp, ckpt) + test_cases(tmp, ckpt) + train_cases(tmp) + export_cases(tmp, ckpt)
        outcomes = []
        for case in (c for c in cases if opt.k in c.name):
            outcomes.append(run_case(case, tmp))
            print(f"{'pass' if not outcomes[-1].problems else 'FAIL'}  {case.name}", file=sys.stderr, flush=True)
        print(_markdown(outcomes))
        failed = [o for o in outcomes if o.problems]
        print(f"\n{len(outcomes) - len(failed)} passed, {len(failed)} failed")
        return 1 if failed else 0
    finally:
        if opt.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
