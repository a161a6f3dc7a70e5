"""Whole numbers read from files, bounded: every file format the project reads (JSON through utils.safe_json, YAML
through utils.safe_yaml, Python literals in export metadata) turns the digits of a whole number into an int here.

Python reads a whole number of any size, but what we do with it next does not: float() of one beyond 1.8e308 raises
OverflowError, NumPy's int64 another, str() of one over 4300 digits (and int() of such text) ValueError, and
converting a long one costs time quadratic in its length. No id, size, count or seed of ours needs more than 64 bits,
so a whole number outside the int64 range is refused (as text, before it is converted) with one line. A number
written with a fraction or exponent beyond float range (1e400) is refused too, instead of read as infinity (an
explicit YAML .inf stays infinity): int() of it is an OverflowError.
"""

import math

INT_LIMIT = 1 << 63  # |n| < 2**63: what NumPy's int64 holds
_MAX_TEXT = 100  # a 64-bit number in any notation YAML allows (0b + 64 digits, with '_' separators) is shorter


class NumberRangeError(ValueError):
    """A whole number in a file outside the int64 range; the message is one line."""


def _shown(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"


def out_of_range(text: str) -> NumberRangeError:
    """The error for a number written as text that is outside the range numbers of ours have."""
    return NumberRangeError(f"the number {_shown(text)} is outside the range numbers in this file may have (int64)")


def checked_int(value: int, text: str | None = None) -> int:
    """value when it fits in int64, else NumberRangeError (naming text, or the number's size)."""
    if -INT_LIMIT <= value < INT_LIMIT:
        return value
    raise out_of_range(text if text is not None else f"of {value.bit_length()} bits")


def parse_int(text: str) -> int:
    """A whole number written in decimal (JSON's integers): its length checked before it is converted."""
    if len(text) > 20:  # '-' and 19 digits hold every int64
        raise out_of_range(text)
    return checked_int(int(text), text)


def finite_float(text: str) -> float:
    """A number with a fraction or exponent (JSON's, YAML's) as a float; NumberRangeError beyond float range."""
    value = float(text)
    if math.isinf(value):
        raise NumberRangeError(f"the number {_shown(text)} is beyond the range of a float")
    return value


def short_enough(text: str) -> bool:
    """Whether number text (YAML's: '0x..', '1_000', sexagesimal '1:30') is short enough to be converted at all."""
    return len(text) <= _MAX_TEXT


def check_numbers(value, depth: int = 0):
    """value (a literal read by ast.literal_eval: lists, tuples, dicts, sets of numbers and text), with every whole
    number in it checked (NumberRangeError); a literal nested over 100 levels is refused as well."""
    if depth > 100:
        raise NumberRangeError("a literal nested over 100 levels deep")
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return checked_int(value)
    if isinstance(value, dict):
        for key, item in value.items():
            check_numbers(key, depth + 1)
            check_numbers(item, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            check_numbers(item, depth + 1)
    return value
