"""The project's logger: plain one-line messages on stdout, warnings prefixed so they stand out."""

import logging
import sys

LOGGER = logging.getLogger("yolo")


def set_logging(verbose: bool = True) -> None:
    """Send the 'yolo' logger to stdout as bare messages (INFO, or WARNING when not verbose)."""
    if not LOGGER.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOGGER.addHandler(handler)
        LOGGER.propagate = False
    LOGGER.setLevel(logging.INFO if verbose else logging.WARNING)


def one_line(error: BaseException) -> str:
    """An exception's message folded onto one line (its class name when it has no message)."""
    return " ".join(str(error).split()) or error.__class__.__name__


set_logging()
