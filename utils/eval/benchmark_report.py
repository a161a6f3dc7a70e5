"""benchmark.py's results: one row per format, printed as a table and written as benchmark.csv (numbers as numbers,
empty where not measured) and benchmark.md (the same table, under the lines that say what it was measured on)."""

import csv
from dataclasses import dataclass
from pathlib import Path

from utils.log import LOGGER


@dataclass
class BenchmarkRow:
    """One format's measurements; None where a number was not measured (the reason says why)."""

    format: str  # export.py's --include name, or "pytorch" for the weights themselves
    precision: str = "fp32"  # as exported: fp32, fp16 or int8
    status: str = "ok"  # ok; failed (the reason names the step and its error); skipped (cannot run here)
    path: Path | None = None
    size_mb: float | None = None
    export_s: float | None = None
    map50_95: float | None = None
    map50: float | None = None
    forward_ms: float | None = None  # the median forward pass per image, batch 1
    detect_s: float | None = None  # the whole detect.py command's wall time
    reason: str = ""

    def fail(self, reason: str) -> None:
        self.status, self.reason = "failed", reason

    def skip(self, reason: str) -> None:
        self.status, self.reason = "skipped", reason


# (field, heading, format of a number)
COLUMNS = (
    ("format", "format", ""),
    ("precision", "precision", ""),
    ("status", "status", ""),
    ("file", "file", ""),
    ("size_mb", "size (MB)", ".1f"),
    ("export_s", "export (s)", ".1f"),
    ("map50_95", "mAP50-95", ".4f"),
    ("map50", "mAP50", ".4f"),
    ("forward_ms", "forward (ms/image, median)", ".1f"),
    ("detect_s", "detect.py (s)", ".1f"),
    ("reason", "reason", ""),
)


def _values(row: BenchmarkRow) -> dict:
    """The row's values by column: the file's name for its path, None where nothing was measured."""
    values = {name: getattr(row, name, None) for name, _, _ in COLUMNS}
    values["file"] = row.path.name if row.path else None
    return values


def _text(value, number_format: str) -> str:
    if value is None:
        return "-"
    return format(value, number_format) if number_format else str(value).replace("|", "\\|")


def table_lines(rows: list[BenchmarkRow]) -> list[str]:
    """The rows as a Markdown table (which reads as a table in a terminal too)."""
    lines = ["| " + " | ".join(heading for _, heading, _ in COLUMNS) + " |"]
    lines.append("|" + "|".join(" --- " for _ in COLUMNS) + "|")
    for row in rows:
        values = _values(row)
        lines.append("| " + " | ".join(_text(values[name], fmt) for name, _, fmt in COLUMNS) + " |")
    return lines


def write_report(rows: list[BenchmarkRow], save_dir: Path, context: list[str]) -> None:
    """benchmark.csv and benchmark.md in save_dir, and the table in the log."""
    with open(save_dir / "benchmark.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[name for name, _, _ in COLUMNS])
        writer.writeheader()
        for row in rows:
            values = _values(row)
            writer.writerow({name: "" if values[name] is None else values[name] for name, _, _ in COLUMNS})
    lines = table_lines(rows)
    head = ["# Benchmark", "", *(f"- {line}" for line in context), ""]
    (save_dir / "benchmark.md").write_text("\n".join([*head, *lines, ""]), encoding="utf-8")
    LOGGER.info("\n".join(["", *context, *lines]))
    LOGGER.info(f"Results saved to {save_dir / 'benchmark.csv'} and {save_dir / 'benchmark.md'}")
