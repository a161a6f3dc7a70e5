"""Run folders and path helpers."""

from pathlib import Path


def increment_path(path: str | Path, exist_ok: bool = False, mkdir: bool = False) -> Path:
    """runs/detect/exp -> runs/detect/exp2, exp3, ... unless exist_ok; optionally create the folder."""
    path = Path(path)
    if path.exists() and not exist_ok:
        n = 2
        while Path(f"{path}{n}").exists():
            n += 1
        path = Path(f"{path}{n}")
    if mkdir:
        path.mkdir(parents=True, exist_ok=True)
    return path
