"""Run folders, the private folders a command works in (and their removal once their maker is gone) and path
helpers.

A run writes only into a run folder that a run created. `reserve_run_dir` makes the folder atomically
(os.mkdir fails if another process took the name first) and leaves a marker file in it, so a later
`--exist-ok` run, `--resume` or export can tell a run folder from a user's own folder (a dataset, photos).
"""

import json
import os
import shutil
import socket
from pathlib import Path

from utils.errors import RunFolderError
from utils.log import LOGGER

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout: data/, models/, weights/, runs/
DATA_DIR = REPO_ROOT / "data"  # bundled data and hyperparameter YAMLs
RUN_MARKER = ".yolo-run"  # written into every folder a run creates: what we may write into again


def is_run_dir(path: str | Path) -> bool:
    """True when path is a folder that one of our runs created (it holds the marker file)."""
    return (Path(path) / RUN_MARKER).is_file()


def _claim(path: Path) -> Path:
    (path / RUN_MARKER).write_text("created by a yolo run: outputs here may be replaced by a run with --exist-ok\n")
    return path


def reserve_run_dir(path: str | Path, exist_ok: bool = False) -> Path:
    """Create and return runs/x/exp, or exp2, exp3, ... when taken; with exist_ok, reuse exp if a run made it.

    Concurrent runs never share a folder: each candidate is created with os.mkdir, which only one process wins.
    A folder that exists but was not made by a run (no marker, not empty) is refused with one line, so
    `--project`/`--name` pointing at a dataset or a folder of photos never writes there.
    """
    path = Path(path).absolute()
    for folder in (path, *path.parents):
        if folder.exists() and not folder.is_dir():
            raise RunFolderError(f"cannot create the output folder {path}: {folder} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create the output folder {path}: {e.strerror or e}") from None
    if exist_ok:
        return _reuse(path)
    candidate, n = path, 2
    while True:
        try:
            candidate.mkdir()
            return _claim(candidate)
        except FileExistsError:
            candidate, n = Path(f"{path}{n}"), n + 1
        except OSError as e:
            raise RunFolderError(f"cannot create the output folder {candidate}: {e.strerror or e}") from None


def _reuse(path: Path) -> Path:
    """--exist-ok: the folder itself, created if missing; refused when it holds files a run did not write."""
    try:
        path.mkdir(exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create the output folder {path}: {e.strerror or e}") from None
    if is_run_dir(path):
        return path
    if any(path.iterdir()):
        raise RunFolderError(
            f"--exist-ok: {path} was not created by a run (no {RUN_MARKER} file) and is not empty; "
            "nothing there is overwritten: choose another --project/--name"
        )
    return _claim(path)


def increment_path(path: str | Path, exist_ok: bool = False, mkdir: bool = False) -> Path:
    """runs/detect/exp -> runs/detect/exp2, exp3, ... unless exist_ok (a name only; reserve_run_dir creates)."""
    path = Path(path)
    if mkdir:
        return reserve_run_dir(path, exist_ok)
    if path.exists() and not exist_ok:
        n = 2
        while Path(f"{path}{n}").exists():
            n += 1
        path = Path(f"{path}{n}")
    return path


def resolve_bare_name(name: str | Path, folder: Path, kind: str) -> Path | None:
    """A file or folder as given if it exists; a bare name (no folder part) missing here, from `folder`, with a
    log line; else None. A path with a folder part is never swapped for a same-named file elsewhere."""
    path = Path(name)
    if path.exists():
        return path
    if str(name) != path.name or not path.name:
        return None
    local = Path(folder) / path.name
    if local.exists():
        LOGGER.info(f"{kind}: using {local} ({path.name} is not in the current folder)")
        return local
    return None


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when the two paths name one existing file (hard links and symlinks included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# A command that writes its output into a private folder first (an export, a dataset conversion) and renames it into
# place removes that folder on an error, Ctrl-C and SIGTERM; SIGKILL or a power cut cannot. So each such folder
# records who made it (a small JSON file: process id, host, boot) and the next run removes the folders whose maker
# is gone. A folder without that file, made on another host (a shared file system) or by a process still running is
# left alone: it may not be ours to remove.


def boot_id() -> str:
    """This boot of the machine (process ids restart at each boot); '' where the system does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def this_process() -> dict:
    """What records a private folder's maker: process id, host and boot."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot": boot_id()}


def record_maker(folder: Path, owner_file: str) -> None:
    """Write folder/owner_file naming this process as the folder's maker."""
    (folder / owner_file).write_text(json.dumps(this_process()))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or an id we cannot test: assume it is running
    return True


def is_abandoned(folder: Path, owner_file: str) -> bool:
    """Whether folder was made (owner_file says) by a process on this host that no longer runs (or ran before a
    reboot)."""
    try:
        owner = json.loads((folder / owner_file).read_text())
    except (OSError, ValueError):
        return False  # not recorded as ours
    me = this_process()
    if not isinstance(owner, dict) or owner.get("host") != me["host"] or not isinstance(owner.get("pid"), int):
        return False
    return owner.get("boot") != me["boot"] or not _running(owner["pid"])


def remove_abandoned_folders(parent: Path, pattern: str, owner_file: str, what: str) -> None:
    """Remove the folders of parent matching pattern that killed runs left (is_abandoned), one log line each."""
    for folder in sorted(parent.glob(pattern)):
        if folder.is_dir() and not folder.is_symlink() and is_abandoned(folder, owner_file):
            shutil.rmtree(folder, ignore_errors=True)
            LOGGER.info(f"Removed {folder}, left by {what} that was killed")
