"""Issue 28's sweep cases for scripts/bad_input_sweep.py: hostile model files and how commands end.

One group per class of the issue: what a model file may hold (tensor kinds, BatchNorm variances, a model whose
outputs are not finite), what text from a file may reach the terminal (class names with control characters, in a
checkpoint or an export's metadata), what export metadata may claim (class names against what the model outputs,
end-to-end or not, ONNX and OpenVINO), how out-of-memory looks, and how SIGTERM ends a command (as Ctrl-C: nothing
left beside the weights). Every crafted file is an edited copy of a real model (the YOLO26 reference checkpoint
from ../shared when present, else a freshly built one; yolov5n for the official-style files) and is built only when
a case that uses it is selected.
"""

import functools
import json
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from sweep_common import COCO, SHARED, WEIGHTS, Case, Sweep, _coco_names, _copy_dataset, _data_yaml
from sweep_safety_fixtures import BUS, _contains, api, error, ok

from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, load_checkpoint, model_from_checkpoint

YOLO26_REFERENCE = SHARED / "reference" / "ultralytics" / "yolo26n_random.pt"
FORGED = "\nERROR: forged line\x1b[2J\x1b[H"  # a newline that forges a log line, ANSI codes that clear the screen
TINY = ["--img", "64"]


def _slug(text: str) -> str:
    return re.sub(r"\W+", "_", text).strip("_")


def _quantized(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.quantize_per_tensor(w.float(), 0.01, 128 if dtype == torch.quint8 else 0, dtype)


def _complex_nan(w: torch.Tensor) -> torch.Tensor:
    out = w.to(torch.complex64)
    out.view(-1)[0] = complex(float("nan"), 1.0)  # the real part NaN: casting to float keeps it, with a warning
    return out


def _negative_variance(var: torch.Tensor) -> torch.Tensor:
    out = var.clone()
    out[0] = -0.5  # finite: only a variance check sees it
    return out


# How each crafted weights file changes its tensors: (suffix of the weights it edits, which match or None for all,
# the edit).
EDITS: dict[str, tuple[str, int | None, Callable[[torch.Tensor], torch.Tensor]]] = {
    "negative BatchNorm variance (first layer)": ("running_var", 0, _negative_variance),
    "negative BatchNorm variance (layer 20)": ("running_var", 20, _negative_variance),
    "complex weight holding NaN": ("conv.weight", 0, _complex_nan),
    "int32 weight": ("conv.weight", 0, lambda w: w.round().to(torch.int32)),
    "float8_e4m3fn weight": ("conv.weight", 0, lambda w: w.to(torch.float8_e4m3fn)),
    "float8_e5m2 weight": ("conv.weight", 3, lambda w: w.to(torch.float8_e5m2)),
    "qint8 weight": ("conv.weight", 0, lambda w: _quantized(w, torch.qint8)),
    "quint8 weight (a Detect conv)": ("m.0.weight", 0, lambda w: _quantized(w, torch.quint8)),
    "sparse COO weight": ("conv.weight", 0, lambda w: w.to_sparse()),
    "sparse CSR BatchNorm bias": ("bn.bias", 2, lambda w: w.float().reshape(1, -1).to_sparse_csr()),
    "BatchNorm weights that overflow the outputs (all finite)": ("bn.weight", None, lambda w: w.float().fill_(6e4)),
}
OFFICIAL_STYLE = {"negative BatchNorm variance (layer 20)", "float8_e5m2 weight", "quint8 weight (a Detect conv)"}


class HostileFiles:
    """The crafted files, under <work>/hostile, each built on first use."""

    def __init__(self, sweep: Sweep):
        self.sweep, self.root = sweep, sweep.work / "hostile"
        self.runs = self.root / "runs"

    def _base(self, official: bool) -> dict:
        """The checkpoint a crafted file edits: yolov5n for official-style files, else the YOLO26 reference."""
        if official or not YOLO26_REFERENCE.is_file():
            return load_checkpoint(WEIGHTS)
        return load_checkpoint(YOLO26_REFERENCE)

    def weights(self, what: str) -> Path:
        """A copy of a model with one tensor edited (EDITS[what]), in our format or as an official-style pickled
        module (OFFICIAL_STYLE), in a folder of its own."""
        path = self.root / "weights" / _slug(what) / "w.pt"
        if path.is_file():
            return path
        path.parent.mkdir(parents=True)
        suffix, index, edit = EDITS[what]
        ckpt = self._base(what in OFFICIAL_STYLE)
        keys = [k for k in ckpt["model"] if k.endswith(suffix)]
        keys = keys if index is None else [keys[index]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized tensor creation is deprecated; CSR is 'beta'
            state = {k: edit(v) if k in keys else v for k, v in ckpt["model"].items()}
        key = keys[0]
        if what in OFFICIAL_STYLE:  # the whole module pickled, as YOLOv5's releases are
            model = model_from_checkpoint(ckpt)
            owner, _, name = key.rpartition(".")
            module = model.get_submodule(owner)
            store = module._parameters if name in module._parameters else module._buffers
            store[name] = state[key]
            torch.save({"epoch": -1, "model": model, "ema": None}, path)
        else:
            torch.save({**ckpt, "model": state}, path)
        return path

    def names_file(self, official: bool) -> Path:
        """A checkpoint whose every class name holds a newline and ANSI codes."""
        path = self.root / "names" / ("official" if official else "ours") / "w.pt"
        if not path.is_file():
            path.parent.mkdir(parents=True)
            ckpt = self._base(official)
            names = [f"{n}{FORGED}" for n in ckpt["names"]]
            if official:
                model = model_from_checkpoint(ckpt)
                model.names = dict(enumerate(names))  # YOLOv5 v7.0 stores a dict
                torch.save({"epoch": -1, "model": model, "ema": None}, path)
            else:
                torch.save({**ckpt, "names": names}, path)
        return path

    def recast(self, dtype: torch.dtype) -> Path:
        """The YOLO26 checkpoint with every floating-point weight in dtype (bfloat16, float64): usable."""
        path = self.root / "recast" / str(dtype).removeprefix("torch.") / "w.pt"
        if not path.is_file():
            path.parent.mkdir(parents=True)
            ckpt = self._base(False)
            state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in ckpt["model"].items()}
            torch.save({**ckpt, "model": state}, path)
        return path

    def renamed(self) -> Path:
        """yolov5n with the same 80 classes under other names (an ensemble partner that must be refused)."""
        path = self.root / "renamed" / "w.pt"
        if not path.is_file():
            path.parent.mkdir(parents=True)
            ckpt = load_checkpoint(WEIGHTS)
            torch.save({**ckpt, "names": [f"class{i}" for i in range(len(ckpt["names"]))]}, path)
        return path

    def train_data(self) -> Path:
        """A data YAML of 16 COCO128 images and labels (copied)."""
        data = self.root / "train16.yaml"
        if not data.is_file():
            _data_yaml(_copy_dataset(self.root / "train16", 16), "train16")
        return data

    def yolo26(self) -> Path:
        """The YOLO26 reference checkpoint (or a freshly built YOLO26n) in a folder of its own."""
        path = self.root / "yolo26" / "y26.pt"
        if not path.is_file():
            path.parent.mkdir(parents=True)
            if YOLO26_REFERENCE.is_file():
                shutil.copy(YOLO26_REFERENCE, path)
            else:
                model = Model("yolo26.yaml", nc=80)
                model.names = _coco_names()
                torch.save(checkpoint_dict(model), path)
        return path

    def _export(self) -> dict[str, Path]:
        """The YOLO26 checkpoint exported at 64 px to ONNX and OpenVINO (end-to-end), once."""
        folder = self.root / "export26"
        if not folder.is_dir():
            folder.mkdir(parents=True)
            shutil.copy(self.yolo26(), folder / "y26.pt")
            code = self.sweep.code
            argv = [
                str(code / "export.py"),
                "--weights",
                str(folder / "y26.pt"),
                *TINY,
                "--include",
                "onnx",
                "openvino",
            ]
            env = {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"}
            done = subprocess.run([sys.executable, *argv], cwd=self.sweep.cwd, env=env, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"export.py exited {done.returncode}: {done.stdout[-300:]}")
        return {"onnx": folder / "y26.onnx", "openvino": folder / "y26_openvino_model"}

    def lying_export(self, fmt: str, what: str, changes: dict) -> Path:
        """A copy of the YOLO26 export whose metadata has these keys changed (values as metadata.yaml holds them)."""
        source = self._export()[fmt]
        folder = self.root / "lying" / fmt / _slug(what)
        target = folder / source.name
        if target.exists():
            return target
        folder.mkdir(parents=True)
        if fmt == "openvino":
            shutil.copytree(source, target)
            meta = yaml.safe_load((target / "metadata.yaml").read_text())
            (target / "metadata.yaml").write_text(yaml.safe_dump({**meta, **changes}, sort_keys=False))
            return target
        import onnx

        model = onnx.load(str(source))
        props = {p.key: p for p in model.metadata_props}
        for key, value in changes.items():
            props[key].value = json.dumps(value)
        onnx.save(model, str(target))
        return target


def _detect(weights: Path, files: HostileFiles, *extra: str) -> list[str]:
    return ["detect.py", "--weights", str(weights), "--source", str(BUS), *TINY, "--project", str(files.runs), *extra]


def _no_forged_line(out: str) -> str:
    """No line of the output starts with the forged text, and no raw escape character reached it."""
    forged = [line for line in out.splitlines() if line.startswith("ERROR: forged")]
    raw = "\x1b" in out or "\r" in out
    return "; ".join(([f"forged line: {forged[0]!r}"] if forged else []) + (["a raw control character"] if raw else []))


def _both(first: Callable, arg, second: Callable) -> None:
    first(arg)
    second()


def weights_cases(files: HostileFiles) -> list[Case]:
    """Tensors a model file may not hold, and a model whose outputs are not finite: one ERROR line each."""
    cases = []
    for what in EDITS:
        build = functools.partial(files.weights, what)
        path = files.root / "weights" / _slug(what) / "w.pt"
        style = "official-style" if what in OFFICIAL_STYLE else "ours"
        cases.append(
            error(f"28 detect: {what} ({style})", _detect(path, files, "--conf-thres", "0"), setup=build, hostile=True)
        )
    for what, command in (
        ("negative BatchNorm variance (first layer)", "export"),
        ("float8_e4m3fn weight", "export"),
        ("float8_e4m3fn weight", "train"),
        ("qint8 weight", "Detector"),
        ("sparse COO weight", "Detector"),
    ):
        path = files.root / "weights" / _slug(what) / "w.pt"
        build = functools.partial(files.weights, what)
        if command == "export":
            argv = ["export.py", "--weights", str(path), *TINY, "--include", "onnx"]
        elif command == "train":
            argv = ["train.py", "--weights", str(path), "--data", str(files.root / "train16.yaml"), *TINY]
            argv += ["--epochs", "1", "--workers", "0", "--noplots", "--project", str(files.runs)]
            build = functools.partial(_both, files.weights, what, files.train_data)
        else:
            argv = api(f"from models import Detector\nprint(Detector({str(path)!r})(np.zeros((64, 64, 3), np.uint8)))")
        cases.append(error(f"28 {command}: {what}", argv, setup=build, hostile=True, timeout=300))
    for dtype in (torch.bfloat16, torch.float64):
        path = files.root / "recast" / str(dtype).removeprefix("torch.") / "w.pt"
        build = functools.partial(files.recast, dtype)
        cases.append(ok(f"28 detect: every weight {dtype} (usable)", _detect(path, files), setup=build))
    return cases


def names_cases(files: HostileFiles) -> list[Case]:
    """Class names with a newline and ANSI codes, from a checkpoint or an export's metadata: refused, never shown."""
    cases = []
    for official in (False, True):
        path = files.root / "names" / ("official" if official else "ours") / "w.pt"
        build = functools.partial(files.names_file, official)
        style = "official-style" if official else "ours"
        argv = _detect(path, files, "--conf-thres", "0", "--save-crop")
        cases.append(error(f"28 detect: class names with newline + ANSI ({style})", argv, _no_forged_line, setup=build))
    forged = [f"c{i}{FORGED}" for i in range(80)]
    for fmt in ("onnx", "openvino"):
        path = _lying_path(files, fmt, "forged names")
        build = functools.partial(files.lying_export, fmt, "forged names", {"names": forged})
        argv = _detect(path, files, "--conf-thres", "0")
        cases.append(error(f"28 detect: {fmt} metadata names with newline + ANSI", argv, _no_forged_line, setup=build))
    return cases


def _lying_path(files: HostileFiles, fmt: str, what: str) -> Path:
    name = "y26.onnx" if fmt == "onnx" else "y26_openvino_model"
    return files.root / "lying" / fmt / _slug(what) / name


# Metadata an export may not claim: what, the changed keys, and how the command ends ("clean": one ERROR line or a
# correct run: 81 names for 80 classes leave one name unused, which an end-to-end output cannot show).
LIES = {
    "3 names for an 80-class end-to-end model": ({"names": ["a", "b", "c"]}, "error"),
    "1 name and end2end false for a (B, 300, 6) output": ({"names": ["person"], "end2end": False}, "error"),
    "end2end false (80 names)": ({"end2end": False}, "error"),
    "81 names for an 80-class model": ({"names": [f"n{i}" for i in range(81)]}, "clean"),
}


def metadata_cases(files: HostileFiles) -> list[Case]:
    """Export metadata that does not fit the model, in ONNX and OpenVINO: one ERROR line before any output."""
    cases = []
    for fmt in ("onnx", "openvino"):
        for what, (changes, expect) in LIES.items():
            path = _lying_path(files, fmt, what)
            build = functools.partial(files.lying_export, fmt, what, changes)
            argv = _detect(path, files, "--conf-thres", "0", "--save-txt")
            cases.append(Case(f"28 detect: {fmt} metadata lies: {what}", argv, expect, setup=build))
        what = "3 names for an 80-class end-to-end model"
        path = _lying_path(files, fmt, what)
        build = functools.partial(files.lying_export, fmt, what, LIES[what][0])
        body = f"""
            from models import Detector
            for r in Detector({str(path)!r}, conf_thres=0.0)(np.zeros((64, 64, 3), np.uint8)):
                print(r)
        """
        cases.append(error(f"28 Detector: {fmt} metadata lies: {what}", api(body), setup=build))
    return cases


def smaller_cases(files: HostileFiles) -> list[Case]:
    """An ensemble whose class lists differ by name only; YOLO26 asked for more detections than its head gives."""
    ensemble = ["detect.py", "--weights", str(WEIGHTS), str(files.root / "renamed" / "w.pt"), "--source", str(BUS)]
    ensemble += [*TINY, "--project", str(files.runs)]
    capped = _detect(files.root / "yolo26" / "y26.pt", files, "--max-det", "500")
    return [
        error(
            "28 detect: ensemble of two 80-class models with different names",
            ensemble,
            _contains("differ"),
            setup=files.renamed,
        ),
        ok(
            "28 detect: YOLO26 --max-det 500 says it is capped at 300",
            capped,
            _contains("WARNING: --max-det 500", "at most 300"),
            setup=files.yolo26,
        ),
    ]


def memory_cases(files: HostileFiles) -> list[Case]:
    """A CPU allocation that fails (detect.py at 8192 px under the sweep's 6 GiB address-space limit)."""
    argv = ["detect.py", "--weights", str(WEIGHTS), "--source", str(BUS), "--img", "8192", "--project", str(files.runs)]
    return [error("28 detect: CPU allocation failure (--img 8192 under 6 GiB)", argv, _contains("out of memory"))]


def _int8_export(files: HostileFiles) -> tuple[list[str], Path]:
    folder = files.root / "int8"
    data = folder / "coco128.yaml"
    argv = ["export.py", "--weights", str(folder / "w.pt"), *TINY, "--include", "onnx", "openvino", "--int8"]
    return [*argv, "--data", str(data), "--calib-images", "16"], folder


def _int8_setup(folder: Path) -> Callable[[], None]:
    def build() -> None:
        if not folder.is_dir():
            folder.mkdir(parents=True)
            shutil.copy(WEIGHTS, folder / "w.pt")
            names = _coco_names()
            content = {"path": str(COCO), "train": "images/train2017", "val": "images/train2017", "names": names}
            (folder / "coco128.yaml").write_text(yaml.safe_dump(content, sort_keys=False))
        for left in folder.glob("w_int8*"):  # an earlier case's finished export: each case starts afresh
            shutil.rmtree(left) if left.is_dir() else left.unlink()

    return build


def _nothing_beside(folder: Path) -> Callable[[str], str]:
    def check(_out: str) -> str:
        left = sorted(p.name for p in folder.glob(".*-export-*"))
        return f"left beside the weights: {left}" if left else ""

    return check


def signal_cases(files: HostileFiles) -> list[Case]:
    """SIGTERM at several moments of export.py --int8, detect.py and train.py: the same clean-up as Ctrl-C."""
    argv, folder = _int8_export(files)
    cases = [
        Case(
            f"28 SIGTERM export.py --int8 after {t} s",
            argv,
            "signal",
            _nothing_beside(folder),
            timeout=300,
            setup=_int8_setup(folder),
            terminate_after=t,
            allow=[folder],
        )
        for t in (2, 6, 11, 17)
    ]
    detect = ["detect.py", "--weights", str(WEIGHTS), "--source", str(COCO / "images" / "train2017"), "--img", "320"]
    detect += ["--project", str(files.runs), "--save-txt"]
    cases += [
        Case(f"28 SIGTERM detect.py after {t} s", detect, "signal", timeout=300, terminate_after=t) for t in (3, 9)
    ]
    data = files.root / "train16.yaml"
    train = ["train.py", "--weights", str(WEIGHTS), "--data", str(data), *TINY, "--epochs", "3", "--workers", "2"]
    train += ["--batch-size", "4", "--noplots", "--project", str(files.runs)]
    cases += [
        Case(
            f"28 SIGTERM train.py after {t} s", train, "signal", timeout=400, setup=files.train_data, terminate_after=t
        )
        for t in (4, 20)
    ]
    return cases


def hostile_cases(sweep: Sweep) -> list[Case]:
    """Every issue-28 case (named '28 ...')."""
    files = HostileFiles(sweep)
    groups = (weights_cases, names_cases, metadata_cases, smaller_cases, memory_cases, signal_cases)
    return [case for group in groups for case in group(files)]
