"""Charts written to a run folder as PNG files, drawn with matplotlib's Agg renderer (no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from utils.eval.coco_protocol import RECALL_THRESHOLDS, smooth
from utils.eval.metrics import DetectionMetrics

MAX_CLASS_LEGEND = 20  # above this many classes, per-class curves are drawn grey and unlabelled
DPI = 150


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _class_lines(ax, x: np.ndarray, ys: np.ndarray, labels: Sequence[str]) -> None:
    """One thin line per class with a value (rows of NaN skipped); labelled only when there are few."""
    rows = [i for i in range(len(ys)) if not np.isnan(ys[i]).all()]
    few = len(rows) <= MAX_CLASS_LEGEND
    for i in rows:
        if few:
            ax.plot(x, ys[i], linewidth=1, label=labels[i])
        else:
            ax.plot(x, ys[i], linewidth=1, color="grey")


def _finish(fig: Figure, ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize="small")
    fig.subplots_adjust(left=0.08, right=0.72, bottom=0.1, top=0.93)  # fixed margins: no extra layout pass


def plot_pr_curve(
    recall: np.ndarray, precision: np.ndarray, ap50: np.ndarray, names: Sequence[str], path: str | Path
) -> Path:
    """Precision against recall per class (rows of precision, NaN rows skipped) and their mean, at IoU 0.5."""
    fig = Figure(figsize=(9, 6))
    ax = fig.subplots()
    _class_lines(ax, recall, precision, [f"{n} {a:.3f}" for n, a in zip(names, ap50)])
    if not np.isnan(precision).all():
        ax.plot(
            recall,
            np.nanmean(precision, 0),
            linewidth=3,
            color="blue",
            label=f"all classes {np.nanmean(ap50):.3f} mAP@0.5",
        )
    _finish(fig, ax, "Recall", "Precision", "Precision-Recall Curve")
    return _save(fig, path)


def plot_metric_curve(
    conf: np.ndarray, values: np.ndarray, names: Sequence[str], path: str | Path, ylabel: str = "F1"
) -> Path:
    """A metric (F1, precision or recall) against confidence per class and its smoothed mean."""
    fig = Figure(figsize=(9, 6))
    ax = fig.subplots()
    _class_lines(ax, conf, values, list(names))
    if not np.isnan(values).all():
        mean = smooth(np.nanmean(values, 0), 0.05)
        best = int(mean.argmax())
        ax.plot(conf, mean, linewidth=3, color="blue", label=f"all classes {mean[best]:.2f} at {conf[best]:.3f}")
    _finish(fig, ax, "Confidence", ylabel, f"{ylabel}-Confidence Curve")
    return _save(fig, path)


def plot_confusion_matrix(matrix: np.ndarray, names: Sequence[str], path: str | Path, normalize: bool = True) -> Path:
    """The (nc + 1)^2 confusion matrix, each true-class column normalised to sum to 1 when normalize."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if normalize:
        matrix = matrix / (matrix.sum(0, keepdims=True) + 1e-9)
    shown = np.where(matrix < 0.005, np.nan, matrix)  # blank the near-empty cells
    n = len(matrix)
    labels = [*names, "background"] if n - 1 == len(names) else [str(i) for i in range(n)]
    fig = Figure(figsize=(12, 9))
    ax = fig.subplots()
    image = ax.imshow(shown, cmap="Blues", vmin=0.0, vmax=1.0 if normalize else None)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if n <= 100:
        ax.set_xticks(range(n), labels, rotation=90, fontsize=max(4, min(10, 400 // n)))
        ax.set_yticks(range(n), labels, fontsize=max(4, min(10, 400 // n)))
    if n < 30:
        for (i, j), v in np.ndenumerate(shown):
            if not np.isnan(v):
                ax.text(
                    j,
                    i,
                    f"{v:.2f}" if normalize else f"{int(v)}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v > 0.5 * np.nanmax(shown) else "black",
                )
    ax.set_xlabel("True")
    ax.set_ylabel("Predicted")
    ax.set_title("Confusion Matrix" + (" (normalised by true class)" if normalize else ""))
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.15, top=0.95)
    return _save(fig, path)


def plot_evaluation(metrics: DetectionMetrics, save_dir: str | Path) -> list[Path]:
    """PR_curve.png, F1_curve.png, P_curve.png, R_curve.png and confusion_matrix.png in save_dir."""
    save_dir = Path(save_dir)
    names = metrics.names
    files = [
        plot_pr_curve(RECALL_THRESHOLDS, metrics.pr_precision, metrics.ap50, names, save_dir / "PR_curve.png"),
        plot_metric_curve(metrics.conf_grid, metrics.f1_curve, names, save_dir / "F1_curve.png", "F1"),
        plot_metric_curve(metrics.conf_grid, metrics.p_curve, names, save_dir / "P_curve.png", "Precision"),
        plot_metric_curve(metrics.conf_grid, metrics.r_curve, names, save_dir / "R_curve.png", "Recall"),
    ]
    if metrics.confusion is not None:
        files.append(plot_confusion_matrix(metrics.confusion, names, save_dir / "confusion_matrix.png"))
    return files


# ---------------------------------------------------------------------------------------------------------------------
# Training charts: label statistics (labels.jpg) and training curves (results.png)


def plot_labels(labels: np.ndarray, names: Sequence[str], save_dir: str | Path) -> Path:
    """labels.jpg: instances per class, box shapes drawn at a common centre, centre and size histograms.

    labels: (n, 5) rows [class, cx, cy, w, h], normalised.
    """
    labels = np.asarray(labels, dtype=np.float64).reshape(-1, 5)
    cls, boxes = labels[:, 0].astype(int), labels[:, 1:]
    nc = max(len(names), int(cls.max()) + 1 if len(cls) else 0)
    fig = Figure(figsize=(8, 8))
    axes = fig.subplots(2, 2).ravel()

    counts = np.bincount(cls, minlength=nc)
    axes[0].bar(range(nc), counts, color="tab:blue", alpha=0.8)
    axes[0].set_ylabel("instances")
    if 0 < nc <= 30:
        axes[0].set_xticks(
            range(nc), [str(n) for n in list(names) + [str(i) for i in range(len(names), nc)]], rotation=90, fontsize=8
        )
    else:
        axes[0].set_xlabel("classes")

    # Up to 1000 boxes outlined around the image centre, so their shapes and sizes compare at a glance.
    w, h = boxes[:1000, 2], boxes[:1000, 3]
    x1, y1, x2, y2 = 0.5 - w / 2, 0.5 - h / 2, 0.5 + w / 2, 0.5 + h / 2
    outlines = np.stack([np.stack(p, 1) for p in ((x1, y1), (x2, y1), (x2, y2), (x1, y2), (x1, y1))], 1)  # (n, 5, 2)
    axes[1].add_collection(LineCollection(list(outlines), linewidths=0.4, alpha=0.3, colors="tab:blue"))
    axes[1].set_xlim(0, 1)
    axes[1].set_ylim(1, 0)
    axes[1].set_aspect("equal")
    axes[1].set_title("box shapes")

    for ax, (i, j), (xlabel, ylabel) in zip(axes[2:], ((0, 1), (2, 3)), (("x", "y"), ("width", "height"))):
        if len(boxes):
            ax.hist2d(boxes[:, i], boxes[:, j], bins=50, range=((0, 1), (0, 1)), cmap="Blues")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    axes[2].set_ylim(1, 0)  # image orientation: y grows downwards
    fig.tight_layout()
    return _save(fig, Path(save_dir) / "labels.jpg")


def _moving_average(y: np.ndarray, window: int = 5) -> np.ndarray:
    """Centred moving average with edge padding (same length as y), for a trend line over noisy epochs."""
    if len(y) < 3:
        return y
    window = min(window, len(y) - (len(y) % 2 == 0))
    padded = np.pad(y, window // 2, mode="edge")
    return np.convolve(padded, np.ones(window) / window, mode="valid")


def plot_results(csv_file: str | Path) -> Path:
    """results.png beside results.csv: one panel per loss/metric column against epoch, with a smoothed trend."""
    import csv

    csv_file = Path(csv_file)
    with open(csv_file, newline="", encoding="utf-8") as f:
        rows = [[c.strip() for c in r] for r in csv.reader(f) if r]
    header = rows[0]
    values = np.array([[float(c) for c in r] for r in rows[1:]], dtype=np.float64).reshape(-1, len(header))
    # The top row: training losses, precision, recall; the bottom: validation losses, mAP50, mAP50-95 (a segment
    # run's mask metrics beside the box ones). The loss columns are read from the header (YOLOv5: box, obj, cls;
    # anchor-free: box, cls, dfl; segment: and seg).
    train = [c for c in header if c.startswith("train/")]
    val = [c for c in header if c.startswith("val/")]
    top = [*train, "metrics/precision", "metrics/recall", "metrics/mask_precision", "metrics/mask_recall"]
    bottom = [*val, "metrics/mAP50", "metrics/mAP50-95", "metrics/mask_mAP50", "metrics/mask_mAP50-95"]
    top, bottom = [c for c in top if c in header], [c for c in bottom if c in header]
    width = max(len(top), len(bottom), 5)
    columns = [*top, *[None] * (width - len(top)), *bottom]
    fig = Figure(figsize=(12 * width / 5, 6))
    axes = fig.subplots(2, width).ravel()
    epochs = values[:, header.index("epoch")] if "epoch" in header else np.arange(len(values))
    for ax, name in zip(axes, columns):
        if name is None:
            continue
        y = values[:, header.index(name)]
        ax.plot(epochs, y, marker=".", linewidth=2, markersize=8, label="results")
        ax.plot(epochs, _moving_average(y), ":", linewidth=2, label="smooth")
        ax.set_title(name, fontsize=12)
    axes[0].legend()
    fig.tight_layout()
    return _save(fig, csv_file.with_name("results.png"))


# ---------------------------------------------------------------------------------------------------------------------
# Hyperparameter evolution (evolve.png)


def plot_evolve(names: Sequence[str], values: np.ndarray, fitness: np.ndarray, path: str | Path) -> Path:
    """evolve.png: one panel per hyperparameter, each generation's value against its fitness, the best marked.

    values: (generations, len(names)); fitness: (generations,)."""
    values = np.asarray(values, dtype=np.float64).reshape(len(fitness), len(names))
    fitness = np.asarray(fitness, dtype=np.float64)
    best = int(fitness.argmax())
    columns = min(len(names), 6)
    rows = -(-len(names) // columns)
    fig = Figure(figsize=(2.5 * columns, 2.4 * rows))
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    # Fitter generations drawn last (on top), coloured by fitness, so the good region is not hidden.
    order = fitness.argsort()
    for i, (ax, name) in enumerate(zip(axes, names)):
        ax.scatter(
            values[order, i], fitness[order], c=fitness[order], cmap="viridis", s=12, alpha=0.8, edgecolors="none"
        )
        ax.plot(values[best, i], fitness[best], "k+", markersize=14, markeredgewidth=2)
        ax.set_title(f"{name} = {values[best, i]:.3g}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.locator_params(axis="x", nbins=4)  # small panels: few ticks, so long values do not overlap
        if i % columns == 0:
            ax.set_ylabel("fitness", fontsize=8)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return _save(fig, path)
