"""utils.train.trainer: the Trainer's stages and callbacks on a tiny shapes set, its checkpoint guard, its helpers."""

import csv
import math
import shutil
from pathlib import Path

import pytest
import torch

import train
from models.nn.yolo import Model
from utils.errors import TrainError
from utils.train import callbacks, checkpoints, run_folder, trainer
from utils.train.callbacks import Callback

FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--batch-size", "8", "--workers", "0", "--noplots"]


class Recorder(Callback):
    """Records every hook call."""

    def __init__(self):
        self.events, self.results = [], []

    def on_train_start(self, trainer):
        self.events.append("train_start")

    def on_epoch_start(self, trainer, epoch):
        self.events.append(f"epoch_start {epoch}")

    def on_batch_end(self, trainer, batch):
        self.events.append(f"batch {batch.epoch}.{batch.index}")

    def on_epoch_end(self, trainer, result):
        self.events.append(f"epoch_end {result.epoch}")
        self.results.append(result)

    def on_checkpoint_saved(self, trainer, path, result):
        self.events.append(f"saved {path.name} {result.epoch}")

    def on_train_end(self, trainer, results):
        self.events.append("train_end")
        self.final = results


def _train(*args, callbacks=None) -> int:
    return train.main(train.parse_opt([str(a) for a in args]), callbacks=callbacks)


@pytest.mark.slow
def test_stages_call_the_hooks_in_order_with_the_epoch_results(shapes_yaml, tmp_path):
    recorder = Recorder()
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 2, "--project", tmp_path, callbacks=[recorder]) == 0
    epoch = ["batch {e}.0", "batch {e}.1", "epoch_end {e}", "saved last.pt {e}"]
    expected = ["train_start"]
    for e in range(2):
        expected += [f"epoch_start {e}"] + [x.format(e=e) for x in epoch]
        expected += [f"saved best.pt {e}"] if f"saved best.pt {e}" in recorder.events else []
    assert recorder.events == expected + ["train_end"]
    assert "saved best.pt 0" in recorder.events  # the first epoch is always the best so far
    with open(tmp_path / "exp" / "results.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    for row, result in zip(rows, recorder.results):  # results.csv is the EpochResult, row by row
        assert [float(x) for x in row] == pytest.approx(result.row(), rel=1e-5)
    assert math.isfinite(recorder.final.fitness) and recorder.final.epoch == 1


class PoisonWeights(Callback):
    """Writes a NaN into the model after validation, as a diverged step would leave it."""

    def on_epoch_end(self, trainer, result):
        with torch.no_grad():
            next(trainer.parts.model.parameters())[0, 0, 0, 0] = float("nan")


@pytest.mark.slow
def test_non_finite_weights_are_never_saved(shapes_yaml, tmp_path, log):
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 1, "--project", tmp_path, callbacks=[PoisonWeights()]) == 0
    assert "non-finite weights after epoch 0: checkpoint not saved" in log.text
    assert not list((tmp_path / "exp" / "weights").iterdir())


def test_epoch_result_before_any_validation_is_zeros():
    result = callbacks.epoch_result(0, [0.1, 0.2, 0.3], [0.01, 0.01, 0.01], None)
    assert result.row() == [0, 0.1, 0.2, 0.3, 0, 0, 0, 0, 0, 0, 0, 0.01, 0.01, 0.01] and result.fitness == 0


def test_fp16_rounded_is_a_rounded_copy():
    model = Model("yolov5n.yaml", nc=2)
    weight = model.model[0].conv.weight
    weight.data[0, 0, 0, 0] = 1 + 2**-12  # not representable in FP16
    rounded = checkpoints.fp16_rounded(model)
    assert rounded.model[0].conv.weight[0, 0, 0, 0] == 1.0 and weight[0, 0, 0, 0] == 1 + 2**-12


def test_new_run_folder_numbers_runs_and_refuses_a_file(tmp_path):
    assert run_folder.new_run_folder(str(tmp_path), "exp", False) == str(tmp_path / "exp")
    assert (tmp_path / "exp").is_dir()  # reserved when chosen
    assert run_folder.new_run_folder(str(tmp_path), "exp", False) == str(tmp_path / "exp2")
    assert run_folder.new_run_folder(str(tmp_path), "exp", True) == str(tmp_path / "exp")
    (tmp_path / "file").write_text("")
    with pytest.raises(TrainError, match="is a file, not a folder"):
        run_folder.new_run_folder(str(tmp_path / "file"), "exp", False)


class EvaluateCounter(Callback):
    """Counts the Trainer's evaluations (live ones and the final one) by wrapping Trainer.evaluate at the start."""

    def __init__(self):
        self.calls = []

    def on_train_start(self, tr):
        evaluate = tr.evaluate

        def counted(model, plots, verbose=False):
            self.calls.append((plots, verbose))
            return evaluate(model, plots, verbose)

        tr.evaluate = counted


@pytest.mark.slow
def test_best_pt_of_the_last_epoch_is_not_validated_twice(shapes_yaml, tmp_path, log):
    counter = EvaluateCounter()
    args = [a for a in FAST if a != "--noplots"]
    assert _train("--data", shapes_yaml, *args, "--epochs", 2, "--project", tmp_path, callbacks=[counter]) == 0
    # Epoch 0 plain, epoch 1 (the last, and best: equal fitness counts as best) with plots and the per-class table.
    assert counter.calls == [(False, False), (True, True)]
    assert "holds the final epoch's weights" in log.text and "Validating" not in log.text
    assert (tmp_path / "exp" / "PR_curve.png").exists() and (tmp_path / "exp" / "confusion_matrix.png").exists()


@pytest.mark.slow
def test_an_earlier_best_pt_is_validated_at_the_end(shapes_yaml, tmp_path, monkeypatch, log):
    real = trainer.epoch_result

    def falling_fitness(epoch, *rest):  # epoch 0 scores best, so best.pt keeps epoch 0's weights
        result = real(epoch, *rest)
        result.fitness = 1.0 - epoch * 0.5
        return result

    monkeypatch.setattr(trainer, "epoch_result", falling_fitness)
    counter = EvaluateCounter()
    assert _train("--data", shapes_yaml, *FAST, "--epochs", 2, "--project", tmp_path, callbacks=[counter]) == 0
    assert counter.calls == [(False, False), (False, True), (False, True)]  # best.pt scored again at the end
    assert f"Validating {tmp_path / 'exp' / 'weights' / 'best.pt'}" in log.text


def test_a_run_that_fails_before_training_leaves_no_cache(shapes_yaml, tmp_path, cache_dir, log):
    """The train split is read (and its label cache written) before the val split, which here holds no image: the
    run stops with one line, and the train split's new cache goes with it; a cache that was there before stays."""
    root = tmp_path / "data"
    shutil.copytree(Path(shapes_yaml).parent / "shapes", root)
    (root / "images" / "empty").mkdir()
    data = tmp_path / "broken.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/empty\nnames: [circle, square, triangle]\n")
    args = ("--data", data, *FAST, "--epochs", 1, "--project", tmp_path / "runs")
    assert _train(*args) != 0
    assert "images/empty" in log.text and "New cache created" in log.text  # made, then removed
    assert list(cache_dir.iterdir()) == [] and not (tmp_path / "runs").exists()
    good = tmp_path / "good.yaml"  # the train split cached by a run that went well ...
    good.write_text(data.read_text().replace("images/empty", "images/val"))
    assert _train("--data", good, *FAST, "--epochs", 1, "--project", tmp_path / "runs") == 0
    kept = sorted(cache_dir.iterdir())
    assert len(kept) == 2
    assert _train(*args) != 0  # ... stays when a later run fails
    assert sorted(cache_dir.iterdir()) == kept


def test_val_loader_workers_start_before_training_and_serve_every_image_once(shapes_yaml):
    """build_val_loader starts its persistent workers at once (forked before training grows the process: see its
    docstring); the first validation pass still sees each val image exactly once, in order, and so does the next."""
    import yaml

    from utils.data.hyp import load_hyp
    from utils.train.config import TrainConfig
    from utils.train.setup import build_val_loader

    data = yaml.safe_load(open(shapes_yaml))
    val = str(Path(data["path"]) / data["val"])
    names = data["names"]
    loader = build_val_loader(TrainConfig(workers=1), val, 64, 3, 32, load_hyp("hyp.scratch.yaml"), len(names))
    assert loader.num_workers == 2 and loader._iterator is not None  # started, before any pass
    for _ in range(2):
        paths = [p for _, _, batch_paths, _ in loader for p in batch_paths]
        assert paths == list(loader.dataset.im_files) and len(paths) == 8
