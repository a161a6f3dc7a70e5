"""The private folder an export works in beside its weights, and the removal of such folders that a killed export
left behind.

Each finished export is moved into place from this folder by a rename, so the folder must be on the weights' file
system: beside them, hidden (``.<stem>-export-XXXXXXXX``). Ctrl-C and SIGTERM remove it (utils.cli.run_cli turns
SIGTERM into the same interrupt); SIGKILL or a power cut cannot. So each folder records who made it (an OWNER file:
process id, host and boot), and the next export of the same weights removes the folders whose maker is gone. A
folder without that file, or made on another host (a shared file system) or by a process still running, is left
alone: it may not be ours to remove.
"""

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

from utils.errors import ExportError
from utils.log import LOGGER

OWNER = ".yolo-export-owner"


def _boot_id() -> str:
    """This boot of the machine (process ids restart at each boot); '' where the system does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _this_process() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot": _boot_id()}


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or an id we cannot test: assume it is running
    return True


def is_abandoned(folder: Path) -> bool:
    """Whether folder was made by an export on this host whose process no longer runs (or ran before a reboot)."""
    try:
        owner = json.loads((folder / OWNER).read_text())
    except (OSError, ValueError):
        return False  # not recorded as ours
    me = _this_process()
    if not isinstance(owner, dict) or owner.get("host") != me["host"] or not isinstance(owner.get("pid"), int):
        return False
    return owner.get("boot") != me["boot"] or not _running(owner["pid"])


def remove_abandoned(weights: Path) -> None:
    """Remove the scratch folders beside weights that killed exports of the same weights left (one line each)."""
    for folder in sorted(weights.parent.glob(f".{weights.stem}-export-*")):
        if folder.is_dir() and not folder.is_symlink() and is_abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            LOGGER.info(f"Removed {folder}, left by an export that was killed")


def scratch_folder(weights: Path) -> tempfile.TemporaryDirectory:
    """A private folder beside the weights (so that each finished export is moved into place by a rename), recording
    its maker; folders that killed exports of these weights left are removed first."""
    try:
        remove_abandoned(weights)
        folder = tempfile.TemporaryDirectory(prefix=f".{weights.stem}-export-", dir=weights.parent)
        (Path(folder.name) / OWNER).write_text(json.dumps(_this_process()))
    except OSError as e:
        raise ExportError(f"cannot write the exports beside {weights}: {e.strerror or e}") from None
    return folder
