"""The run folder of a training run: reserved once by the main process (atomically, with its run marker) and the
same absolute path shared with every other process."""

from pathlib import Path

from utils.errors import RunFolderError, TrainError
from utils.files import reserve_run_dir
from utils.train.distributed import MAIN_PROCESS, from_main_process


def check_project(project: str | Path) -> None:
    """TrainError for a --project that names a file (checked before any work, and again when the folder is made)."""
    if Path(project).exists() and not Path(project).is_dir():
        raise TrainError(f"--project {project} is a file, not a folder")


def new_run_folder(project: str | Path, name: str, exist_ok: bool) -> str:
    """project/name reserved for this run (created with its run marker, utils.files.reserve_run_dir): numbered
    exp2, exp3... if taken, unless exist_ok. Rank 0 reserves it and every process gets the same absolute path."""
    check_project(project)
    folder, problem = None, None  # every rank must raise on a problem: none may wait forever
    if MAIN_PROCESS:
        try:
            folder = str(reserve_run_dir(Path(project) / name, exist_ok))
        except RunFolderError as e:
            problem = str(e)
    folder, problem = from_main_process((folder, problem))
    if problem is not None:
        raise RunFolderError(problem)
    return folder
