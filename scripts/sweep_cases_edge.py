"""The sweep's edge-export cases (NCNN, LiteRT, ExecuTorch; issue 33, scope 5): a truncated or corrupt .param, .bin,
.tflite or .pte, metadata that lies (family, image size, class names), an export folder missing one of its files, a
graph op the runtime lacks, and a missing runtime or converter package: each one ERROR line, nothing written or
deleted (the sweep's snapshots check that).

The damaged exports are written here byte by byte, so the cases need neither a converter nor a runtime: the checks
that refuse them run before the runtime is imported; where a runtime would be the one to refuse (a short .bin, an
unknown layer, a damaged flatbuffer), a machine without it gives the one line naming requirements-edge.txt instead.
See scripts/bad_input_sweep.py, which registers edge_cases.
"""

import io
import json
import zipfile
from pathlib import Path

import yaml
from sweep_common import IMAGES, Case

META = {
    "names": [f"class{i}" for i in range(80)],
    "family": "yolov5",
    "end2end": False,
    "stride": 32,
    "strides": [8, 16, 32],
    "imgsz": [64, 64],
    "batch": 1,
    "dynamic": False,
    "half": False,
    "precision": "fp32",
    "calibration_images": 0,
    "exporter": "yolo-detect export.py",
}
PARAM = "7767517\n2 2\nInput in0 0 1 in0\nConvolution conv0 1 1 in0 out0 0=16 1=3 5=1 6=432\n"
HIDE = (  # a Python prelude that makes packages look uninstalled, as on a machine without requirements-edge.txt
    "import importlib.util, sys\n"
    "hidden = {names}\n"
    "find = importlib.util.find_spec\n"
    "importlib.util.find_spec = lambda name, *a: None if name.split('.')[0] in hidden else find(name, *a)\n"
    "sys.modules.update(dict.fromkeys(hidden))\n"
)


def _says(*words: str):
    """A check that the output holds every one of words."""
    return lambda out: "" if all(w in out for w in words) else f"output lacks {words}"


def _ncnn(root: Path, name: str, param: str | bytes = PARAM, weights: bytes | None = bytes(1728 + 64), **meta):
    """An *_ncnn_model folder: param text (or bytes), a .bin (None: absent) and metadata.yaml (META updated by
    meta; a None value drops the key, meta=None drops the file)."""
    folder = root / f"{name}_ncnn_model"
    folder.mkdir(parents=True)
    (folder / "model.ncnn.param").write_bytes(param if isinstance(param, bytes) else param.encode())
    if weights is not None:
        (folder / "model.ncnn.bin").write_bytes(weights)
    if meta.get("meta", True) is not None:
        values = {k: v for k, v in {**META, **meta}.items() if v is not None and k != "meta"}
        (folder / "metadata.yaml").write_text(yaml.safe_dump(values))
    return str(folder)


def _tflite(root: Path, name: str, body: bytes, metadata: str | None = json.dumps(META)) -> str:
    """A .tflite: body, then (unless None) a zip holding metadata.json, as our exports append it."""
    path = root / f"{name}.tflite"
    archive = io.BytesIO()
    if metadata is not None:
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("metadata.json", metadata)
    path.write_bytes(body + archive.getvalue())
    return str(path)


def _pte(root: Path, name: str, program: bytes | None) -> str:
    """An *_executorch_model folder: model.pte (None: absent) and metadata.yaml."""
    folder = root / f"{name}_executorch_model"
    folder.mkdir(parents=True)
    if program is not None:
        (folder / "model.pte").write_bytes(program)
    (folder / "metadata.yaml").write_text(yaml.safe_dump(META))
    return str(folder)


def _ncnn_cases(root: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (weights, words its ERROR line must hold)."""
    return {
        "ncnn .param truncated": (_ncnn(root, "cut", PARAM.rsplit("\n", 2)[0]), ("truncated or damaged",)),
        "ncnn .param not text": (_ncnn(root, "binary", bytes(range(256)) * 8), ("is not an NCNN .param",)),
        "ncnn .param garbled layer line": (_ncnn(root, "garbled", PARAM.replace(" 1 1 ", " x y ")), ("damaged",)),
        "ncnn .bin missing": (_ncnn(root, "nobin", weights=None), ("model.ncnn.bin is missing",)),
        "ncnn metadata.yaml missing": (_ncnn(root, "nometa", meta=None), ("not a YOLO export",)),
        "ncnn metadata lies: family": (_ncnn(root, "family", family="yolo99"), ("yolo99",)),
        "ncnn metadata lies: imgsz": (_ncnn(root, "imgsz", imgsz=[100000, 64]), ("imgsz",)),
        "ncnn metadata lies: names": (_ncnn(root, "names", names="person"), ("names",)),
        "ncnn .bin truncated": (_ncnn(root, "shortbin", weights=bytes(100)), ("ncnn",)),
        "ncnn layer the runtime lacks": (_ncnn(root, "op", PARAM.replace("Convolution", "NoSuchLayer")), ("ncnn",)),
    }


def _file_cases(root: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    header = b"\x1c\x00\x00\x00TFL3" + bytes(64)
    return {
        "tflite random bytes": (_tflite(root, "random", bytes(range(256)) * 64, None), ("not a YOLO export",)),
        "tflite truncated (its metadata cut off)": (_tflite(root, "cut", header, None), ("not a YOLO export",)),
        "tflite metadata.json not JSON": (_tflite(root, "json", header, "{names: ["), ("not JSON",)),
        "tflite corrupt flatbuffer": (_tflite(root, "corrupt", header + bytes(range(256)) * 16), ("LiteRT", "ai_edge")),
        "tflite not a flatbuffer": (_tflite(root, "nohead", bytes(300)), ("no TFL3 flatbuffer header",)),
        "pte missing": (_pte(root, "nopte", None), ("model.pte is missing",)),
        "pte not a program": (_pte(root, "garbage", bytes(range(256)) * 8), ("not an ExecuTorch program",)),
        "pte truncated": (_pte(root, "cut", b"\x18\x00\x00\x00ET12" + bytes(200)), ("xecu",)),
    }


def _one_of(words: tuple[str, ...]):
    """The ERROR line holds one of words (a runtime's refusal, or the missing runtime's install line)."""
    return lambda out: "" if any(w in out for w in (*words, "requirements-edge.txt")) else f"output lacks {words}"


def edge_cases(sweep) -> list[Case]:
    """The cases, their damaged exports written into the sweep's work folder (hashed as inputs)."""
    root = sweep.work / "edge_exports"
    bus = str(IMAGES / "bus.jpg")
    out = root / "runs_edge"
    cases = []
    for name, (weights, words) in {**_ncnn_cases(root), **_file_cases(root)}.items():
        argv = ["detect.py", "--weights", weights, "--source", bus, "--project", str(out)]
        check = _one_of(words) if words in (("ncnn",), ("xecu",)) or "ai_edge" in words else _says(*words)
        cases.append(Case(f"edge: {name}", argv, "error", check=check, hostile=True))
    good = _ncnn(root, "good")
    hide_ncnn = HIDE.format(names={"ncnn"}) + f"import detect; sys.exit(detect.main(['--weights', {good!r}, "
    hide_ncnn += f"'--source', {bus!r}, '--project', {str(out)!r}]))"
    cases.append(Case("edge: ncnn package missing", ["-c", hide_ncnn], "error", check=_says("requirements-edge.txt")))
    weights = sweep.code / "weights" / "yolov5n.pt"
    hide_pnnx = HIDE.format(names={"pnnx"}) + "import export; sys.exit(export.main(['--weights', "
    hide_pnnx += f"{str(weights)!r}, '--include', 'ncnn', '--img', '64']))"
    says = _says("needs the pnnx package", "requirements-edge.txt")
    return [*cases, Case("edge: export --include ncnn without pnnx", ["-c", hide_pnnx], "error", check=says)]
