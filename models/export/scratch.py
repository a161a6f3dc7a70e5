"""The private folder an export works in beside its weights, and the removal of such folders that a killed export
left behind.

Each finished export is moved into place from this folder by a rename, so the folder must be on the weights' file
system: beside them, hidden (``.<stem>-export-XXXXXXXX``). Ctrl-C and SIGTERM remove it (utils.cli.run_cli turns
SIGTERM into the same interrupt); SIGKILL or a power cut cannot: the folder records its maker (an OWNER file) and
the next export of the same weights removes the folders whose maker is gone (utils.files.is_abandoned).
"""

import tempfile
from pathlib import Path

from utils import files
from utils.errors import ExportError
from utils.files import boot_id as _boot_id  # noqa: F401 - the tests' name for it

OWNER = ".yolo-export-owner"


def is_abandoned(folder: Path) -> bool:
    """Whether folder was made by an export on this host whose process no longer runs (or ran before a reboot)."""
    return files.is_abandoned(folder, OWNER)


def remove_abandoned(weights: Path) -> None:
    """Remove the scratch folders beside weights that killed exports of the same weights left (one line each)."""
    files.remove_abandoned_folders(weights.parent, f".{weights.stem}-export-*", OWNER, "an export")


def scratch_folder(weights: Path) -> tempfile.TemporaryDirectory:
    """A private folder beside the weights (so that each finished export is moved into place by a rename), recording
    its maker; folders that killed exports of these weights left are removed first."""
    try:
        remove_abandoned(weights)
        folder = tempfile.TemporaryDirectory(prefix=f".{weights.stem}-export-", dir=weights.parent)
        files.record_maker(Path(folder.name), OWNER)
    except OSError as e:
        raise ExportError(f"cannot write the exports beside {weights}: {e.strerror or e}") from None
    return folder
