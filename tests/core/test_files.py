"""utils.files: run folders reserved atomically and marked, --exist-ok limited to run folders, bare names."""

import multiprocessing
import os
from pathlib import Path

import pytest

from utils.errors import RunFolderError
from utils.files import RUN_MARKER, increment_path, is_run_dir, reserve_run_dir, resolve_bare_name, same_file


def test_reserve_increments_and_marks(tmp_path):
    first = reserve_run_dir(tmp_path / "runs" / "exp")
    second = reserve_run_dir(tmp_path / "runs" / "exp")
    assert (first.name, second.name) == ("exp", "exp2")
    assert first.is_absolute() and is_run_dir(first) and is_run_dir(second)


def test_exist_ok_reuses_a_run_folder_and_keeps_its_files(tmp_path):
    run = reserve_run_dir(tmp_path / "exp")
    (run / "a.jpg").write_bytes(b"x")
    assert reserve_run_dir(tmp_path / "exp", exist_ok=True) == run
    assert (run / "a.jpg").read_bytes() == b"x"


def test_exist_ok_refuses_a_users_folder(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "img.jpg").write_bytes(b"original")
    with pytest.raises(RunFolderError, match="not created by a run") as info:
        reserve_run_dir(photos, exist_ok=True)
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in photos.iterdir()) == ["img.jpg"]  # no marker written, nothing touched
    assert increment_path(photos, mkdir=True).name == "photos2"  # without --exist-ok: a new sibling


def test_exist_ok_claims_an_empty_or_missing_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    assert is_run_dir(reserve_run_dir(tmp_path / "empty", exist_ok=True))
    assert is_run_dir(reserve_run_dir(tmp_path / "new", exist_ok=True))


def test_a_file_in_the_way_is_one_line(tmp_path):
    (tmp_path / "exp").write_text("mine")
    with pytest.raises(RunFolderError, match="is a file, not a folder"):
        reserve_run_dir(tmp_path / "exp", exist_ok=True)
    assert (tmp_path / "exp").read_text() == "mine"


def _reserve_many(args):
    root, n = args
    return [str(reserve_run_dir(Path(root) / "exp")) for _ in range(n)]


def test_concurrent_reservations_never_share_a_folder(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = [p for chunk in pool.map(_reserve_many, [(str(tmp_path), 10)] * 4) for p in chunk]
    assert len(got) == 40 and len(set(got)) == 40
    assert all((Path(p) / RUN_MARKER).is_file() for p in got)


def test_bare_names_resolve_in_the_folder_paths_never_do(tmp_path, monkeypatch, log):
    store = tmp_path / "weights"
    store.mkdir()
    (store / "m.pt").write_bytes(b"w")
    monkeypatch.chdir(tmp_path)
    assert resolve_bare_name("m.pt", store, "weights") == store / "m.pt"
    assert f"weights: using {store / 'm.pt'}" in log.text
    assert resolve_bare_name(tmp_path / "elsewhere" / "m.pt", store, "weights") is None
    assert resolve_bare_name("sub/m.pt", store, "weights") is None
    (tmp_path / "m.pt").write_bytes(b"here")
    assert resolve_bare_name("m.pt", store, "weights") == Path("m.pt")  # the current folder comes first


def test_same_file(tmp_path):
    a = tmp_path / "a"
    a.write_text("1")
    os.symlink(a, tmp_path / "link")
    assert same_file(a, tmp_path / "link") and not same_file(a, tmp_path / "missing")
