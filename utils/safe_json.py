"""JSON text parsed with bounds: every JSON the project reads (COCO annotations and predictions, export metadata)
goes through parse_json.

Bounds. Numbers go through utils.safe_numbers (whole numbers within int64, refused as text before conversion;
others within float range: 1e400 is refused, not read as infinity). Memory: parsed
JSON takes several times its text, and far more for text made of tiny pieces: `{},` is 3 bytes of text but a
72-byte dict and its list slot (a 100 MB file of them took 2.6 GB), `"ab",` a 59-byte string. So what a text can
build is estimated from a fast count of its braces, colons, brackets, quotes and commas before it is parsed, and
a text that would take more than MAX_EXPANSION times its size is refused. A reader
that needs only some keys (the COCO training reader) names them: every other key is dropped as each object is
parsed, so the parts it never reads (segmentation polygons, most of a COCO file) are freed at once.
"""

import json

from utils.safe_numbers import finite_float, parse_int

MAX_EXPANSION = 10  # parsed JSON may take 10x its text (COCO's instances files: 4-6x by the estimate below)
_SLACK = 64 << 20  # small files are never refused for their shape
# What each piece takes once parsed, with its slot in its parent: a dict, each of its keys (a colon: the key text
# itself is shared by json's parser), a list, a string value (a pair of quotes that is not a key), a number (a
# comma separates one value at most; small ints are shared). Real COCO files, compact or spaced, with or without
# segmentations, estimate at 4-6x (and take 3.5-4x); `{},`, `[],`, `{"a":0},` or `"ab",` at 16-45x.
_DICT_BYTES, _KEY_BYTES, _LIST_BYTES, _STRING_BYTES, _VALUE_BYTES = 120, 24, 56 + 8, 56 + 8, 16
_EMPTY: dict = {}  # every object left without keys is this one dict (readers only look into it)


class JsonError(ValueError):
    """Text that is not JSON, nested too deeply, or shaped to take far more memory than its size; one line that
    reads after 'the file is': "not valid JSON (...)"."""


def parsed_bytes(text: str) -> int:
    """An estimate of the memory a JSON text takes once parsed, from a fast count of its braces, colons, brackets,
    quotes and commas (those inside strings count too)."""
    keys = text.count(":")
    strings = max(0, text.count('"') // 2 - keys)
    pieces = (text.count("{"), keys, text.count("["), strings, text.count(","))
    sizes = (_DICT_BYTES, _KEY_BYTES, _LIST_BYTES, _STRING_BYTES, _VALUE_BYTES)
    return sum(n * size for n, size in zip(pieces, sizes))


def _keeping(keys: frozenset[str]):
    def hook(pairs: list[tuple[str, object]]) -> dict:
        kept = {k: v for k, v in pairs if k in keys}
        return kept if kept else _EMPTY

    return hook


def parse_json(text: str, keep: frozenset[str] | None = None):
    """The data of a JSON text; with keep, objects hold only those keys. JsonError for text that is not JSON or
    would take too much memory, NumberRangeError for a whole number outside int64 or a number beyond float range
    (both ValueErrors, one line)."""
    needed = parsed_bytes(text)
    if needed > MAX_EXPANSION * len(text) + _SLACK:
        raise JsonError(
            f"made of {text.count('{')} objects, {text.count('[')} lists and {text.count(',')} values, which would "
            f"take about {needed >> 20} MiB parsed, more than {MAX_EXPANSION}x its {len(text)} characters: not parsed"
        )
    try:
        hook = _keeping(keep) if keep else None
        return json.loads(text, parse_int=parse_int, parse_float=finite_float, object_pairs_hook=hook)
    except json.JSONDecodeError as e:  # truncated or malformed: where it broke
        raise JsonError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise JsonError("nested too deeply to read") from None
