"""Hyperparameter evolution (train.py --evolve): mutation limits, parent selection, evolve.csv round trip and
continuation, and a real 3-generation evolution whose best hyperparameters then train."""

import csv
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

import train
from utils.data.hyp import load_hyp
from utils.data.shapes import generate_shapes, write_data_yaml
from utils.errors import EvolveError, TrainError
from utils.eval import charts
from utils.eval.metrics import fitness
from utils.train import evolve
from utils.train.callbacks import Callback
from utils.train.evolve import MUTATIONS, Generation

ROOT = Path(__file__).resolve().parents[2]
BASE = load_hyp(ROOT / "data" / "hyp.scratch.yaml")
FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--batch-size", "8", "--workers", "0", "--epochs", "1"]


@pytest.fixture(scope="module")
def shapes_yaml(tmp_path_factory):
    """8 train and 4 val shapes images of 64 px (one batch each), and a data YAML for them."""
    folder = tmp_path_factory.mktemp("shapes")
    root = generate_shapes(folder / "shapes", n_train=8, n_val=4, img_size=64)
    return write_data_yaml(root, folder / "shapes.yaml")


def _opt(*args, generations: int = 3):
    return train.parse_opt([str(a) for a in [*FAST, *args, "--evolve", generations]])


def _config(*args, generations: int = 3):
    """The TrainConfig train.py builds for these flags (evolve() takes a config)."""
    return train.run_config(_opt(*args, generations=generations))[0]


class Recorder(Callback):
    """Counts the training runs (generations) and keeps each one's final result; interrupts the n-th if asked."""

    def __init__(self, interrupt_at: int = 0):
        self.starts, self.results, self.interrupt_at = 0, [], interrupt_at

    def on_train_start(self, trainer):
        self.starts += 1
        if self.starts == self.interrupt_at:
            raise KeyboardInterrupt  # like Ctrl-C while a generation trains

    def on_train_end(self, trainer, results):
        self.results.append(results)


def _hyp_rows(csv_file: Path) -> list[tuple[float, ...]]:
    with open(csv_file, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == [*evolve.METRIC_COLUMNS, *BASE]
    return [tuple(float(v) for v in r[len(evolve.METRIC_COLUMNS) :]) for r in rows[1:]]


# ---------------------------------------------------------------------------------------------------------------------
# Mutation and selection


def test_mutation_keeps_limits_and_changes_values():
    keys = evolve.evolvable_keys(BASE)
    assert "anchors" not in keys and set(keys) == set(BASE)  # every key of hyp.scratch.yaml is in the search space
    rng = np.random.default_rng(0)
    parent = evolve.constrain(BASE, keys)
    changed = set()
    for _ in range(200):
        child = evolve.mutate(parent, keys, rng, avoid=[parent])
        assert child != parent and list(child) == list(parent)
        for k, v in child.items():
            assert MUTATIONS[k].low <= v <= MUTATIONS[k].high, (k, v)
            assert v == float(f"{v:.5g}")  # 5 significant digits
            if MUTATIONS[k].scale == 0 or parent[k] == 0:  # fixed keys, and zeros (the gain is a factor), stay
                assert v == parent[k], k
            elif v != parent[k]:
                changed.add(k)
                ratio = v / parent[k]
                at_limit = v in (MUTATIONS[k].low, MUTATIONS[k].high)
                assert at_limit or 0.3 * (1 - 1e-4) <= ratio <= 3.0 * (1 + 1e-4), (k, ratio)
    assert changed == {k for k in keys if MUTATIONS[k].scale and parent[k]}  # every mutable key moved sometimes


def test_constrain_clips_to_the_limits_and_rounds():
    hyp = {**BASE, "lr0": 0.5, "momentum": 0.1, "hsv_h": 0.0123456789}
    out = evolve.constrain(hyp, evolve.evolvable_keys(hyp))
    assert out["lr0"] == 0.1 and out["momentum"] == 0.6 and out["hsv_h"] == 0.012346
    assert hyp["lr0"] == 0.5  # a copy


def test_anchors_evolve_only_when_set_and_autoanchor_on():
    assert "anchors" in evolve.evolvable_keys({**BASE, "anchors": 3.0})
    assert "anchors" not in evolve.evolvable_keys({**BASE, "anchors": 3.0}, noautoanchor=True)
    assert "anchors" not in evolve.evolvable_keys({**BASE, "anchors": 0})  # 0 = the model config's anchors


def test_mutation_that_cannot_change_anything_is_an_error():
    parent = {**BASE, "mixup": 0.0, "flipud": 0.0}
    with pytest.raises(EvolveError, match="no new mutation"):
        evolve.mutate(parent, ["mixup", "flipud"], np.random.default_rng(0))  # zeros stay zero under a gain


def _rows(fitnesses: list[float]) -> list[Generation]:
    """Generations with the given fitness (mAP50-95 = mAP50 = f) and lr0 = 0.001 * (row number)."""
    return [
        Generation([0.5, 0.5, f, f, 0.1, 0.1, 0.1], {**BASE, "lr0": 0.001 * (i + 1)}) for i, f in enumerate(fitnesses)
    ]


def test_generation_fitness_is_the_training_fitness():
    row = Generation([0.7, 0.6, 0.5, 0.3, 0.1, 0.1, 0.1], dict(BASE))
    assert row.fitness == pytest.approx(fitness(SimpleNamespace(map50=0.5, map=0.3)))


def test_single_parent_comes_from_the_fittest_five_favouring_the_best():
    rows = _rows([0.1, 0.9, 0.2, 0.8, 0.3, 0.05, 0.7, 0.6])  # the top 5: rows 2, 4, 7, 8, 5 (lr0 0.002 ...)
    rng = np.random.default_rng(0)
    picks = [evolve.select_parent(rows, rng)["lr0"] for _ in range(300)]
    counts = {lr: picks.count(lr) for lr in set(picks)}
    assert set(counts) <= {0.002, 0.004, 0.007, 0.008}  # the 5th best (0.3, lr0 0.005) has weight 1e-6
    assert max(counts, key=counts.get) == 0.002  # the fittest is drawn most often
    assert evolve.select_parent(rows[:1], rng) == rows[0].hyp


def test_weighted_parent_blends_the_fittest():
    rows = _rows([0.4, 0.2, 0.3])
    blend = evolve.select_parent(rows, np.random.default_rng(0), method="weighted")
    w = np.array([0.2, 0.0, 0.1]) + 1e-6  # fitness - min over the top rows
    assert blend["lr0"] == pytest.approx((w * [0.001, 0.002, 0.003]).sum() / w.sum())
    assert blend["box"] == pytest.approx(BASE["box"])


def test_first_generation_is_the_base_then_mutations_of_a_parent():
    keys = evolve.evolvable_keys(BASE)
    rng = np.random.default_rng(1)
    assert evolve.next_hyp([], BASE, keys, rng) == evolve.constrain(BASE, keys)
    rows = _rows([0.5])
    child = evolve.next_hyp(rows, BASE, keys, rng)
    assert child != rows[0].hyp


# ---------------------------------------------------------------------------------------------------------------------
# evolve.csv and hyp_evolve.yaml


def test_csv_round_trip_and_best_hyp_file(tmp_path):
    file = tmp_path / "evolve.csv"
    assert evolve.read_evolve_csv(file) == []
    rows = _rows([0.1, 0.3, 0.2])
    rows[1].metrics[4] = 0.0123456789  # kept to 5 significant digits
    for row in rows:
        evolve.append_evolve_csv(file, row)
    back = evolve.read_evolve_csv(file)
    assert len(back) == 3 and [r.hyp for r in back] == [r.hyp for r in rows]
    assert back[1].metrics[4] == 0.012346 and back[1].fitness == pytest.approx(0.3)
    best = evolve.write_best_hyp(tmp_path / "hyp_evolve.yaml", back)
    assert best.hyp["lr0"] == 0.002
    text = (tmp_path / "hyp_evolve.yaml").read_text()
    assert "generation 2 of 3" in text and "fitness 0.3" in text
    assert load_hyp(tmp_path / "hyp_evolve.yaml") == rows[1].hyp  # a valid --hyp file
    diverged = Generation([0.0, 0.0, math.nan, math.nan, math.nan, math.inf, 0.1], dict(BASE))
    evolve.append_evolve_csv(file, diverged)  # a diverged generation is kept, at fitness 0
    assert evolve.read_evolve_csv(file)[3].fitness == 0.0 and evolve.best_generation(evolve.read_evolve_csv(file)) == 1
    with pytest.raises(EvolveError, match="other hyperparameter columns"):
        evolve.append_evolve_csv(file, Generation(rows[0].metrics, {**BASE, "anchors": 3.0}))


def test_segment_generations_keep_their_mask_columns_and_score_boxes_plus_masks(tmp_path):
    from utils.train.callbacks import result_columns

    columns = evolve.metric_columns(result_columns(("box", "seg", "obj", "cls"), masks=True))
    assert columns[4:8] == tuple(f"metrics/mask_{m}" for m in ("precision", "recall", "mAP50", "mAP50-95"))
    assert columns[-4:] == ("val/box_loss", "val/seg_loss", "val/obj_loss", "val/cls_loss")
    boxes, masks = (0.7, 0.6, 0.5, 0.3), (0.65, 0.55, 0.4, 0.2)
    rows = [Generation([*boxes, *masks, 0.1, 0.2, 0.1, 0.1], {**BASE, "lr0": lr}, columns) for lr in (0.001, 0.002)]
    rows[1].metrics[6] = 0.9  # the second generation's masks are better, its boxes the same
    expected = [
        fitness(SimpleNamespace(map50=0.5, map=0.3)) + fitness(SimpleNamespace(map50=m, map=0.2)) for m in (0.4, 0.9)
    ]
    assert [r.fitness for r in rows] == pytest.approx(expected)
    file = tmp_path / "evolve.csv"
    for row in rows:
        evolve.append_evolve_csv(file, row)
    back = evolve.read_evolve_csv(file)
    assert back[0].columns == columns and [r.fitness for r in back] == pytest.approx(expected)
    assert evolve.best_generation(back) == 1


HEADER = ",".join([*evolve.METRIC_COLUMNS, *BASE])
ROW = ",".join(["0.5"] * len(evolve.METRIC_COLUMNS) + [str(v) for v in BASE.values()])


@pytest.mark.parametrize(
    "text, message",
    [
        (f"{HEADER}\n{ROW}\n{ROW},1\n", "row 2 has 36 values but the header has 35"),
        (f"{HEADER}\n{ROW.replace('0.5', 'abc', 1)}\n", "row 1 holds a value that is not a number"),
        (f"{HEADER}\n{ROW.replace(',0.01,', ',inf,', 1)}\n", "row 1 holds a hyperparameter that is not finite"),
        ("epoch,loss\n1,2\n", "is not an evolve.csv"),
        (f"{HEADER.replace(',lr0,', ',lr_zero,')}\n", "lacks lr0"),
        (f"{HEADER},lr0\n", "unknown or repeated columns"),
    ],
    ids=["row-length", "not-a-number", "nan", "not-evolve-csv", "missing-hyp", "repeated-hyp"],
)
def test_malformed_csv_is_a_one_line_error(tmp_path, shapes_yaml, text, message, log):
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / ".yolo-run").write_text("")  # the marker of a folder an evolution made (utils.files.RUN_MARKER)
    (folder / "evolve.csv").write_text(text)
    assert train.main(_opt("--data", shapes_yaml, "--project", tmp_path, "--exist-ok")) == 1
    errors = [line for line in log.messages if line.startswith("ERROR")]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0]
    assert sorted(p.name for p in folder.iterdir()) == [".yolo-run", "evolve.csv"]  # refused before any training
    with pytest.raises(EvolveError, match=message):
        evolve.evolve(_config("--data", shapes_yaml, "--project", tmp_path, "--exist-ok"))


# ---------------------------------------------------------------------------------------------------------------------
# Requests evolution refuses, and where it goes


def test_distributed_and_resume_are_refused(tmp_path, shapes_yaml, monkeypatch, log):
    with monkeypatch.context() as patched:  # as under torchrun with 2 processes (the rank is read once, at import)
        patched.setattr(evolve, "WORLD_SIZE", 2)
        assert train.main(_opt("--data", shapes_yaml, "--project", tmp_path)) == 1
    assert "ERROR: --evolve is not supported with distributed training" in log.text
    opt = _opt("--data", shapes_yaml, "--project", tmp_path, "--resume")
    with pytest.raises(TrainError, match="--exist-ok, which continues from that folder's evolve.csv"):
        evolve.evolve(train.run_config(opt)[0])
    assert not any(tmp_path.iterdir())


def test_default_project_becomes_runs_evolve(tmp_path):
    assert evolve.evolve_project(train.parse_opt([]).project) == ROOT / "runs" / "evolve"
    assert evolve.evolve_project(tmp_path) == tmp_path


# ---------------------------------------------------------------------------------------------------------------------
# Real evolutions


@pytest.mark.slow
def test_evolve_three_generations_then_train_with_the_result(shapes_yaml, tmp_path, log):
    recorder = Recorder()
    assert train.main(_opt("--data", shapes_yaml, "--project", tmp_path), callbacks=[recorder]) == 0  # --evolve 3
    save_dir = tmp_path / "exp"
    assert recorder.starts == 3
    hyps = _hyp_rows(save_dir / "evolve.csv")
    assert len(hyps) == 3 and len(set(hyps)) == 3  # three different sets of hyperparameters
    assert hyps[0] == tuple(BASE.values())  # the first generation trains the base --hyp (inside the limits)
    rows = evolve.read_evolve_csv(save_dir / "evolve.csv")
    for row, trained in zip(rows, recorder.results):
        expected = [trained.precision, trained.recall, trained.map50, trained.map, *trained.val_losses]
        assert row.metrics == pytest.approx(expected, rel=1e-4, abs=1e-9)
        assert row.fitness == pytest.approx(trained.fitness, rel=1e-4, abs=1e-9)
        assert math.isfinite(row.metrics[4]) and row.metrics[4] > 0  # a real validation loss
    assert (save_dir / "evolve.png").is_file() and not (save_dir / "generation" / "weights").exists()
    assert [line for line in log.messages if line.startswith("Generation ")][-1].startswith("Generation 3/3: fitness")
    hyp_file = save_dir / "hyp_evolve.yaml"
    assert f"python train.py --hyp {hyp_file}" in log.text

    best = load_hyp(hyp_file)
    assert tuple(best.values()) == hyps[evolve.best_generation(rows)]
    args = [*FAST, "--data", shapes_yaml, "--project", tmp_path, "--name", "tuned", "--noplots", "--hyp", hyp_file]
    assert train.main(train.parse_opt([str(a) for a in args])) == 0
    assert yaml.safe_load((tmp_path / "tuned" / "hyp.yaml").read_text()) == best

    # The same command on the finished folder has nothing left to train.
    again = evolve.evolve(_config("--data", shapes_yaml, "--project", tmp_path, "--exist-ok"), callbacks=[recorder])
    assert again.save_dir == save_dir and again.trained == 0 and again.generations == 3 and recorder.starts == 3
    assert again.hyp_file == hyp_file and again.best_hyp == best
    assert "holds 3 of --evolve 3 generations, 0 left" in log.text


@pytest.mark.slow
def test_interrupted_evolution_continues_from_its_csv(shapes_yaml, tmp_path, monkeypatch, log):
    opt_args = ["--data", shapes_yaml, "--project", tmp_path, "--name", "search"]
    with pytest.raises(KeyboardInterrupt):
        evolve.evolve(_config(*opt_args, generations=2), callbacks=[Recorder(interrupt_at=2)])
    save_dir = tmp_path / "search"
    first = _hyp_rows(save_dir / "evolve.csv")
    assert len(first) == 1 and (save_dir / "hyp_evolve.yaml").is_file()  # the best so far is kept

    def broken_plot(*args):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(charts, "plot_evolve", broken_plot)
    recorder = Recorder()
    result = evolve.evolve(_config(*opt_args, "--exist-ok", generations=2), callbacks=[recorder])
    assert recorder.starts == 1 and result.trained == 1 and result.generations == 2
    assert "holds 1 of --evolve 2 generations, 1 left" in log.text
    hyps = _hyp_rows(save_dir / "evolve.csv")
    assert hyps[0] == first[0] and hyps[1] != hyps[0]  # continued from the first row, not restarted
    assert "evolution plot" in log.text and "no fonts" in log.text  # a failed plot is a warning
    assert not (tmp_path / "search2").exists()
