"""Shared test fixtures: the read-only data folder beside the repository, single-threaded torch, log capture."""

import logging
import os
from pathlib import Path

import pytest
import torch

from models.nn.yolo import Model
from utils.data.shapes import generate_shapes, write_data_yaml
from utils.log import LOGGER

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Under pytest-xdist each worker is one of several processes on the machine, and a command a test starts (train.py,
# detect.py) would size its threads to the cores it sees idle at start. Sharing cores with the other workers, such a
# process waits on OpenMP threads that are not running: the README's 25-epoch training went past its 900 s limit at a
# load of about 3 on 2 cores. Each worker's commands get an equal share of the cores instead (a user's own setting
# stands).
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))


@pytest.fixture(scope="session")
def shared() -> Path:
    """../shared, or skip the test when it is absent (a user's clone does not have it)."""
    if not (SHARED / "weights" / "yolov5n.pt").is_file():
        pytest.skip(f"shared test data not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session", autouse=True)
def label_cache_in_tmp(tmp_path_factory):
    """Label caches go to a temporary folder, so no test writes into a dataset folder (../shared included)."""
    previous = os.environ.get("YOLO_CACHE_DIR")
    os.environ["YOLO_CACHE_DIR"] = str(tmp_path_factory.mktemp("label_cache"))
    yield
    if previous is None:
        os.environ.pop("YOLO_CACHE_DIR", None)
    else:
        os.environ["YOLO_CACHE_DIR"] = previous


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A per-test label-cache folder ($YOLO_CACHE_DIR): nothing is written beside any dataset."""
    folder = tmp_path / "yolo-cache"
    monkeypatch.setenv("YOLO_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One intra-op thread: test tensors are small, and two threads competing with data-loader workers (or
    anything else) on a 2-core machine can run many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def log(caplog):
    """What the project's logger writes during a test: log.text, log.messages, log.records (pytest's caplog).

    The 'yolo' logger does not propagate to the root logger, so caplog's handler is attached to it directly."""
    LOGGER.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="yolo")
    yield caplog
    LOGGER.removeHandler(caplog.handler)


@pytest.fixture(scope="session")
def shapes_yaml(tmp_path_factory):
    """16 train and 8 val shapes images of 64 px and a data YAML for them, shared by the training tests (read-only)."""
    folder = tmp_path_factory.mktemp("shapes")
    root = generate_shapes(folder / "shapes", n_train=16, n_val=8, img_size=64)
    return write_data_yaml(root, folder / "shapes.yaml")


@pytest.fixture(scope="module")
def small_model() -> Model:
    """A 2-class yolov5n with names, as train.py would save it."""
    torch.manual_seed(0)
    model = Model("yolov5n.yaml", nc=2).eval()
    model.names = ["cat", "dog"]
    return model
