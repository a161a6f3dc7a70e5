"""Text from files before it reaches the terminal: class names with control characters are refused with the name
escaped; the logger shows any control character that still reaches it as an escape."""

import io
import logging

import pytest

from utils.log import PlainTextFormatter
from utils.text import class_names, control_problem, escape_controls, names_problem

HOSTILE = {
    "newline forging a line": ("person\nERROR: forged line", "\\x0a"),
    "carriage return": ("car\rcat", "\\x0d"),
    "ANSI clear screen": ("bicycle\x1b[2J\x1b[H", "\\x1b"),
    "bell": ("dog\x07", "\\x07"),
    "NUL": ("a\x00b", "\\x00"),
    "DEL": ("a\x7fb", "\\x7f"),
    "C1 control (CSI)": ("a\x9b2Jb", "\\x9b"),
    "right-to-left override": ("gpj.\u202eexe", "\\u202e"),
    "line separator": ("a\u2028b", "\\u2028"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_names_with_control_characters_are_refused_with_the_name_escaped(case):
    name, shown = HOSTILE[case]
    problem = names_problem(["ok", name])
    assert problem is not None and problem.startswith("class name 1 '") and shown in problem
    assert problem.isprintable(), problem  # the message itself cannot forge or clear anything


@pytest.mark.parametrize("name", ["person", "traffic light", "hair drier", "日本語", "café", "a/b", "x" * 256, ""])
def test_plain_names_pass(name):
    assert names_problem([name]) is None and control_problem(name) is None
    assert escape_controls(name) == name


def test_escape_keeps_what_it_is_told_to():
    assert escape_controls("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"
    assert escape_controls("a\nb") == "a\\x0ab"


def test_logger_shows_control_characters_escaped_but_keeps_line_breaks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(PlainTextFormatter("%(message)s"))
    logger = logging.getLogger("yolo.test_text")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("1 bicycle\x1b[2J\x1b[H, 2 cars\rX\nnext line\tend")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == "1 bicycle\\x1b[2J\\x1b[H, 2 cars\\x0dX\nnext line\tend\n"


def test_class_names_are_short_plain_strings_or_whole_numbers():
    """The one check both checkpoints and export metadata run on their class names."""
    assert class_names(["person", 7, "dog"]) == (["person", "7", "dog"], None)
    assert class_names([["cat"], "dog"])[1] == "class name 0 is a list, not a string"
    assert class_names(["cat", True])[1] == "class name 1 is a bool, not a string"
    assert class_names(["c" * 257])[1] == "class name 0 is 257 characters long (at most 256)"
    assert class_names(["c" * 256])[1] is None
    assert class_names([10**300])[1] == "class name 0 is a number of over 256 digits"  # str() would refuse it
    names, problem = class_names(["ok", "bad\nERROR: forged"])
    assert names == ["ok", "bad\nERROR: forged"] and "class name 1 'bad\\x0aERROR: forged'" in problem
