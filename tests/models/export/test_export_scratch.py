"""An export's scratch folder beside the weights: removed when the export ends (also by SIGTERM, in
tests/core/test_cli_endings.py); one a killed export left is removed by the next export of the same weights, but
only when it records a maker on this host that no longer runs."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from models.export.scratch import OWNER, _boot_id, remove_abandoned, scratch_folder


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _left(weights: Path, name: str, owner: dict | None) -> Path:
    folder = weights.parent / f".{weights.stem}-export-{name}"
    (folder / "part").mkdir(parents=True)
    (folder / "part" / "model.onnx").write_bytes(b"half written")
    if owner is not None:
        (folder / OWNER).write_text(json.dumps(owner))
    return folder


def test_only_folders_of_killed_exports_on_this_host_are_removed(tmp_path, log):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"weights")
    here = {"host": socket.gethostname(), "boot": _boot_id()}
    killed = _left(weights, "killed00", {**here, "pid": _dead_pid()})
    before_reboot = _left(weights, "reboot00", {**here, "pid": os.getpid(), "boot": "an earlier boot"})
    running = _left(weights, "running0", {**here, "pid": os.getpid()})
    elsewhere = _left(weights, "remote00", {"host": "another-host", "boot": "x", "pid": _dead_pid()})
    unrecorded = _left(weights, "unknown0", None)
    other_weights = _left(tmp_path / "v.pt", "killed00", {**here, "pid": _dead_pid()})
    remove_abandoned(weights)
    assert not killed.exists() and not before_reboot.exists()
    assert running.exists() and elsewhere.exists() and unrecorded.exists() and other_weights.exists()
    assert weights.read_bytes() == b"weights"
    assert sum("left by an export that was killed" in m for m in log.messages) == 2


def test_scratch_folder_records_its_maker_and_goes_when_done(tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"weights")
    left = _left(weights, "killed00", {"host": socket.gethostname(), "boot": _boot_id(), "pid": _dead_pid()})
    with scratch_folder(weights) as scratch:
        assert not left.exists()
        owner = json.loads((Path(scratch) / OWNER).read_text())
        assert owner["pid"] == os.getpid() and Path(scratch).name.startswith(".w-export-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt"]
