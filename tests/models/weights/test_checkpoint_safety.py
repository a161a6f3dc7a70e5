"""Hostile weights files and model configs are refused in one line before anything large is allocated (issue 16
item 5), a full disk while saving a checkpoint says so in one line (item 9), and load_model resolves a bare name
as detect.py does (item 7).

Each hostile file here is small; the memory it would take without the bounds is described, not allocated: spies
make a test fail at once if the loader reaches torch.load, or builds a layer, before it refuses the file.
"""

import copy
import errno
import functools
import io
import os
import socket
import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

import detect
import train
from models import load_model
from models.nn.config import load_cfg
from models.nn.yolo import Model, count_parameters
from models.weights import checkpoint, safe_pickle
from models.weights.checkpoint import checkpoint_dict, load_checkpoint, save_checkpoint
from utils import downloads
from utils.cli import run_cli
from utils.errors import CheckpointError, YoloError

MARKER = "__MARK__"
MARKER_PICKLED = b"X" + struct.pack("<I", len(MARKER)) + MARKER.encode()  # how protocol 2 writes the string


def _ours(tmp_path: Path, net: Model, name: str, **changes) -> Path:
    """Our-format checkpoint of net with some entries replaced."""
    ckpt = checkpoint_dict(net)
    ckpt.update(changes)
    path = tmp_path / f"{name}.pt"
    save_checkpoint(ckpt, path)
    return path


def _official(tmp_path: Path, net: Model, name: str, **cfg_changes) -> Path:
    """An official-style file (the pickled Model module) whose config has some entries replaced."""
    net = copy.deepcopy(net)
    net.yaml.update(cfg_changes)
    path = tmp_path / f"{name}.pt"
    torch.save({"epoch": -1, "model": net, "ema": None}, path)
    return path


def _rewrite(src: Path, dst: Path, pickle_bytes=None, compression=zipfile.ZIP_STORED) -> Path:
    """A copy of a torch zip with its data.pkl passed through pickle_bytes(data) and members written with
    compression: crafted files torch.save would never write."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", compression) as out:
        for info in z.infolist():
            data = z.read(info.filename)
            if pickle_bytes and info.filename.endswith("data.pkl"):
                data = pickle_bytes(data)
            out.writestr(info.filename, data)
    return dst


def _with_names_opcodes(tmp_path: Path, net: Model, name: str, opcodes: bytes) -> Path:
    """Our checkpoint whose first class name is replaced by hand-written pickle opcodes."""
    src = _ours(tmp_path, net, f"{name}_src", names=[MARKER, "dog"])
    return _rewrite(src, tmp_path / f"{name}.pt", lambda data: data.replace(MARKER_PICKLED, opcodes))


def _refused(path: Path, *words: str) -> str:
    """load_model(path) raises one CheckpointError line holding every word; returns the message."""
    with pytest.raises(CheckpointError) as err:
        load_model(path, fuse=False)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


@pytest.fixture
def no_building(monkeypatch):
    """Building any convolution fails the test: a hostile config must be refused before its layers exist."""

    def spy(*args, **kwargs):
        raise AssertionError("a layer was built before the config was checked")

    monkeypatch.setattr(torch.nn.Conv2d, "__init__", spy)


@pytest.fixture
def no_torch_load(monkeypatch):
    """Reaching torch.load fails the test: a hostile archive must be refused from its zip directory alone."""

    def spy(*args, **kwargs):
        raise AssertionError("torch.load was reached before the archive was checked")

    monkeypatch.setattr(torch, "load", spy)


# --- model configs (--cfg and a checkpoint's 'yaml') -------------------------------------------------------------


def _alias_bomb() -> str:
    """Under 500 bytes of YAML whose aliases stand for 10^9 strings ("billion laughs")."""
    lines = ["nc: 80", "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "\n".join([*lines, "anchors: *a"]) + "\n"


def test_cfg_alias_bomb_is_one_line(tmp_path, shapes_yaml, log):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb())
    assert bomb.stat().st_size < 1000
    with pytest.raises(YoloError, match="aliases"):
        Model(bomb)
    args = ["--data", shapes_yaml, "--cfg", bomb, "--weights", "", "--img", "64", "--epochs", "1", "--workers", "0"]
    assert train.main(train.parse_opt([str(a) for a in [*args, "--project", tmp_path / "runs"]])) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and "aliases" in errors[0] and str(bomb) in errors[0], errors


def test_cfg_path_with_a_folder_is_never_swapped(tmp_path, monkeypatch, log):
    with pytest.raises(FileNotFoundError, match="model config not found"):
        Model(tmp_path / "elsewhere" / "yolov5n.yaml")  # models/yolov5n.yaml exists, but was not asked for
    monkeypatch.chdir(tmp_path)
    assert count_parameters(Model("yolov5n.yaml")) == 1_872_157  # a bare name still finds models/yolov5n.yaml
    assert "models/yolov5n.yaml" in log.text


def _cfg(base: str = "yolov5n.yaml", **changes) -> dict:
    cfg = load_cfg(base)
    cfg.update(changes)
    return cfg


def _with_layer(index: int, layer: list) -> dict:
    cfg = _cfg()
    cfg["backbone"][index] = layer
    return cfg


def _tiny(backbone: list) -> dict:
    """A config of these layers and a Detect head on the last three."""
    return {"nc": 2, "anchors": 1, "backbone": backbone, "head": [[[-3, -2, -1], 1, "Detect", ["nc", "anchors"]]]}


def _nested(depth: int) -> list:
    value = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_CONFIGS = {
    "depth_multiple 3000": (lambda: _cfg(depth_multiple=3000), "'depth_multiple' is 3000: at most 4"),
    "width_multiple 1000": (lambda: _cfg(width_multiple=1000), "'width_multiple' is 1000: at most 4"),
    "yolov5x at 4x4": (lambda: _cfg("yolov5x.yaml", depth_multiple=4, width_multiple=4), "2043M parameters"),
    "nc 10^6": (lambda: _cfg(nc=1_000_000), "'nc' is 1000000: more than 100000 classes"),
    "anchor count 10^9": (lambda: _cfg(anchors=10**9), "'anchors' must be"),
    "repeats 10^9": (lambda: _with_layer(2, [-1, 10**9, "C3", [128]]), "1000000000 repeats, more than 2048"),
    "blocks in all": (lambda: dict(_tiny([[-1, 400, "C3", [8]]] * 3), depth_multiple=2), "more than 2048 blocks"),
    "layers": (lambda: _tiny([[-1, 1, "Conv", [8, 1]]] * 600), "the config has 601 layers, more than 512"),
    "channels 10^400": (lambda: _with_layer(1, [-1, 1, "Conv", [10**400, 3, 2]]), "output channels, more than 1048576"),
    "kernel 601": (lambda: _with_layer(1, [-1, 1, "Conv", [64, 601, 1]]), "multiply-adds"),
    "padding 10^5": (lambda: _with_layer(1, [-1, 1, "Conv", [128, 3, 2, 100_000]]), "activations"),
    "upsample 10^6": (lambda: _with_layer(1, [-1, 1, "nn.Upsample", [None, 10**6, "nearest"]]), "activations"),
    "a string as a size": (lambda: _with_layer(2, [-1, 1, "C3", [128, False, 1, "x" * 10**5]]), "finite numbers"),
    "a NaN kernel": (lambda: _with_layer(1, [-1, 1, "Conv", [128, float("nan"), 2]]), "finite numbers"),
    "a layer of 10^5 numbers": (lambda: _with_layer(1, list(range(10**5))), "layer 1 must be a list [from, repeats"),
    "a config nested 5000 deep": (lambda: _with_layer(1, _nested(5000)), "nested too deeply"),
}


@pytest.mark.parametrize("case", HOSTILE_CONFIGS)
def test_hostile_configs_are_refused_before_building(case, no_building):
    make, words = HOSTILE_CONFIGS[case]
    cfg = make()
    with pytest.raises(YoloError) as err:
        Model(cfg)
    message = str(err.value)
    assert words in message and "\n" not in message and len(message) < 400, message
    assert isinstance(err.value, ValueError)  # callers that caught a config that does not fit still do


@pytest.mark.parametrize("name, changes", [("yolov5n.yaml", {}), ("yolov5s.yaml", {"nc": 3, "width_multiple": 0.3})])
def test_parameters_are_priced_exactly_before_building(name, changes):
    """The price is what the built model has: the limits, and the check of a file's weights against its config,
    stand on it."""
    from models.nn.config import config_parameters

    cfg = _cfg(name, **changes)
    assert config_parameters(cfg) == count_parameters(Model(cfg))


# --- checkpoints ---------------------------------------------------------------------------------------------------


def _laughs(levels: int) -> list:
    """A list that prints as 10**levels strings; pickled it is a few hundred bytes (each level is one list)."""
    value = ["lol"] * 10
    for _ in range(levels - 1):
        value = [value] * 10
    return value


@pytest.mark.slow
def test_names_that_are_not_a_flat_list_of_short_strings(tmp_path, small_model, no_building):
    _refused(_ours(tmp_path, small_model, "laughs", names=[_laughs(7), "dog"]), "more than 2000000 items")
    _refused(_ours(tmp_path, small_model, "nested", names=[["cat"], "dog"]), "class name 0 is a list, not a string")
    _refused(_ours(tmp_path, small_model, "long", names=["c" * 1000, "dog"]), "class name 0 is 1000 characters long")
    deep = 200_000  # EMPTY_LIST x n, then APPEND x n-1: one list nested 200000 deep (printing it recurses)
    _refused(_with_names_opcodes(tmp_path, small_model, "deep", b"]" * deep + b"a" * (deep - 1)), "deeper than 64")
    cycle = b"]q\xffh\xffa"  # an empty list, memoised, appended to itself
    _refused(_with_names_opcodes(tmp_path, small_model, "cycle", cycle), "contains itself")


@pytest.mark.slow
def test_class_counts_and_multiples_are_bounded_before_building(tmp_path, small_model, no_building):
    million = ["x"] * 1_000_000
    _refused(_ours(tmp_path, small_model, "nc", yaml=dict(small_model.yaml, nc=1_000_000), names=million), "100000")
    for key, value in (("depth_multiple", 3000), ("width_multiple", 1000)):
        words = ("unsupported model config", f"'{key}' is {value}: at most 4")
        _refused(_ours(tmp_path, small_model, key, yaml=dict(small_model.yaml, **{key: value})), *words)
        _refused(_official(tmp_path, small_model, f"official_{key}", **{key: value}), *words)
    _refused(_official(tmp_path, small_model, "official_nc", nc=1_000_000), "1000000 classes, more than 100000")


def test_official_modules_whose_weights_are_not_tensors(tmp_path, small_model):
    net = copy.deepcopy(small_model)
    net.model[0].conv._parameters["weight"] = 3  # a module's recorded weight that is a number
    _refused(_official(tmp_path, net, "number"), "its weight model.0.conv.weight is a int, not a tensor")


def test_a_config_larger_than_the_weights_in_the_file_is_not_built(tmp_path, small_model, no_building):
    """A 3.6 MB file whose config is yolov5x (86M parameters, 350 MB once built) is refused from its price."""
    path = _ours(tmp_path, small_model, "x_config", yaml=_cfg("yolov5x.yaml", nc=2))
    _refused(path, "describes a model of 86224543 parameters", "holds only 1776202 weight values")


def test_tensor_views_larger_than_the_file_are_refused(tmp_path, small_model, no_building):
    """A stride-0 view of one value claims 10^8 elements: checking or converting it would allocate them."""
    weights = checkpoint_dict(small_model)["model"]
    weights["model.0.conv.weight"] = torch.zeros(1, dtype=torch.half).expand(10_000, 10_000)
    _refused(_ours(tmp_path, small_model, "expanded", model=weights), "its tensors claim", "views expanded")


def test_compressed_members_are_refused_before_torch_reads_them(tmp_path, small_model, no_torch_load):
    """torch reads deflated members too: a few MB can inflate to gigabytes. torch.save never compresses."""
    path = _rewrite(_ours(tmp_path, small_model, "plain"), tmp_path / "deflated.pt", compression=zipfile.ZIP_DEFLATED)
    _refused(path, "are compressed", "would expand to")


def _claim_size(path: Path, member: str, size: int) -> Path:
    """The file with the central directory entry of member claiming size bytes (compressed and not)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + name_length].decode().endswith(member):
            struct.pack_into("<II", data, at + 20, size, size)
        at = data.find(b"PK\x01\x02", at + 4)
    out = path.with_name(f"claims_{path.name}")
    out.write_bytes(data)
    return out


def test_archive_bounds_come_from_the_zip_directory(tmp_path, small_model, monkeypatch, no_torch_load):
    plain = _ours(tmp_path, small_model, "plain")
    _refused(_claim_size(plain, "/data/0", 0x7FFFFFF0), "claim", "but the file has", "truncated or crafted")
    monkeypatch.setattr(safe_pickle, "MAX_MEMBERS", 50, raising=False)
    _refused(plain, "its zip directory lists", "members", "at most 50")
    monkeypatch.setattr(safe_pickle, "MAX_PICKLE_BYTES", 1000, raising=False)
    _refused(_ours(tmp_path, small_model, "few", model={}), "its pickle", "data.pkl", "bytes, more than")
    monkeypatch.setattr(safe_pickle, "MAX_CHECKPOINT_BYTES", 1_000_000, raising=False)
    _refused(plain, "more than any YOLO checkpoint")


def test_older_formats_are_not_read(tmp_path, no_torch_load):
    """torch's legacy format allocates each storage at the size its pickle states before reading it: 75 KB can
    ask for 1.5 GB. Our files and official YOLOv5 v6.0+ files are zip archives."""
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.zeros(0x12345, dtype=torch.uint8)}, path, _use_new_zipfile_serialization=False)
    data = path.read_bytes().replace(b"J" + struct.pack("<i", 0x12345), b"J" + struct.pack("<i", 3 << 29))
    path.write_bytes(data)
    _refused(path, "not a zip archive as torch.save writes")


def test_pickles_that_would_unpickle_to_too_much_are_refused(tmp_path, small_model, monkeypatch, no_building):
    """EMPTY_SET then APPEND: 2 bytes of pickle build a 216-byte set (a 16 MB pickle, 3.5 GB of sets)."""
    monkeypatch.setattr(safe_pickle, "MAX_UNPICKLED_BYTES", 32 << 20, raising=False)
    path = _with_names_opcodes(tmp_path, small_model, "sets", b"]" + b"\x8fa" * 250_000)
    _refused(path, "could build up to", "MiB of objects")


OPCODE_STREAMS = {  # each builds as much memory per pickle byte as its kind of object can
    "empty sets": b"]" + b"\x8fa" * 20_000,
    "empty dicts": b"](" + b"}" * 40_000 + b"e",
    "empty lists": b"](" + b"]" * 40_000 + b"e",
    "1-tuples": b"](" + b"N\x85" * 20_000 + b"e",
    "ints, each memoised": b"]("
    + b"".join(b"J" + struct.pack("<i", 1000 + i) + b"r" + struct.pack("<I", i) for i in range(10_000))
    + b"e",
    "two-letter strings": b"]("
    + b"".join(b"X\x02\x00\x00\x00" + bytes([65 + i % 26, 65 + i // 26 % 26]) for i in range(15_000))
    + b"e",
    "non-ASCII text": b"](X" + struct.pack("<I", 4 * 40_000) + "\U0001f600".encode() * 40_000 + b"e",
}


@pytest.mark.slow
@pytest.mark.parametrize("opcodes", OPCODE_STREAMS.values(), ids=OPCODE_STREAMS)
def test_the_unpickling_bound_is_an_upper_bound(opcodes):
    """The bound holds for the opcodes that build the most memory per byte, measured with tracemalloc while
    torch's weights-only unpickler runs them."""
    from torch import _weights_only_unpickler

    data = b"\x80\x02" + opcodes + b"."
    tracemalloc.start()
    try:
        loaded = _weights_only_unpickler.Unpickler(io.BytesIO(data)).load()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(loaded, list) and loaded
    unpickler = 64 << 10  # the unpickler's own frames and tables, whatever it reads
    bound = safe_pickle._unpickled_bytes_bound(data)
    assert peak <= bound + unpickler, (peak, bound)


@pytest.mark.slow
def test_hostile_files_through_detect_are_one_error_line(tmp_path, small_model, shared, log, capsys, no_building):
    image = str(shared / "images" / "bus.jpg")
    files = {
        _rewrite(
            _ours(tmp_path, small_model, "p"), tmp_path / "bomb.pt", compression=zipfile.ZIP_DEFLATED
        ): "compressed",
        _ours(tmp_path, small_model, "nc", yaml=dict(small_model.yaml, nc=10**6), names=["x"] * 10**6): "100000",
        _official(tmp_path, small_model, "deep", depth_multiple=3000): "'depth_multiple'",
    }
    for path, words in files.items():
        log.clear()
        assert detect.main(["--weights", str(path), "--source", image, "--project", str(tmp_path / "runs")]) == 1
        errors = [m for m in log.messages if "ERROR" in m]
        assert len(errors) == 1 and words in errors[0] and "\n" not in errors[0], (path, log.messages)
        assert "Traceback" not in capsys.readouterr().err


def test_official_weights_pass_every_bound(shared):
    ckpt = load_checkpoint(shared / "weights" / "yolov5n.pt")
    assert ckpt["source"] == "yolov5" and len(ckpt["model"]) > 300 and ckpt["names"][0] == "person"


# --- a full disk while saving (item 9) -----------------------------------------------------------------------------


@pytest.fixture
def full_disk(monkeypatch):
    """save_checkpoint's temporary file is /dev/full: every write fails with the kernel's ENOSPC."""
    if not os.path.exists("/dev/full"):
        pytest.skip("/dev/full is not available")
    real = checkpoint.tempfile.mkstemp

    def mkstemp(**kwargs):
        fd, name = real(**kwargs)  # the name exists, so cleaning up after the failure is tested too
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), name

    monkeypatch.setattr(checkpoint.tempfile, "mkstemp", mkstemp)


def test_full_disk_while_saving_is_one_line_and_keeps_the_old_file(tmp_path, small_model, full_disk, log):
    last = tmp_path / "last.pt"
    last.write_bytes(b"the earlier checkpoint")
    ckpt = checkpoint_dict(small_model)  # 3.6 MB: torch's zip writer fails mid-file with a RuntimeError
    with pytest.raises(OSError) as err:
        save_checkpoint(ckpt, last)
    assert err.value.errno == errno.ENOSPC and "\n" not in str(err.value)
    assert "No space left on device" in str(err.value) and "earlier last.pt there is kept intact" in str(err.value)
    assert last.read_bytes() == b"the earlier checkpoint" and sorted(os.listdir(tmp_path)) == ["last.pt"]
    assert run_cli(lambda: save_checkpoint(ckpt, tmp_path / "best.pt")) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: the disk is full (ENOSPC):"), errors
    assert "best.pt (nothing was written there)" in errors[0] and not (tmp_path / "best.pt").exists()


class _FillingDisk(io.RawIOBase):
    """A file on a disk that fills up after `room` bytes: a write beyond fails with ENOSPC, as the kernel's does,
    and closing works (nothing is left to flush). torch's zip writer then raises a RuntimeError of its own."""

    def __init__(self, fd: int, room: int):
        self.fd, self.room = fd, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return os.write(self.fd, data)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def test_disk_filling_up_midway_is_one_line_enospc(tmp_path, small_model, monkeypatch):
    """As on a real 1 MB tmpfs: the first MB is written, then torch's writer fails ('unexpected pos ...')."""
    real_fdopen = os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        return io.BufferedWriter(_FillingDisk(fd, 1 << 20)) if mode == "wb" else real_fdopen(fd, mode, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    last = tmp_path / "last.pt"
    last.write_bytes(b"the earlier checkpoint")
    with pytest.raises(OSError) as err:
        save_checkpoint(checkpoint_dict(small_model), last)
    assert err.value.errno == errno.ENOSPC and "earlier last.pt there is kept intact" in str(err.value)
    assert last.read_bytes() == b"the earlier checkpoint" and sorted(os.listdir(tmp_path)) == ["last.pt"]


# --- load_model resolves names as detect.py does (item 7) --------------------------------------------------------


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v7.0"  # nothing listens there: refused at once, as offline


@pytest.fixture
def weights_dir(tmp_path, monkeypatch) -> Path:
    """A temporary weights/ folder in place of the repository's, downloads refused, and an empty current folder."""
    folder = tmp_path / "weights"
    folder.mkdir()
    monkeypatch.setattr(downloads, "WEIGHTS_DIR", folder)
    offline = functools.partial(downloads.attempt_download_weights, base_url=_closed_port_url(), timeout=5)
    monkeypatch.setattr(checkpoint, "attempt_download_weights", offline, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return folder


@pytest.mark.slow
def test_load_model_takes_a_bare_name_from_weights(weights_dir, shared, log):
    (weights_dir / "yolov5n.pt").symlink_to(shared / "weights" / "yolov5n.pt")
    model = load_model("yolov5n.pt")  # the README's example
    assert len(model.names) == 80 and f"using {weights_dir / 'yolov5n.pt'}" in log.text


def test_load_model_of_a_missing_official_name_offline_is_one_line(weights_dir):
    with pytest.raises(downloads.DownloadError) as err:
        load_model("yolov5s.pt")
    assert "\n" not in str(err.value) and "cannot download" in str(err.value) and "yolov5s.pt" in str(err.value)


def test_load_model_never_swaps_a_path_with_a_folder(weights_dir, shared):
    (weights_dir / "yolov5n.pt").symlink_to(shared / "weights" / "yolov5n.pt")
    for missing in ("elsewhere/yolov5n.pt", "custom.pt"):
        with pytest.raises(CheckpointError, match=f"weights file not found: {missing}$"):
            load_model(missing)


def test_cfg_yaml_files_are_plain_data(tmp_path):
    """A --cfg file that is valid YAML but not a model config names what is wrong (no traceback)."""
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(YoloError, match="must hold a YAML mapping"):
        Model(path)
