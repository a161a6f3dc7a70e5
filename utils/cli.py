"""Command-line checks shared by train.py, test.py and detect.py: range-checked argparse types, one-line errors.

A value out of range is refused while the arguments are parsed, with one line naming the flag and the valid
range, e.g. ``ERROR: argument --conf-thres: must be in [0, 1], got 2.0`` (exit code 2, as argparse uses).
"""

import argparse
import math
import sys
from collections.abc import Callable


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line (no usage block), exit code 2."""

    def error(self, message: str):
        """Print the error as one line and exit 2."""
        sys.stderr.write(f"ERROR: {' '.join(message.split())} (see {self.prog} --help)\n")
        sys.exit(2)


def _number(text: str, kind: type) -> float | int:
    """text as a finite int or float, or ArgumentTypeError."""
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def float_in(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a float in [low, high]."""

    def parse(text: str) -> float:
        value = _number(text, float)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low:g}, {high:g}], got {value:g}")
        return value

    return parse


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer >= low (and <= high when given)."""

    def parse(text: str) -> int:
        value = _number(text, int)
        if value < low or (high is not None and value > high):
            bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {value}")
        return value

    return parse
