"""Command-line plumbing shared by train.py, test.py and detect.py: range-checked flags and one-line errors.

A value out of range is refused while the arguments are parsed, with one line naming the flag and the valid
range, e.g. ``ERROR: argument --conf-thres: must be in [0, 1], got 2.0`` (exit code 2, as argparse uses).
"""

import argparse
import errno
import math
import sys
from collections.abc import Callable

import torch

from utils.errors import YoloError
from utils.log import LOGGER, one_line


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default, except where a default says nothing (on/off flags, None, '')."""

    def _get_help_string(self, action):
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
            return action.help
        if action.default in (None, "", [], argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line (no usage block), exit code 2; --help shows defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """Print the error as one line and exit 2."""
        sys.stderr.write(f"ERROR: {one_line(message)} (see {self.prog} --help)\n")
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


def _out_of_memory(error: BaseException) -> str:
    """torch's out-of-memory text spans lines of allocator statistics: keep its first sentence."""
    first = str(error).strip().split(". ")[0].split("\n")[0] or error.__class__.__name__
    return f"out of memory ({first}): try a smaller --batch-size or --img-size; saved files are intact"


def run_cli(command: Callable[[], int | None]) -> int:
    """Run a command's body: a bad input, an OS error or out-of-memory ends in one ERROR line and exit code 1."""
    try:
        return command() or 0
    except YoloError as e:
        message = one_line(e)
    except (torch.OutOfMemoryError, MemoryError) as e:
        message = _out_of_memory(e)
    except OSError as e:  # e.g. an unwritable --project or a full disk; checkpoints are written atomically
        full = "the disk is full (ENOSPC): " if e.errno == errno.ENOSPC else ""
        message = f"{full}{e.__class__.__name__}: {one_line(e)}"
    except KeyboardInterrupt:
        LOGGER.error("Interrupted")
        return 130
    LOGGER.error(f"ERROR: {message}")
    return 1
