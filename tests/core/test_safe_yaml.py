"""utils.safe_yaml: bounded YAML reading (alias bombs, deep nesting, oversized and non-regular files)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from utils.errors import UnsafeYamlError, YoloError
from utils.safe_yaml import MAX_YAML_BYTES, parse_yaml, read_yaml

ROOT = Path(__file__).resolve().parents[2]


def billion_laughs() -> str:
    """The classic alias bomb: 9 levels of 9 aliases each, ~10^9 strings once expanded, in about 550 bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


class DataError(YoloError):
    pass


def test_plain_yaml_reads_as_data(tmp_path):
    file = tmp_path / "d.yaml"
    file.write_text("path: ../datasets/x\ntrain: images/train\nnames:\n  0: person\n  1: car\nnc: 2\n")
    assert read_yaml(file) == {
        "path": "../datasets/x",
        "train": "images/train",
        "names": {0: "person", 1: "car"},
        "nc": 2,
    }


def test_alias_bomb_is_refused_in_one_line(tmp_path):
    text = billion_laughs()
    assert len(text) < 700
    file = tmp_path / "bomb.yaml"
    file.write_text(text)
    with pytest.raises(DataError, match="aliases") as info:
        read_yaml(file, DataError)
    assert "\n" not in str(info.value) and str(file) in str(info.value)


def test_alias_bomb_peak_memory_stays_small(tmp_path):
    """Measured, not assumed: reading the bomb in a fresh interpreter under a 2 GiB address-space limit."""
    file = tmp_path / "bomb.yaml"
    file.write_text(billion_laughs())
    code = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from utils.safe_yaml import read_yaml
        from utils.errors import UnsafeYamlError
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            read_yaml({str(file)!r})
        except UnsafeYamlError as e:
            print("refused", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    """)
    limit = 2 << 30
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_AS, (limit, limit)),
    )
    assert out.returncode == 0, out.stderr
    word, peak_kb = out.stdout.split()
    assert word == "refused" and int(peak_kb) < 20_000  # KiB grown by reading the file: nothing was expanded


def test_deep_nesting_is_refused():
    with pytest.raises(UnsafeYamlError, match="nested deeper"):
        parse_yaml("[" * 5000 + "]" * 5000, "deep.yaml")


def test_oversized_text_and_file_are_refused_before_parsing(tmp_path):
    with pytest.raises(UnsafeYamlError, match="characters long"):
        parse_yaml("a: 1\n" * (MAX_YAML_BYTES // 5 + 1), "big.yaml")
    file = tmp_path / "big.yaml"
    with open(file, "wb") as f:
        f.truncate(MAX_YAML_BYTES + 1)  # sparse: no memory or disk used
    with pytest.raises(UnsafeYamlError, match="bytes"):
        read_yaml(file)


def test_syntax_error_non_utf8_and_missing_file_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(UnsafeYamlError, match="could not be read as YAML") as info:
        read_yaml(bad)
    assert "\n" not in str(info.value)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(UnsafeYamlError, match="not UTF-8"):
        read_yaml(latin)
    with pytest.raises(UnsafeYamlError, match="could not be read"):
        read_yaml(tmp_path / "missing.yaml")


def test_python_tags_are_not_run(tmp_path):
    file = tmp_path / "evil.yaml"
    file.write_text("x: !!python/object/apply:os.system ['touch pwned']\n")
    with pytest.raises(UnsafeYamlError, match="could not be read as YAML"):
        read_yaml(file)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_and_device_files_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer appears
    with pytest.raises(UnsafeYamlError, match="not a regular file"):
        read_yaml(fifo)
    with pytest.raises(UnsafeYamlError, match="not a regular file"):
        read_yaml("/dev/zero")
