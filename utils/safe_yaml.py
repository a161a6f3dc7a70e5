"""YAML files read as plain data with bounds: every YAML the project reads (data, --hyp, --cfg, an export's
metadata) goes through here.

PyYAML's safe loader runs no code, but it still expands aliases: a 550-byte "billion laughs" file of nested
aliases builds billions of list entries and takes all memory. Our YAML files never need aliases, so an alias is
refused outright; the file's size and nesting depth are capped before and while it is parsed. Whole numbers are
bounded as in every file format (utils.safe_numbers: int64, their text's length checked before conversion).
"""

import math
from pathlib import Path

import yaml

from utils.errors import UnsafeYamlError, YoloError
from utils.log import one_line
from utils.safe_numbers import checked_int, out_of_range, short_enough

MAX_YAML_BYTES = 4 << 20  # a data YAML with LVIS' 1203 names is ~40 KB; 4 MiB leaves room for any real file
MAX_YAML_DEPTH = 64  # our files nest 3 levels deep; a deep [[[[...]]]] would otherwise hit Python's recursion limit


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (*name) and nesting deeper than MAX_YAML_DEPTH."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in this file", mark)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node):
        """A whole number (decimal, 0x, 0o, 0b, 1_000, sexagesimal 1:30) within int64, its text's length checked
        before it is converted (a 4 MB '1:1:1:...' would take minutes)."""
        text = self.construct_scalar(node)
        try:
            if not short_enough(text):
                raise out_of_range(text)
            return checked_int(super().construct_yaml_int(node), text)
        except ValueError as e:  # NumberRangeError, or int()'s own refusal
            raise yaml.constructor.ConstructorError(None, None, one_line(e), node.start_mark) from None

    def construct_yaml_float(self, node):
        """A float; a finite number written beyond float range (1.0e+400) is refused, an explicit .inf is kept."""
        value = super().construct_yaml_float(node)
        text = self.construct_scalar(node)
        if math.isinf(value) and "inf" not in text.lower():
            message = f"the number {text[:24]} is beyond the range of a float"
            raise yaml.constructor.ConstructorError(None, None, message, node.start_mark)
        return value


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)


def parse_yaml(text: str, source: str, error: type[YoloError] = UnsafeYamlError):
    """The data in a YAML text (from `source`, named in messages), or `error` with a one-line message."""
    if len(text) > MAX_YAML_BYTES:
        raise error(f"{source} is {len(text)} characters long: more than a YAML file of ours can be ({MAX_YAML_BYTES})")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass, aliases refused
    except yaml.YAMLError as e:
        raise error(f"{source} could not be read as YAML: {one_line(e)}") from None
    except RecursionError:
        raise error(f"{source} could not be read as YAML: nested too deeply") from None


def read_yaml(path: str | Path, error: type[YoloError] = UnsafeYamlError):
    """The data in a YAML file, its size checked before it is read; `error` (one line) for anything unusable."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise error(f"{path} is not a regular file")
        if size > MAX_YAML_BYTES:
            raise error(f"{path} is {size} bytes: more than a YAML file of ours can be ({MAX_YAML_BYTES} bytes)")
        with open(path, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)  # a file that grew since stat() is still read only this far
        text = raw.decode("utf-8")
    except OSError as e:
        raise error(f"{path} could not be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise error(f"{path} is not UTF-8 text: {e.reason} at byte {e.start}") from None
    return parse_yaml(text, str(path), error)
