"""Text read from a file (class names in checkpoints and export metadata), checked before it reaches the terminal or
a file name.

A class name is printed in every detect.py line and used as a crops/ folder name. A newline in one forges whole log
lines (``person\\nERROR: ...``), an ANSI escape clears the screen or recolours it, a carriage return overwrites
what was printed, a bidirectional override reverses a line. Such names are refused where names are read
(``names_problem``); the logger escapes whatever such character still reaches it (``escape_controls``).
"""

import unicodedata

MAX_NAME_CHARS = 256  # one class name (a label such as 'person')
_MAX_NAME_BITS = 860  # whole numbers of more bits have over 256 digits: refused before str(), which refuses huge ones

# Format characters that reorder or hide text on a terminal: the bidirectional embeddings, overrides and isolates.
_BIDI_CONTROLS = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))
# Unicode categories that are never shown as a glyph: controls (C0, DEL, C1), line and paragraph separators.
_CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def is_control(char: str) -> bool:
    """Whether one character changes how a terminal shows text instead of being shown (newline, ESC, ...)."""
    return char in _BIDI_CONTROLS or unicodedata.category(char) in _CONTROL_CATEGORIES


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str, keep: str = "") -> str:
    """text with every control character (but those in keep) written as a visible escape: '\\x1b', '\\x0a'."""
    if text.isprintable() and not any(c in _BIDI_CONTROLS for c in text):  # the usual case, checked in C
        return text
    return "".join(_escaped(c) if c not in keep and is_control(c) else c for c in text)


def control_problem(text: str) -> str | None:
    """None when text holds no control character, else which one and where: "a control character (\\x0a) at
    position 6"."""
    for i, char in enumerate(text):
        if is_control(char):
            return f"a control character ({_escaped(char)}) at position {i}"
    return None


def names_problem(names: list[str]) -> str | None:
    """None when every class name is plain text, else one line naming the first one that is not (escaped)."""
    for i, name in enumerate(names):
        problem = control_problem(name)
        if problem:
            return (
                f"class name {i} '{escape_controls(name)}' holds {problem}: class names are printed and used as folder "
                "names, so they must be plain text"
            )
    return None


def class_names(names: list) -> tuple[list[str], str | None]:
    """Class names as strings, with None, or with why they cannot be used: each must be a string or a whole number
    (YOLOv5 allows both) of at most MAX_NAME_CHARS characters (a nested list would print as an ever larger string),
    and plain text (names_problem). The caller raises its own error with the reason."""
    for i, name in enumerate(names):
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            return [], f"class name {i} is a {type(name).__name__}, not a string"
        if isinstance(name, int) and name.bit_length() > _MAX_NAME_BITS:
            return [], f"class name {i} is a number of over {MAX_NAME_CHARS} digits"
        if len(str(name)) > MAX_NAME_CHARS:
            return [], f"class name {i} is {len(str(name))} characters long (at most {MAX_NAME_CHARS})"
    text = [str(n) for n in names]
    return text, names_problem(text)
