"""Command-line plumbing shared by train.py, test.py and detect.py: range-checked flags and one-line errors.

A value out of range is refused while the arguments are parsed, with one line naming the flag and the valid
range, e.g. ``ERROR: argument --conf-thres: must be in [0, 1], got 2.0`` (exit code 2, as argparse uses).
"""

import argparse
import errno
import math
import signal
import sys
import threading
from collections.abc import Callable

from utils.errors import YoloError
from utils.log import LOGGER, one_line
from utils.text import escape_controls


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
        sys.stderr.write(f"ERROR: {escape_controls(one_line(message))} (see {self.prog} --help)\n")
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


# How running out of memory reads on each device and library that raises something other than MemoryError or
# torch.OutOfMemoryError: torch's CPU allocator, MPS and XPU (RuntimeError), OpenVINO (std::bad_alloc), ONNX Runtime
# ("Failed to allocate memory for requested buffer"), OpenCV ("Insufficient memory").
_OUT_OF_MEMORY_MARKS = (
    "DefaultCPUAllocator: can't allocate memory",
    "out of memory",
    "std::bad_alloc",
    "Failed to allocate memory",
    "Insufficient memory",
)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether error says that an allocation failed, on any device: MemoryError, torch.OutOfMemoryError, ENOMEM,
    or a library's own exception whose text says so (torch's CPU allocator raises a plain RuntimeError)."""
    torch = sys.modules.get("torch")  # not imported here: test.py --pred-json runs without torch
    if isinstance(error, MemoryError) or (torch is not None and isinstance(error, torch.OutOfMemoryError)):
        return True
    if isinstance(error, OSError):
        return error.errno == errno.ENOMEM
    text = str(error)
    return any(mark.lower() in text.lower() for mark in _OUT_OF_MEMORY_MARKS)


def _out_of_memory(error: BaseException) -> str:
    """One line for any out-of-memory error. torch's text spans lines of allocator statistics, and its CPU
    allocator's starts with '[enforce fail at alloc_cpu.cpp:117] data.': keep the sentence that says what failed."""
    text = str(error).strip()
    if "DefaultCPUAllocator:" in text:
        text = "DefaultCPUAllocator:" + text.split("DefaultCPUAllocator:", 1)[1]
    first = one_line(text.split(". ")[0].split("\n")[0]) or error.__class__.__name__
    return f"out of memory ({first}): try a smaller --batch-size or --img-size; saved files are intact"


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a job scheduler, a container stopping) raised as an interrupt, so that it unwinds the command
    exactly as Ctrl-C does: the same finally blocks remove what the run created (an export's scratch folder), the
    same handlers keep what it saved."""


def _raise_terminated(signum, _frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated(f"terminated by signal {signum} (SIGTERM)")


def _terminate_as_interrupt() -> Callable[[], None]:
    """Handle SIGTERM like SIGINT while a command runs; the function that restores the earlier handler. Signal
    handlers belong to the main thread: elsewhere (a command run from a worker thread), or where SIGTERM is ignored,
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:  # the parent chose to ignore it (as nohup does SIGHUP)
        return lambda: None
    earlier = signal.signal(signal.SIGTERM, _raise_terminated)
    return lambda: signal.signal(signal.SIGTERM, earlier)


def run_cli(command: Callable[[], int | None]) -> int:
    """Run a command's body: a bad input, an OS error or out-of-memory ends in one ERROR line and exit code 1;
    Ctrl-C and SIGTERM end it through the same clean-up, with exit code 130 or 143 (128 + the signal's number)."""
    restore = _terminate_as_interrupt()
    try:
        return _run(command)
    finally:
        restore()


def _error_line(error: Exception) -> str | None:
    """The ERROR line's text for out-of-memory and OS errors (an unwritable --project, a full disk: checkpoints are
    written atomically); None for anything else, which is a bug whose traceback is the report."""
    if is_out_of_memory(error):
        return _out_of_memory(error)
    if isinstance(error, OSError):
        full = "the disk is full (ENOSPC): " if error.errno == errno.ENOSPC else ""
        return f"{full}{error.__class__.__name__}: {one_line(error)}"
    return None


def _run(command: Callable[[], int | None]) -> int:
    try:
        return command() or 0
    except YoloError as e:
        message = one_line(e)
    except Terminated:
        LOGGER.error("Terminated (SIGTERM)")
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        LOGGER.error("Interrupted")
        return 130
    except Exception as e:
        message = _error_line(e)
        if message is None:
            raise
    LOGGER.error(f"ERROR: {message}")
    return 1
