"""Export safety (issue 16): export.py never deletes or overwrites what is not an earlier export of ours, writes
no intermediate file beside the weights, resolves bare weights names as detect.py does; an export's metadata is
read with bounds; a broken export ends detect.py / test.py in one ERROR line naming the file.

Most tests use a 5-class yolov5n-shaped model with random weights exported at 64 px (fast, no ../shared needed);
the README sequence at the end uses the official yolov5n.pt."""

import errno
import functools
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import urllib.error
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import yaml

import detect
import export
from models.export.backends import load_backend
from models.export.exporter import ExportOptions
from models.export.exporter import export as export_weights
from models.export.metadata import parse_metadata
from models.nn.yolo import Model
from models.weights.checkpoint import checkpoint_dict, load_model, save_checkpoint
from utils import downloads
from utils.data.shapes import CLASSES
from utils.errors import BackendError

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)

NOT_OURS = "exists and is not an export of ours: move it away or choose another --weights name"
OUTPUTS = {"torchscript": "tiny.torchscript", "onnx": "tiny.onnx", "openvino": "tiny_openvino_model"}
needs_onnx = pytest.mark.skipif(not importlib.util.find_spec("onnx"), reason="optional: requirements-export.txt")
needs_openvino = pytest.mark.skipif(
    not (importlib.util.find_spec("openvino") and importlib.util.find_spec("onnx")),
    reason="optional: pip install -r requirements-export.txt",
)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.fixture(scope="module")
def tiny_pt(tmp_path_factory) -> Path:
    """A yolov5n-shaped checkpoint with the shapes dataset's 5 classes (random weights)."""
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=len(CLASSES))
    model.names = list(CLASSES)
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    save_checkpoint(checkpoint_dict(model), path)
    return path


@pytest.fixture
def weights(tmp_path, tiny_pt) -> Path:
    """tiny.pt copied into a fresh folder of its own (the exports are written beside it)."""
    folder = tmp_path / "models"
    folder.mkdir()
    return Path(shutil.copy(tiny_pt, folder / "tiny.pt"))


@pytest.fixture(scope="module")
def exports(tmp_path_factory, tiny_pt) -> Path:
    """A folder with tiny.pt and its static 64 px exports in every format whose package is installed (read-only)."""
    folder = tmp_path_factory.mktemp("exports")
    pt = Path(shutil.copy(tiny_pt, folder / "tiny.pt"))
    formats = ["torchscript"] + (["onnx"] if importlib.util.find_spec("onnx") else [])
    formats += ["openvino"] if importlib.util.find_spec("openvino") and "onnx" in formats else []
    export_weights(pt, formats, ExportOptions(imgsz=(64, 64)), torch.device("cpu"))
    return folder


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """A small JPEG to detect on."""
    path = tmp_path_factory.mktemp("image") / "gray.jpg"
    cv2.imwrite(str(path), np.full((48, 64, 3), 114, np.uint8))
    return path


def _export(pt: Path, *include: str, img: int = 64) -> int:
    return export.main(["--weights", str(pt), "--include", *include, "--img", str(img)])


def _one_error_line(log) -> str:
    """The one ERROR line the command logged; no traceback."""
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert len(errors) == 1 and "\n" not in errors[0] and "Traceback" not in log.text, log.text
    return errors[0]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every entry under folder (hidden ones included) with a hash of its bytes ('link -> target' for links)."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            entries[name] = f"link -> {os.readlink(path)}"
        elif path.is_file():
            entries[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[name] = "folder"
    return entries


def _metadata(path: Path) -> dict:
    """The metadata an export carries, as written (JSON-decoded for TorchScript and ONNX)."""
    if path.name.endswith("_openvino_model"):
        return yaml.safe_load((path / "metadata.yaml").read_text())
    if path.suffix == ".onnx":
        import onnx

        return {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
    files = {"config.txt": ""}
    torch.jit.load(str(path), _extra_files=files)
    return json.loads(files["config.txt"])


# Item 4: an export replaces only our own earlier export and leaves no intermediate file.


@pytest.mark.slow
@needs_openvino
def test_openvino_export_leaves_no_intermediate_onnx(weights):
    assert _export(weights, "openvino") == 0
    assert {p.name for p in weights.parent.iterdir()} == {"tiny.pt", "tiny_openvino_model"}  # no scratch either
    assert _metadata(weights.parent / "tiny_openvino_model")["names"] == list(CLASSES)


@pytest.mark.slow
@needs_openvino
def test_openvino_export_keeps_an_onnx_it_was_not_asked_for(weights):
    own = weights.parent / "tiny.onnx"
    own.write_bytes(b"the user's own file, not an export")
    assert _export(weights, "openvino") == 0
    assert own.read_bytes() == b"the user's own file, not an export"
    assert (weights.parent / "tiny_openvino_model" / "tiny.xml").is_file()


@pytest.mark.slow
@needs_openvino
@pytest.mark.parametrize("case", ["a notes file beside our export", "no metadata.yaml", "another exporter's yaml"])
def test_a_foreign_openvino_folder_is_never_touched(weights, exports, case, log):
    folder = weights.parent / "tiny_openvino_model"
    shutil.copytree(exports / "tiny_openvino_model", folder)
    if case == "a notes file beside our export":
        (folder / "notes.txt").write_text("my notes\n")
    elif case == "no metadata.yaml":
        (folder / "metadata.yaml").unlink()
    else:
        (folder / "metadata.yaml").write_text("names: {0: person}\nstride: 32\n")  # not our keys, no exporter
    before = _snapshot(weights.parent)
    assert _export(weights, "torchscript", "openvino") == 1
    assert f"{folder} {NOT_OURS}" in _one_error_line(log)
    assert _snapshot(weights.parent) == before  # checked before any work: not even the torchscript was written


@needs_onnx
@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("content", ["bytes", "an export without our metadata"])
def test_a_foreign_file_at_the_destination_is_refused(weights, fmt, content, log):
    path = weights.parent / OUTPUTS[fmt]
    if content == "bytes":
        path.write_bytes(b"\x08\x07 some file of the user's")
    elif fmt == "onnx":
        torch.onnx.export(torch.nn.Linear(4, 2), (torch.zeros(1, 4),), str(path), dynamo=False)
    else:
        torch.jit.save(torch.jit.trace(torch.nn.Linear(4, 2), torch.zeros(1, 4)), str(path))
    before = _snapshot(weights.parent)
    assert _export(weights, fmt) == 1
    assert f"{path} {NOT_OURS}" in _one_error_line(log)
    assert _snapshot(weights.parent) == before


def test_a_symlink_at_the_destination_is_refused_and_its_target_kept(weights, tmp_path, log):
    target = tmp_path / "elsewhere.torchscript"
    target.write_bytes(b"precious")
    link = weights.parent / "tiny.torchscript"
    link.symlink_to(target)
    assert _export(weights, "torchscript") == 1
    assert f"{link} {NOT_OURS}" in _one_error_line(log)
    assert link.is_symlink() and target.read_bytes() == b"precious"


@pytest.mark.slow
@needs_openvino
@pytest.mark.parametrize("fmt", list(OUTPUTS))
def test_our_earlier_export_is_replaced(weights, fmt):
    assert _export(weights, fmt, img=64) == 0
    path = weights.parent / OUTPUTS[fmt]
    assert _metadata(path)["imgsz"] == [64, 64]
    assert _export(weights, fmt, img=96) == 0
    assert _metadata(path)["imgsz"] == [96, 96] and _metadata(path)["exporter"] == "yolo-detect export.py"
    assert {p.name for p in weights.parent.iterdir()} == {"tiny.pt", OUTPUTS[fmt]}


def _without_marker(path: Path) -> None:
    """Rewrite an export's metadata as our exports wrote it before the 'exporter' key (their keys, no marker)."""
    if path.name.endswith("_openvino_model"):
        meta = yaml.safe_load((path / "metadata.yaml").read_text())
        del meta["exporter"]
        (path / "metadata.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    else:
        import onnx

        proto = onnx.load(str(path))
        kept = [(p.key, p.value) for p in proto.metadata_props if p.key != "exporter"]
        del proto.metadata_props[:]
        for key, value in kept:
            entry = proto.metadata_props.add()
            entry.key, entry.value = key, value
        onnx.save(proto, str(path))


@pytest.mark.slow
@needs_openvino
@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_an_export_from_before_the_marker_counts_as_ours(weights, fmt):
    assert _export(weights, fmt) == 0
    path = weights.parent / OUTPUTS[fmt]
    _without_marker(path)
    assert "exporter" not in _metadata(path)
    assert _export(weights, fmt, img=96) == 0
    assert _metadata(path)["imgsz"] == [96, 96]


@pytest.mark.slow
@needs_openvino
def test_a_failed_export_leaves_the_earlier_one_intact(weights, monkeypatch, log):
    import openvino

    assert _export(weights, "openvino") == 0
    before = _snapshot(weights.parent)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(openvino, "save_model", disk_full)
    assert _export(weights, "openvino", img=96) == 1
    assert "No space left on device" in _one_error_line(log)
    assert _snapshot(weights.parent) == before  # the earlier export as it was, and no scratch folder left


# Item 5 (metadata): an export's metadata is read with bounds.


def _folder_with_metadata(exports: Path, tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "meta_openvino_model"
    shutil.copytree(exports / "tiny_openvino_model", folder)
    (folder / "metadata.yaml").write_text(text)
    return folder


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi")
)


@pytest.mark.slow
@needs_openvino
def test_an_alias_bomb_metadata_yaml_is_one_line(exports, tmp_path, image):
    """The 550-byte 'billion laughs' YAML (9^9 list entries when expanded) as an OpenVINO metadata.yaml: run in a
    child process with its address space capped at 8 GiB, so that an expanding parser cannot take the machine."""
    folder = _folder_with_metadata(exports, tmp_path, BILLION_LAUGHS + "names: *i\nstride: 32\n")
    assert len(BILLION_LAUGHS) < 600

    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    argv = [sys.executable, "detect.py", "--weights", str(folder), "--source", str(image), "--project", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=cap_memory)
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert output[-1].startswith(f"ERROR: {folder / 'metadata.yaml'}") and "aliases" in output[-1]


BAD_METADATA = {
    "nested names": {"names": '[["a", ["b"]]]', "stride": "32"},
    "names a string": {"names": '"person"', "stride": "32"},
    "too many names": {"names": json.dumps(["c"] * 100_001), "stride": "32"},
    "a name too long": {"names": json.dumps(["x" * 300]), "stride": "32"},
    "names dict with gaps": {"names": {"0": "a", "5": "b"}, "stride": 32},
    "stride zero": {"names": '["a"]', "stride": "0"},
    "stride negative": {"names": '["a"]', "stride": "-32"},
    "stride not a power of two": {"names": '["a"]', "stride": "7"},
    "stride huge": {"names": '["a"]', "stride": "1e9"},
    "stride a word": {"names": '["a"]', "stride": '"abc"'},
    "too many strides": {"names": '["a"]', "stride": 32, "strides": "[8, 16, 32, 8, 16, 32, 8, 16, 32]"},
    "imgsz zero": {"names": '["a"]', "stride": 32, "imgsz": "[0, 64]"},
    "imgsz huge": {"names": '["a"]', "stride": 32, "imgsz": "[64, 100000]"},
    "batch huge": {"names": '["a"]', "stride": 32, "batch": "1000000"},
    "a value over 4 MiB": {"names": json.dumps(["a"] * 1_000_000), "stride": "32"},
    "nested deeper than Python recurses": {"names": "[" * 100_000 + "]" * 100_000, "stride": "32"},
}


@pytest.mark.parametrize("case", list(BAD_METADATA))
def test_bad_metadata_values_are_one_line(case):
    with pytest.raises(BackendError) as error:
        parse_metadata(BAD_METADATA[case], "m.onnx")
    assert str(error.value).startswith("m.onnx") and "\n" not in str(error.value)


def test_yolov5_style_metadata_is_read():
    """YOLOv5's own ONNX exports store names as a Python dict literal; its OpenVINO ones as a YAML dict."""
    meta = parse_metadata({"names": "{0: 'person', 1: 'bicycle'}", "stride": "32"}, "official.onnx")
    assert meta["names"] == ["person", "bicycle"] and meta["stride"] == [32.0]
    assert parse_metadata({"names": {0: "a", 1: "b"}, "stride": 32.0}, "x")["names"] == ["a", "b"]


def _protobuf_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (tag, varint length, payload)."""

    def varint(n: int) -> bytes:
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_hostile_onnx_metadata_is_refused_before_the_graph_is_loaded(tmp_path):
    pytest.importorskip("onnxruntime")
    big = _protobuf_field(14, _protobuf_field(1, b"names") + _protobuf_field(2, b'["a"' + b', "a"' * 1_000_000 + b"]"))
    (tmp_path / "big.onnx").write_bytes(big)
    with pytest.raises(BackendError, match="metadata_props are over 4194304 bytes"):
        load_backend(tmp_path / "big.onnx")
    (tmp_path / "cut.onnx").write_bytes(big[:1000])
    with pytest.raises(BackendError, match=r"cut.onnx is not a readable ONNX model: .*truncated"):
        load_backend(tmp_path / "cut.onnx")


def _rewritten_torchscript(source: Path, target: Path, config: bytes, compress: int) -> Path:
    """source's archive with its config.txt replaced by config, stored or deflated."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for member in old.infolist():
            if member.filename.endswith("/extra/config.txt"):
                new.writestr(member.filename, config, compress_type=compress)
            else:
                new.writestr(member, old.read(member))
    return target


@pytest.mark.slow
@pytest.mark.parametrize("compress", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_torchscript_config_sizes_are_checked_before_loading(exports, tmp_path, compress):
    """A config.txt of 5 MB (stored) or inflating to 80 MB (a 80 KB deflated member) is refused unread."""
    meta = json.loads(zipfile.ZipFile(exports / "tiny.torchscript").read("tiny/extra/config.txt"))
    padding = b" " * ((5 << 20) if compress == zipfile.ZIP_STORED else (80 << 20))
    config = json.dumps(meta).encode()[:-1] + padding + b"}"
    path = _rewritten_torchscript(exports / "tiny.torchscript", tmp_path / "padded.torchscript", config, compress)
    assert path.stat().st_size - (exports / "tiny.torchscript").stat().st_size < 6 << 20  # a small file
    words = "its config.txt is" if compress == zipfile.ZIP_STORED else "its compressed members inflate to"
    with pytest.raises(BackendError, match=words):
        load_backend(path)


# Item 9: a broken export ends detect.py and test.py in one line naming the file.


def _cut(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def _break_openvino(folder: Path, case: str) -> Path:
    """Damage the copied OpenVINO folder as `case` says; returns the file the error must name."""
    xml, weights, meta = folder / "tiny.xml", folder / "tiny.bin", folder / "metadata.yaml"
    text = xml.read_text()
    if case == "truncated .bin":
        _cut(weights, weights.stat().st_size // 3)
    elif case == "empty .bin":
        _cut(weights, 0)
    elif case == "missing .bin":
        weights.unlink()
    elif case == "truncated .xml":
        _cut(xml, xml.stat().st_size // 2)
    elif case == "garbage .xml":
        xml.write_bytes(b"\x00\xffnot xml")
    elif case == "constant past the .bin":  # a crafted .xml: a constant claiming 400 GB of the .bin
        xml.write_text(text.replace(' size="', ' size="400000000000', 1))
    elif case == "constant shape larger than its bytes":  # a crafted .xml: a 16x3x60000x60000 weight
        shape = text.index('shape="', text.index('type="Const"'))
        xml.write_text(text[:shape] + 'shape="16, 3, 60000, 60000"' + text[text.index('"', shape + 7) + 1 :])
    elif case == "metadata.yaml not YAML":
        meta.write_text("names: [a, b\nstride: : :\n")
    elif case == "metadata.yaml a list":
        meta.write_text("- a\n- b\n")
    named = {"truncated .xml": xml, "garbage .xml": xml, "constant shape larger than its bytes": xml}
    return named.get(case, meta if "yaml" in case else weights)


OPENVINO_CASES = [
    "truncated .bin",
    "empty .bin",
    "missing .bin",
    "truncated .xml",
    "garbage .xml",
    "constant past the .bin",
    "constant shape larger than its bytes",
    "metadata.yaml not YAML",
    "metadata.yaml a list",
]


@pytest.mark.slow
@needs_openvino
@pytest.mark.parametrize("case", OPENVINO_CASES)
def test_a_broken_openvino_folder_is_one_line_in_detect(exports, tmp_path, image, case, log):
    folder = tmp_path / "broken_openvino_model"
    shutil.copytree(exports / "tiny_openvino_model", folder)
    named = _break_openvino(folder, case)
    argv = ["--weights", str(folder), "--source", str(image), "--img", "64", "--project", str(tmp_path / "runs")]
    assert detect.main(argv) == 1
    assert str(named) in _one_error_line(log)


@needs_openvino
@pytest.mark.parametrize("case", ["truncated .bin", "truncated .xml", "metadata.yaml not YAML"])
def test_a_broken_openvino_folder_is_one_line_in_test(exports, tmp_path, shapes_yaml, case, log):
    folder = tmp_path / "broken_openvino_model"
    shutil.copytree(exports / "tiny_openvino_model", folder)
    named = _break_openvino(folder, case)
    argv = ["--data", str(shapes_yaml), "--weights", str(folder), "--img", "64", "--project", str(tmp_path / "runs")]
    assert yolo_test.main([*argv, "--workers", "0"]) == 1
    assert str(named) in _one_error_line(log)


def _wrong_graph_torchscript(path: Path) -> Path:
    """A TorchScript module with our metadata whose graph does not take images (a Linear layer)."""
    meta = {"names": ["a"], "stride": 32, "strides": [8, 16, 32], "imgsz": [64, 64], "batch": 1, "dynamic": False}
    traced = torch.jit.trace(torch.nn.Linear(4, 6), torch.zeros(1, 4))
    torch.jit.save(traced, str(path), _extra_files={"config.txt": json.dumps(meta)})
    return path


@needs_onnx
@pytest.mark.parametrize("case", ["truncated .onnx", "truncated .torchscript", "a graph that takes no images"])
def test_a_broken_onnx_or_torchscript_is_one_line_in_detect(exports, tmp_path, image, case, log):
    if case == "a graph that takes no images":
        path, words = _wrong_graph_torchscript(tmp_path / "wrong.torchscript"), "failed on a (1, 3, 64, 64) input"
    else:
        path = tmp_path / f"cut{case[-5:] if 'onnx' in case else '.torchscript'}"
        source = exports / ("tiny.onnx" if "onnx" in case else "tiny.torchscript")
        path.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
        words = "is not a readable ONNX model" if "onnx" in case else "is not a TorchScript file"
    argv = ["--weights", str(path), "--source", str(image), "--img", "64", "--project", str(tmp_path / "runs")]
    assert detect.main(argv) == 1
    line = _one_error_line(log)
    assert str(path) in line and words in line


def test_an_installed_runtime_that_fails_to_import_is_not_called_missing(exports, monkeypatch):
    """Under a memory limit a package's shared library may fail to map: say so, not 'pip install it'."""
    real_import = importlib.import_module

    def failing(name, *args):
        if name == "onnxruntime":
            raise ImportError("libonnxruntime.so: failed to map segment from shared object")
        return real_import(name, *args)

    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(importlib, "import_module", failing)
    with pytest.raises(BackendError, match="onnxruntime package is installed but cannot be imported: .*failed to map"):
        load_backend(exports / "tiny.onnx")


# Item 7: export.py resolves --weights as detect.py does.


@pytest.fixture
def weights_dir(tmp_path, monkeypatch) -> Path:
    """A temporary weights/ folder in place of the repository's, and an empty current folder."""
    folder = tmp_path / "weights"
    folder.mkdir()
    monkeypatch.setattr(downloads, "WEIGHTS_DIR", folder)
    for module in (
        "models.api.detector",
        "utils.eval.validate_weights",
        "models.weights.checkpoint",
    ):  # their own bound names
        if hasattr(sys.modules.get(module), "attempt_download_weights"):
            resolve = functools.partial(downloads.attempt_download_weights, weights_dir=folder)
            monkeypatch.setattr(f"{module}.attempt_download_weights", resolve)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return folder


@pytest.mark.slow
@needs_onnx
def test_a_bare_weights_name_is_taken_from_weights(weights_dir, tiny_pt, log):
    shutil.copy(tiny_pt, weights_dir / "tiny.pt")
    assert export.main(["--weights", "tiny.pt", "--include", "onnx", "--img", "64"]) == 0
    assert f"using {weights_dir / 'tiny.pt'}" in log.text
    assert (weights_dir / "tiny.onnx").is_file() and not any(Path.cwd().iterdir())


def test_a_weights_path_with_a_folder_is_never_swapped(weights_dir, tiny_pt, log):
    shutil.copy(tiny_pt, weights_dir / "tiny.pt")
    assert export.main(["--weights", "elsewhere/tiny.pt", "--include", "torchscript", "--img", "64"]) == 1
    assert "--weights elsewhere/tiny.pt: no such file" in _one_error_line(log)
    assert {p.name for p in weights_dir.iterdir()} == {"tiny.pt"}


def test_an_official_name_offline_is_one_line(weights_dir, monkeypatch, log):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert export.main(["--weights", "yolov5s.pt", "--include", "torchscript"]) == 1
    line = _one_error_line(log)
    assert "cannot download" in line and "yolov5s.pt" in line
    assert not any(weights_dir.iterdir()) and not any(Path.cwd().iterdir())


# Item 13: the README's export sequence, as written, with yolov5n.pt in weights/; exports are ignored by git.


def _first_images(shared: Path, tmp_path: Path, n: int = 3) -> Path:
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[:n]
    split = tmp_path / "first.txt"
    split.write_text("".join(f"{f}\n" for f in files))
    data = yaml.safe_load((ROOT / "data/coco128.yaml").read_text())
    data.update(path=str(shared / "datasets/coco128"), train=str(split), val=str(split))
    data.pop("download", None)
    path = tmp_path / "coco128_first.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@needs_openvino
def test_the_readme_export_sequence(shared, weights_dir, tmp_path, log):
    shutil.copy(shared / "weights/yolov5n.pt", weights_dir / "yolov5n.pt")
    readme = "--weights yolov5n.pt --include torchscript onnx openvino --img 640"
    assert export.main(readme.split()) == 0
    names = {"yolov5n.pt", "yolov5n.torchscript", "yolov5n.onnx", "yolov5n_openvino_model"}
    assert {p.name for p in weights_dir.iterdir()} == names and not any(Path.cwd().iterdir())
    # an image's values (k / 255): an OpenVINO export takes uint8 images and turns floats back into them first
    model, x = load_model(weights_dir / "yolov5n.pt"), torch.randint(0, 256, (1, 3, 192, 256)) / 255
    with torch.no_grad():
        expected = model(x)[0]
    for name in names - {"yolov5n.pt"}:  # each export gives the .pt's predictions (dynamic: any stride multiple)
        torch.testing.assert_close(load_backend(weights_dir / name)(x)[0], expected, atol=2e-3, rtol=1e-3)
    assert detect.main(["--weights", "yolov5n.onnx", "--source", str(shared / "images/bus.jpg")]) == 0
    assert "person" in log.text and (Path.cwd() / "runs/detect/exp/bus.jpg").is_file()
    data = _first_images(shared, tmp_path)
    assert yolo_test.main(["--data", str(data), "--weights", "yolov5n_openvino_model", "--workers", "0"]) == 0
    assert "OpenVINO" in log.text


def test_exports_in_weights_are_ignored_by_git():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the repository's checkout")
    paths = ["weights/yolov5n.onnx", "weights/yolov5n.torchscript", "weights/yolov5n_openvino_model/yolov5n.xml"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(paths)
