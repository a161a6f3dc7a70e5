"""The project's logger: plain one-line messages on stdout, warnings prefixed so they stand out."""

import logging
import sys

from utils.text import escape_controls

LOGGER = logging.getLogger("yolo")
PROGRESS_BAR = "{l_bar}{bar:10}{r_bar}"  # every tqdm bar of the project: a 10-character bar between the counts


class PlainTextFormatter(logging.Formatter):
    """Bare messages whose control characters, but newlines and tabs, are shown escaped ('\\x1b[2J'): a last line of
    defence for text from a file (a class name, a path) that reaches a message unchecked; such text cannot clear the
    screen or overwrite a line."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record), keep="\n\t")


def set_logging(verbose: bool = True) -> None:
    """Send the 'yolo' logger to stdout as bare messages (INFO, or WARNING when not verbose)."""
    if not LOGGER.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(PlainTextFormatter("%(message)s"))
        LOGGER.addHandler(handler)
        LOGGER.propagate = False
    LOGGER.setLevel(logging.INFO if verbose else logging.WARNING)


def speed_line(speed_ms: tuple[float, float, float], shape: str) -> str:
    """YOLOv5's speed line of detect.py and test.py: per-image milliseconds of each stage, at the input shape(s)."""
    pre, inference, nms = speed_ms
    return f"Speed: {pre:.1f}ms pre-process, {inference:.1f}ms inference, {nms:.1f}ms NMS per image at {shape}"


def one_line(value: object) -> str:
    """A message (an exception's, or any text) folded onto one line; an exception without a message gives its
    class name."""
    return " ".join(str(value).split()) or (value.__class__.__name__ if isinstance(value, BaseException) else "")


set_logging()
