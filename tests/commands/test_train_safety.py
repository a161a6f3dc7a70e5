"""train.py and --evolve keep to their own run folders: --resume of a checkpoint kept elsewhere writes a new run
folder (never beside the file), runs started together reserve distinct folders, a Ctrl-C in the first epoch leaves
a resumable last.pt, a bare --resume passes over finished runs; the default --hyp; the --no-plots spelling; absolute
"Results saved to" paths."""

import csv
import hashlib
import shutil
import threading
from pathlib import Path

import pytest
import torch
import yaml

import train
from utils.errors import TrainError
from utils.train import checkpoints, run_folder
from utils.train import trainer as trainer_module
from utils.train.callbacks import Callback

ROOT = Path(__file__).resolve().parents[2]
MARKER = ".yolo-run"  # utils.files.RUN_MARKER, spelled out so that this file also runs where it does not exist
FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--batch-size", "8", "--workers", "0", "--noplots"]

# YOLOv5 HEAD's data/hyps/hyp.scratch-low.yaml (its train.py default from weights and from scratch), key by key.
SCRATCH_LOW = {
    "lr0": 0.01,
    "lrf": 0.01,
    "momentum": 0.937,
    "weight_decay": 0.0005,
    "warmup_epochs": 3.0,
    "warmup_momentum": 0.8,
    "warmup_bias_lr": 0.1,
    "box": 0.05,
    "cls": 0.5,
    "cls_pw": 1.0,
    "obj": 1.0,
    "obj_pw": 1.0,
    "iou_t": 0.2,
    "anchor_t": 4.0,
    "fl_gamma": 0.0,
    "hsv_h": 0.015,
    "hsv_s": 0.7,
    "hsv_v": 0.4,
    "degrees": 0.0,
    "translate": 0.1,
    "scale": 0.5,
    "shear": 0.0,
    "perspective": 0.0,
    "flipud": 0.0,
    "fliplr": 0.5,
    "mosaic": 1.0,
    "mixup": 0.0,
    "copy_paste": 0.0,
}


def _train(*args, callbacks: list[Callback] | None = None) -> int:
    return train.main(train.parse_opt([str(a) for a in args]), callbacks=callbacks)


def _epochs(results_csv: Path) -> list[int]:
    with open(results_csv, newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def _hashes(folder: Path) -> dict[str, str]:
    """Every file under folder (relative name -> sha256): to show that nothing there changed."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


class InterruptAfterFirstSave(Callback):
    """Like Ctrl-C right after epoch 0's last.pt is written."""

    def on_checkpoint_saved(self, trainer, path, result):
        raise KeyboardInterrupt


class InterruptFirstBatch(Callback):
    """Like Ctrl-C during the first epoch, before any epoch ends."""

    def on_batch_end(self, trainer, batch):
        raise KeyboardInterrupt


@pytest.fixture(scope="module")
def interrupted_run(shapes_yaml, tmp_path_factory) -> Path:
    """The run folder of a 2-epoch run stopped (as by Ctrl-C) right after epoch 0 was saved (read-only: copy it)."""
    project = tmp_path_factory.mktemp("interrupted")
    args = ["--data", shapes_yaml, *FAST, "--epochs", 2, "--project", project]
    assert _train(*args, callbacks=[InterruptAfterFirstSave()]) == 130
    return project / "exp"


# ---------------------------------------------------------------------------------------------------------------------
# Item 2: --resume of a last.pt outside a run folder's weights/ never writes beside it


@pytest.mark.slow
def test_resume_of_a_copied_checkpoint_goes_to_a_new_run_folder(interrupted_run, tmp_path, log):
    home = tmp_path / "home"  # e.g. ~/Downloads/last.pt: the folder two levels up is the user's own
    (home / "Downloads").mkdir(parents=True)
    last = home / "Downloads" / "last.pt"
    shutil.copy(interrupted_run / "weights" / "last.pt", last)
    for name in ("hyp.yaml", "opt.yaml", "results.csv"):
        (home / name).write_text(f"the user's own {name}\n")
    before = _hashes(home)

    assert _train("--resume", last, "--project", tmp_path / "runs") == 0
    assert _hashes(home) == before  # nothing beside or above the checkpoint was written or changed
    new = tmp_path / "runs" / "exp"
    assert (new / MARKER).is_file() and _epochs(new / "results.csv") == [1]
    assert torch.load(new / "weights" / "last.pt", weights_only=True)["epoch"] == 1
    assert "is not in a run folder's weights/" in log.text
    assert f"Resuming in the new run folder {new}" in log.text


@pytest.mark.slow
def test_resume_in_a_run_folder_without_marker_leaves_it_untouched(interrupted_run, tmp_path, log):
    old = tmp_path / "old_run"  # a run folder from before markers were written
    shutil.copytree(interrupted_run, old)
    (old / MARKER).unlink(missing_ok=True)
    before = _hashes(old)

    assert _train("--resume", old / "weights" / "last.pt", "--project", tmp_path / "runs", "--name", "again") == 0
    assert _hashes(old) == before
    assert "has no .yolo-run marker" in log.text and "left untouched" in log.text
    assert _epochs(tmp_path / "runs" / "again" / "results.csv") == [1]


@pytest.mark.slow
def test_resume_in_its_own_run_folder_continues_there(interrupted_run, tmp_path, log):
    run = tmp_path / "exp"
    shutil.copytree(interrupted_run, run)
    assert _train("--resume", run / "weights" / "last.pt", "--project", tmp_path / "elsewhere") == 0
    assert _epochs(run / "results.csv") == [0, 1] and not (tmp_path / "elsewhere").exists()
    assert "new run folder" not in log.text


# ---------------------------------------------------------------------------------------------------------------------
# Item 6: run folders are reserved atomically when chosen


def test_new_run_folder_reserves_the_folder(tmp_path):
    first = run_folder.new_run_folder(tmp_path, "exp", False)
    second = run_folder.new_run_folder(tmp_path, "exp", False)
    assert (first, second) == (str(tmp_path / "exp"), str(tmp_path / "exp2"))
    assert (tmp_path / "exp" / MARKER).is_file() and (tmp_path / "exp2" / MARKER).is_file()
    assert run_folder.new_run_folder(tmp_path, "exp", True) == first  # --exist-ok: a folder a run made


def test_runs_reserving_together_get_distinct_folders(tmp_path):
    n, start, folders = 8, threading.Barrier(8), []

    def reserve():
        start.wait()  # all at once
        folders.append(run_folder.new_run_folder(tmp_path, "exp", False))

    threads = [threading.Thread(target=reserve) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(folders) == sorted(str(tmp_path / name) for name in ["exp", *(f"exp{i}" for i in range(2, n + 1))])


@pytest.mark.slow
def test_a_run_started_alongside_another_gets_its_own_folder(shapes_yaml, tmp_path, monkeypatch):
    # Another train.py with the same --name reserves exp while this one is still setting up (loading the model):
    # its os.mkdir and marker, as utils.files.reserve_run_dir makes them.
    real_build = trainer_module.build_model

    def other_run_reserves_first(*args, **kwargs):
        (tmp_path / "exp").mkdir()
        (tmp_path / "exp" / MARKER).write_text("")
        (tmp_path / "exp" / "results.csv").write_text("the other run's results\n")
        return real_build(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "build_model", other_run_reserves_first)
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 1, "--project", tmp_path) == 0
    assert (tmp_path / "exp" / "results.csv").read_text() == "the other run's results\n"
    assert _epochs(tmp_path / "exp2" / "results.csv") == [0]
    saved = yaml.safe_load((tmp_path / "exp2" / "opt.yaml").read_text())
    assert saved["save_dir"] == str(tmp_path / "exp2")
    assert saved["hyp_file"].endswith("hyp.scratch.yaml")  # item 11: opt.yaml records the hyperparameter file


def test_evolution_folders_are_reserved(tmp_path, log):
    from utils.train import evolve

    first = evolve.evolution_folder(tmp_path, "exp", False)
    assert first == tmp_path / "exp" and (first / MARKER).is_file()
    assert evolve.evolution_folder(tmp_path, "exp", False) == tmp_path / "exp2"
    assert evolve.evolution_folder(tmp_path, "exp", True) == first  # continuing: the folder evolve reserved
    old = tmp_path / "old"  # an evolution from before markers: refused with the way to continue it
    old.mkdir()
    (old / "evolve.csv").write_text("metrics/precision\n")
    with pytest.raises(evolve.EvolveError, match="create an empty .*old/.yolo-run to continue it"):
        evolve.evolution_folder(tmp_path, "old", True)
    assert sorted(p.name for p in old.iterdir()) == ["evolve.csv"]


# ---------------------------------------------------------------------------------------------------------------------
# Item 11: the default --hyp is YOLOv5's scratch-low, from weights and from scratch


def test_hyp_scratch_holds_yolov5_scratch_low():
    assert train.load_hyp(ROOT / "data" / "hyp.scratch.yaml") == SCRATCH_LOW


@pytest.mark.parametrize("weights", ["", "yolov5n.pt"])
def test_default_hyp_is_scratch_low_from_weights_too(weights, tmp_path, log):
    opt = train.parse_opt(["--weights", weights, "--cfg", "yolov5n.yaml", "--project", str(tmp_path)])
    config, _, _ = train.setup_run(opt)
    assert config.hyp == SCRATCH_LOW and Path(config.hyp_file) == ROOT / "data" / "hyp.scratch.yaml"
    assert "hyperparameters: data/hyp.scratch.yaml" in log.text
    assert not any(tmp_path.iterdir())  # nothing is made before training starts


def test_finetune_hyp_is_still_an_option(tmp_path):
    opt = train.parse_opt(["--weights", "x.pt", "--hyp", "hyp.finetune.yaml", "--project", str(tmp_path)])
    config, _, _ = train.setup_run(opt)
    assert config.hyp["lr0"] == 0.0032 and config.hyp_file == "hyp.finetune.yaml"


# ---------------------------------------------------------------------------------------------------------------------
# Item 13: Ctrl-C in the first epoch, a bare --resume, --no-plots, absolute paths


@pytest.mark.slow
def test_ctrl_c_in_the_first_epoch_leaves_a_resumable_checkpoint(shapes_yaml, tmp_path, monkeypatch, log):
    monkeypatch.chdir(tmp_path)  # a relative --project: the paths printed are still absolute
    args = ["--data", shapes_yaml, *FAST, "--epochs", 1, "--project", "runs"]
    assert _train(*args, callbacks=[InterruptFirstBatch()]) == 130
    run = tmp_path / "runs" / "exp"
    start = torch.load(run / "weights" / "last.pt", weights_only=True)
    assert start["epoch"] == -1 and "optimizer" in start and start["ema_updates"] == 0
    assert f"continue from epoch 0 with: python train.py --resume {run / 'weights' / 'last.pt'}" in log.text

    assert _train("--resume", "--project", "runs") == 0  # bare --resume: this run, from epoch 0, same options
    assert "at epoch 0" in log.text and not (tmp_path / "runs" / "exp2").exists()
    assert _epochs(run / "results.csv") == [0]
    assert yaml.safe_load((run / "hyp.yaml").read_text()) == start["train_args"]["hyp"]
    assert f"Results saved to {run}\n" in log.text + "\n"


@pytest.mark.slow
def test_bare_resume_passes_over_newer_finished_runs(interrupted_run, tmp_path, log):
    from utils.train.resume import find_resume_checkpoint

    shutil.copytree(interrupted_run, tmp_path / "exp")
    shutil.copytree(interrupted_run, tmp_path / "exp2")  # newer, and finished
    checkpoints.strip_optimizer(tmp_path / "exp2" / "weights" / "last.pt")
    found = find_resume_checkpoint(True, tmp_path)
    found = found[0] if isinstance(found, tuple) else found
    assert found == tmp_path / "exp" / "weights" / "last.pt"
    assert f"passing over 1 newer finished run(s), e.g. {tmp_path / 'exp2'}" in log.text


def test_bare_resume_says_the_newest_run_saved_nothing(interrupted_run, tmp_path, log):
    shutil.copytree(interrupted_run, tmp_path / "exp")
    newest = tmp_path / "exp2"  # stopped after its run folder was made, before any checkpoint
    (newest / "weights").mkdir(parents=True)
    (newest / "opt.yaml").write_text("epochs: 2\n")
    assert _train("--resume", "--project", tmp_path) == 1
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1 and f"the newest run, {newest}, was interrupted before it saved a checkpoint" in errors[0]
    assert f"--resume {tmp_path / 'exp' / 'weights' / 'last.pt'}" in errors[0]
    assert not (newest / "results.csv").exists() and not (tmp_path / "exp" / "results.csv").read_text().count("\n1,")


@pytest.mark.slow
def test_bare_resume_with_only_finished_runs_says_so(interrupted_run, tmp_path):
    shutil.copytree(interrupted_run, tmp_path / "exp")
    checkpoints.strip_optimizer(tmp_path / "exp" / "weights" / "last.pt")
    with pytest.raises(TrainError, match=r"can be resumed \(1 of finished runs\), nothing to resume"):
        train.setup_run(train.parse_opt(["--resume", "--project", str(tmp_path)]))


@pytest.mark.parametrize("flag", ["--noplots", "--no-plots"])
def test_both_no_plots_spellings(flag):
    assert train.parse_opt([flag]).noplots and not train.parse_opt([]).noplots
