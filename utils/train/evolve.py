"""Hyperparameter evolution (train.py --evolve N): a genetic search over the training hyperparameters, as YOLOv5
runs it.

Each generation picks a parent among the fittest rows of <save_dir>/evolve.csv, mutates it, trains --epochs epochs
(validating and saving only the final one, no plots) and appends its metrics and hyperparameters as a new row. The
first generation of a new evolution trains the base --hyp as given (clipped to the search limits), so the search
starts from a measured point. After every generation hyp_evolve.yaml holds the best row so far (a valid --hyp
file); at the end evolve.png plots each hyperparameter against fitness.

evolve.csv is the whole state of an evolution. To continue an interrupted one, run the same command on the same
folder: `python train.py --evolve 300 --name exp --exist-ok` finds runs/evolve/exp/evolve.csv with, say, 120 rows
and trains the 180 generations left. Without --exist-ok a new folder (exp2, ...) starts a new evolution.
"""

import csv
import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import yaml

from utils.data.hyp import HYP_OPTIONAL, hyp_schema, required_hyp_keys
from utils.errors import EvolveError, RunFolderError, TrainError
from utils.eval.metrics import fitness_score
from utils.files import REPO_ROOT, RUN_MARKER, is_run_dir
from utils.log import LOGGER
from utils.torch_utils import select_device
from utils.train.callbacks import RESULT_COLUMNS, Callback
from utils.train.config import DEFAULT_PROJECT, TrainConfig
from utils.train.distributed import RANK, WORLD_SIZE
from utils.train.run_folder import new_run_folder
from utils.train.trainer import train

EVOLVE_PROJECT = REPO_ROOT / "runs" / "evolve"  # where evolutions go when --project is the default runs/train
CSV_NAME, YAML_NAME, PLOT_NAME = "evolve.csv", "hyp_evolve.yaml", "evolve.png"
GENERATION_DIR = "generation"  # the latest generation's training run (its weights are deleted after it)


class Mutation(NamedTuple):
    """How one hyperparameter evolves: relative mutation scale (0 = fixed) and the limits it is clipped to."""

    scale: float
    low: float
    high: float


# YOLOv5's search space.
MUTATIONS = {
    "lr0": Mutation(1, 1e-5, 1e-1),
    "lrf": Mutation(1, 0.01, 1.0),
    "momentum": Mutation(0.3, 0.6, 0.98),
    "weight_decay": Mutation(1, 0.0, 0.001),
    "warmup_epochs": Mutation(1, 0.0, 5.0),
    "warmup_momentum": Mutation(1, 0.0, 0.95),
    "warmup_bias_lr": Mutation(1, 0.0, 0.2),
    "box": Mutation(1, 0.02, 0.2),
    "cls": Mutation(1, 0.2, 4.0),
    "cls_pw": Mutation(1, 0.5, 2.0),
    "obj": Mutation(1, 0.2, 4.0),
    "obj_pw": Mutation(1, 0.5, 2.0),
    "iou_t": Mutation(0, 0.1, 0.7),
    "anchor_t": Mutation(1, 2.0, 8.0),
    "anchors": Mutation(2, 2.0, 10.0),
    "fl_gamma": Mutation(0, 0.0, 2.0),
    "hsv_h": Mutation(1, 0.0, 0.1),
    "hsv_s": Mutation(1, 0.0, 0.9),
    "hsv_v": Mutation(1, 0.0, 0.9),
    "degrees": Mutation(1, 0.0, 45.0),
    "translate": Mutation(1, 0.0, 0.9),
    "scale": Mutation(1, 0.0, 0.9),
    "shear": Mutation(1, 0.0, 10.0),
    "perspective": Mutation(0, 0.0, 0.001),
    "flipud": Mutation(1, 0.0, 1.0),
    "fliplr": Mutation(0, 0.0, 1.0),
    "mosaic": Mutation(1, 0.0, 1.0),
    "mixup": Mutation(1, 0.0, 1.0),
    "copy_paste": Mutation(1, 0.0, 1.0),
}
# The anchor-free models' loss gains are of another size (box 7.5 against YOLOv5's 0.05) and add dfl: Ultralytics'
# tuner limits for those two; the other keys search as YOLOv5's.
ANCHOR_FREE_MUTATIONS = {**MUTATIONS, "box": Mutation(1, 1.0, 20.0), "dfl": Mutation(1, 0.4, 6.0)}
SEARCH_SPACES = {"yolov5": MUTATIONS, "anchor_free": ANCHOR_FREE_MUTATIONS}  # by utils.data.hyp.HYP_SCHEMAS name
MUTATION_PROBABILITY, MUTATION_SIGMA = 0.8, 0.2
GAIN_MIN, GAIN_MAX = 0.3, 3.0  # a single mutation changes a value by at most these factors
SIGNIFICANT_DIGITS = 5
MAX_MUTATION_TRIES = 1000
PARENTS = 5  # a parent is drawn from this many fittest generations
# results.csv's precision, recall, mAP50, mAP50-95 and the three val losses, with the same names
METRIC_COLUMNS = tuple(RESULT_COLUMNS[RESULT_COLUMNS.index("metrics/precision") : RESULT_COLUMNS.index("lr/pg0")])
_MAP_PREFIXES = ("metrics/", "metrics/mask_")  # boxes' and masks' mAP columns


def metric_columns(columns: list[str]) -> tuple[str, ...]:
    """The validation columns of a results.csv or evolve.csv header: from metrics/precision up to the first that is
    neither a metric nor a validation loss (a learning rate or a hyperparameter)."""
    start = columns.index("metrics/precision") if "metrics/precision" in columns else len(columns)
    end = start
    while end < len(columns) and columns[end].startswith(("metrics/", "val/")):
        end += 1
    return tuple(columns[start:end])


@dataclass
class Generation:
    """One row of evolve.csv: a generation's final validation (METRIC_COLUMNS order) and its hyperparameters."""

    metrics: list[float]
    hyp: dict[str, float]
    columns: tuple[str, ...] = METRIC_COLUMNS  # the metrics' names: a segment run's add its masks' and more losses

    @property
    def fitness(self) -> float:
        """The training fitness of this row, as the run's best.pt was chosen: fitness_score of the boxes, plus the
        masks' for a segment run; 0 if not finite."""
        named = dict(zip(self.columns, self.metrics))
        value = sum(
            fitness_score(named[f"{m}mAP50"], named[f"{m}mAP50-95"]) for m in _MAP_PREFIXES if f"{m}mAP50" in named
        )
        return value if math.isfinite(value) else 0.0  # a diverged generation counts as the least fit


@dataclass
class EvolutionResult:
    """What an evolve() call did and where the best hyperparameters are."""

    save_dir: Path
    generations: int  # rows in evolve.csv now
    trained: int  # generations trained by this call
    best_generation: int  # 1-based row number in evolve.csv
    best_fitness: float
    best_hyp: dict[str, float]
    hyp_file: Path  # hyp_evolve.yaml
    csv_file: Path


# ---------------------------------------------------------------------------------------------------------------------
# Mutation and selection


def significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """value rounded to `digits` significant digits (the precision evolve.csv keeps)."""
    return float(f"{value:.{digits}g}")


def search_space(hyp) -> dict[str, Mutation]:
    """The mutations of a hyperparameter set's key set, the one its model family names (Family.hyp_schema)."""
    return SEARCH_SPACES[hyp_schema(hyp)]


def evolvable_keys(hyp: dict, noautoanchor: bool = False) -> list[str]:
    """The keys of hyp that evolve: those of the search space, except anchors when AutoAnchor is off or it is 0."""
    # anchors: 0 means "the model config's anchors"; and with --noautoanchor nothing would fit a new anchor count.
    skip_anchors = noautoanchor or not hyp.get("anchors")
    return [k for k in hyp if k in search_space(hyp) and not (k == "anchors" and skip_anchors)]


def constrain(hyp: dict, keys: list[str]) -> dict[str, float]:
    """A copy of hyp with the given keys clipped to their search limits and rounded to 5 significant digits."""
    out = dict(hyp)
    for k in keys:
        limits = search_space(hyp)[k]
        out[k] = significant(min(max(float(hyp[k]), limits.low), limits.high))
    return out


def mutate(
    parent: dict,
    keys: list[str],
    rng: np.random.Generator,
    avoid: list[dict] | tuple = (),
    probability: float = MUTATION_PROBABILITY,
    sigma: float = MUTATION_SIGMA,
) -> dict[str, float]:
    """A child of parent: each key mutated with the given probability by a random gain, then constrained.

    Drawn again until the child differs from its parent and from every hyp in avoid (the earlier generations):
    a change can vanish when a value is 0 or clipped back to its limit."""
    scales = np.array([search_space(parent)[k].scale for k in keys], dtype=np.float64)
    start = constrain(parent, keys)
    for _ in range(MAX_MUTATION_TRIES):
        picked = rng.random(len(keys)) < probability
        # One overall strength per child (rng.random()) times a normal draw per key: mostly small steps.
        gains = (scales * picked * rng.standard_normal(len(keys)) * rng.random() * sigma + 1).clip(GAIN_MIN, GAIN_MAX)
        child = constrain({**start, **{k: start[k] * g for k, g in zip(keys, gains)}}, keys)
        if child != start and child not in avoid:
            return child
    raise EvolveError(
        f"no new mutation found in {MAX_MUTATION_TRIES} tries: every evolvable hyperparameter "
        f"({', '.join(keys) or 'none'}) is 0 or at a limit; start from a --hyp with values inside the search space"
    )


def select_parent(
    rows: list[Generation], rng: np.random.Generator, method: str = "single", top: int = PARENTS
) -> dict[str, float]:
    """A parent from the `top` fittest rows, favouring fitter ones: one of them ('single') or their blend ('weighted').

    The weights are fitness - min + 1e-6, so the least fit of the top rows is almost never picked alone."""
    if not rows:
        raise ValueError("select_parent needs at least one generation")
    best = sorted(rows, key=lambda r: r.fitness, reverse=True)[:top]
    fitness = np.array([r.fitness for r in best])
    weights = fitness - fitness.min() + 1e-6
    if method == "single" or len(best) == 1:
        return dict(best[rng.choice(len(best), p=weights / weights.sum())].hyp)
    if method == "weighted":
        return {k: float(sum(w * r.hyp[k] for w, r in zip(weights, best)) / weights.sum()) for k in best[0].hyp}
    raise ValueError(f"unknown parent selection method {method!r}: use 'single' or 'weighted'")


def next_hyp(rows: list[Generation], base: dict, keys: list[str], rng: np.random.Generator) -> dict[str, float]:
    """The next generation's hyperparameters: the base itself first (as YOLOv5), then a mutated fit parent."""
    if not rows:
        return constrain(base, keys)
    return mutate(select_parent(rows, rng), keys, rng, avoid=[r.hyp for r in rows])


# ---------------------------------------------------------------------------------------------------------------------
# evolve.csv, hyp_evolve.yaml, evolve.png


def _parse_row(cells: list[str], header: list[str], where: str) -> Generation:
    """One data row of evolve.csv, or EvolveError naming the bad row (e.g. one cut short by a kill)."""
    fix = "fix or delete that row to continue"
    if len(cells) != len(header):
        raise EvolveError(f"{where} has {len(cells)} values but the header has {len(header)}: {fix}")
    try:
        values = [float(c) for c in cells]
    except ValueError:
        raise EvolveError(f"{where} holds a value that is not a number: {fix}") from None
    n = len(metric_columns(header))
    # Metrics may be nan (the validation losses of a diverged generation); hyperparameters must be usable.
    if not all(math.isfinite(v) for v in values[n:]):
        raise EvolveError(f"{where} holds a hyperparameter that is not finite: {fix}")
    return Generation(values[:n], dict(zip(header[n:], values[n:])), tuple(header[:n]))


def _check_header(header: list[str], file: Path) -> None:
    """evolve.csv's header: METRIC_COLUMNS, then every required hyperparameter and no unknown one."""
    n = len(metric_columns(header))
    if tuple(header[:4]) != METRIC_COLUMNS[:4] or n < len(METRIC_COLUMNS):
        raise EvolveError(f"{file} is not an evolve.csv: its header must start with {','.join(METRIC_COLUMNS)}")
    hyp = header[n:]
    missing = [k for k in required_hyp_keys(hyp) if k not in hyp]
    unknown = [k for k in hyp if k not in required_hyp_keys(hyp) + HYP_OPTIONAL]
    if missing or unknown or len(set(hyp)) != len(hyp):
        problem = f"lacks {', '.join(missing)}" if missing else f"has unknown or repeated columns {unknown or hyp}"
        raise EvolveError(f"{file}: its header {problem}; fix or delete the file to start a new evolution")


def read_evolve_csv(file: str | Path) -> list[Generation]:
    """The generations in evolve.csv (none for a missing or empty file); EvolveError for a malformed one."""
    file = Path(file)
    if not file.exists() or file.stat().st_size == 0:
        return []
    try:
        with open(file, newline="", encoding="utf-8") as f:
            lines = [[c.strip() for c in r] for r in csv.reader(f) if any(c.strip() for c in r)]
    except (UnicodeDecodeError, csv.Error) as e:
        raise EvolveError(f"{file} is not a readable CSV file: {e}") from None
    if not lines:
        return []
    _check_header(lines[0], file)
    return [_parse_row(cells, lines[0], f"{file} row {i}") for i, cells in enumerate(lines[1:], 1)]


def append_evolve_csv(file: str | Path, row: Generation) -> None:
    """Append a generation to evolve.csv (the header first when the file is new)."""
    file = Path(file)
    header = [*row.columns, *row.hyp]
    if file.exists() and file.stat().st_size:
        with open(file, newline="", encoding="utf-8") as f:
            existing = [c.strip() for c in next(csv.reader(f), [])]
        if existing != header:
            raise EvolveError(f"{file} has other hyperparameter columns than this --hyp; use a new --name")
    else:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(",".join(header) + "\n", encoding="utf-8")
    with open(file, "a", newline="", encoding="utf-8") as f:
        csv.writer(f).writerow([f"{v:.{SIGNIFICANT_DIGITS}g}" for v in [*row.metrics, *row.hyp.values()]])


def best_generation(rows: list[Generation]) -> int:
    """The 0-based index of the fittest row (the first one on a tie)."""
    return int(np.argmax([r.fitness for r in rows]))


def write_best_hyp(file: str | Path, rows: list[Generation]) -> Generation:
    """hyp_evolve.yaml: the fittest generation's hyperparameters, a --hyp file with a comment header; that row."""
    i = best_generation(rows)
    best = rows[i]
    metrics = ", ".join(f"{k}={v:.5g}" for k, v in zip(best.columns, best.metrics))
    header = (
        f"# Hyperparameters evolved by train.py --evolve: generation {i + 1} of {len(rows)} is the best,\n"
        f"# fitness {best.fitness:.5g} (0.1 * mAP50 + 0.9 * mAP50-95; a segment run's boxes' plus masks')\n"
        f"# {metrics}\n"
        f"# Usage: python train.py --hyp {file}\n\n"
    )
    Path(file).write_text(header + yaml.safe_dump(best.hyp, sort_keys=False), encoding="utf-8")
    return best


def plot_evolution(rows: list[Generation], file: str | Path) -> None:
    """evolve.png: each hyperparameter against fitness; a plotting failure is only a warning."""
    try:
        from utils.eval import charts  # matplotlib is slow to import: only when a plot is drawn

        values = np.array([list(r.hyp.values()) for r in rows], dtype=np.float64)
        charts.plot_evolve(list(rows[0].hyp), values, np.array([r.fitness for r in rows]), file)
    except Exception as e:  # a plot must never stop an evolution
        LOGGER.warning(f"WARNING: the evolution plot {file} failed: {e}")


# ---------------------------------------------------------------------------------------------------------------------
# The evolution


def evolve_project(project: str | Path) -> Path:
    """Where evolutions go: train.py's default --project (runs/train) becomes runs/evolve; any other is kept."""
    return EVOLVE_PROJECT if Path(project).resolve() == DEFAULT_PROJECT.resolve() else Path(project)


def evolution_folder(project: Path, name: str, exist_ok: bool) -> Path:
    """project/name reserved for the evolution (a new exp2, exp3... unless exist_ok, which continues the evolution a
    run made there earlier); one line for a folder that no run made."""
    try:
        return Path(new_run_folder(project, name, exist_ok))
    except RunFolderError as e:
        folder = Path(project).absolute() / name
        if exist_ok and (folder / CSV_NAME).is_file() and not is_run_dir(folder):
            raise EvolveError(
                f"--exist-ok: {folder} holds an {CSV_NAME} but no {RUN_MARKER} marker (an evolution from before "
                f"markers were written, or a copy): if it is your evolution, create an empty {folder / RUN_MARKER} "
                "to continue it; nothing there was changed"
            ) from None
        raise e from None


def check_request(config: TrainConfig) -> None:
    """Refuse what evolution cannot do (distributed training, --resume); one-line TrainError."""
    if RANK != -1 or WORLD_SIZE > 1:
        raise TrainError(
            "--evolve is not supported with distributed training (torch.distributed.run): run train.py as a "
            "single process, e.g. python train.py --evolve 300 --device 0"
        )
    if not isinstance(config.evolve, int) or isinstance(config.evolve, bool) or config.evolve < 1:
        raise TrainError(f"--evolve takes a number of generations >= 1, got {config.evolve!r}")
    if config.resume:
        raise TrainError(
            "--evolve cannot be combined with --resume: to continue an interrupted evolution run the same --evolve "
            "command with --name <its folder> --exist-ok, which continues from that folder's evolve.csv"
        )


def train_generation(
    hyp: dict, config: TrainConfig, device: torch.device, save_dir: Path, callbacks: list[Callback] | None
) -> Generation:
    """Train one generation in save_dir/generation (replacing the previous one, weights deleted after); its row."""
    run_dir = save_dir / GENERATION_DIR
    shutil.rmtree(run_dir, ignore_errors=True)  # its results.csv must hold this generation only
    only_final = dict(noval=True, nosave=True, noplots=True, exist_ok=True)  # only the final epoch counts
    generation = replace(config, hyp=dict(hyp), resume=False, evolve=None, save_dir=str(run_dir), **only_final)
    result = train(generation, device, None, callbacks)
    shutil.rmtree(run_dir / "weights", ignore_errors=True)  # 300 generations of checkpoints add up
    if result is None:
        raise EvolveError("a generation ended without a validation result")
    if result.mask is None:  # detection: the columns evolve.csv has always had (YOLOv5's loss names)
        metrics = [result.precision, result.recall, result.map50, result.map, *result.val_losses]
        return Generation([float(v) for v in metrics], hyp)
    columns, row = result.columns(), result.row()  # a segment run: its mask metrics and its loss items too
    start, n = columns.index("metrics/precision"), len(metric_columns(columns))
    return Generation([float(v) for v in row[start : start + n]], hyp, metric_columns(columns))


def _start_message(save_dir: Path, done: int, total: int) -> str:
    """The first line of an evolution: new, continued or already complete."""
    if not done:
        return (
            f"Evolving hyperparameters for {total} generations in {save_dir} (if interrupted, the same command with "
            f"--name {save_dir.name} --exist-ok continues it)"
        )
    left = max(total - done, 0)
    return (
        f"Continuing the evolution in {save_dir}: {CSV_NAME} holds {done} of --evolve {total} generations, {left} "
        f"left (parents come from {CSV_NAME}; --hyp only starts new evolutions)"
    )


def evolve(
    config: TrainConfig, callbacks: list[Callback] | None = None, rng: np.random.Generator | None = None
) -> EvolutionResult:
    """Evolve the hyperparameters up to config.evolve generations in project/name (continuing its evolve.csv), the
    first generation from config.hyp.

    callbacks are passed to every generation's training run; rng (tests) replaces the fresh random generator."""
    check_request(config)
    base = dict(config.hyp)
    device = select_device(config.device)
    save_dir = evolution_folder(evolve_project(config.project), config.name, config.exist_ok)
    csv_file, hyp_file = save_dir / CSV_NAME, save_dir / YAML_NAME
    rows = read_evolve_csv(csv_file)
    keys = evolvable_keys(rows[0].hyp if rows else base, config.noautoanchor)
    rng = rng if rng is not None else np.random.default_rng()  # fresh entropy: training reseeds NumPy's global RNG
    LOGGER.info(_start_message(save_dir, len(rows), config.evolve))
    done = len(rows)
    for generation in range(done + 1, config.evolve + 1):
        row = train_generation(next_hyp(rows, base, keys, rng), config, device, save_dir, callbacks)
        append_evolve_csv(csv_file, row)
        rows.append(row)
        best = write_best_hyp(hyp_file, rows)
        LOGGER.info(
            f"Generation {generation}/{config.evolve}: fitness {row.fitness:.5f}, best so far {best.fitness:.5f} "
            f"(generation {best_generation(rows) + 1})"
        )
    best = write_best_hyp(hyp_file, rows)
    plot_evolution(rows, save_dir / PLOT_NAME)
    LOGGER.info(
        f"Hyperparameter evolution finished {len(rows)} generations ({len(rows) - done} now); best fitness "
        f"{best.fitness:.5f} in generation {best_generation(rows) + 1}\nResults saved to {save_dir}\n"
        f"Usage example: python train.py --hyp {hyp_file}"
    )
    return EvolutionResult(
        save_dir,
        len(rows),
        len(rows) - done,
        best_generation(rows) + 1,
        best.fitness,
        dict(best.hyp),
        hyp_file,
        csv_file,
    )
