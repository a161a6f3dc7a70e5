"""Each command's options are declared once: its flags (names and defaults) are exactly its options dataclass's
fields, both ways. detect.py: DetectCommand; test.py: TestCommand; export.py: ExportCommand; train.py: TrainConfig
(whose hyp holds the values of the --hyp file, named in hyp_file, and whose save_dir a run resolves)."""

import dataclasses

import pytest

import detect
import export
import test as yolo_test
import train
from utils.eval.options import TestCommand
from utils.train.config import TrainConfig


def _field_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _same(a, b) -> bool:
    """Equal, with lists and tuples alike (a flag's nargs default and a frozen field's tuple)."""
    norm = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
    return norm(a) == norm(b)


@pytest.mark.parametrize(
    "parse, cls",
    [
        (detect.parse_opt, detect.DetectCommand),
        (yolo_test.parse_opt, TestCommand),
        (export.parse_opt, export.ExportCommand),
    ],
    ids=["detect", "test", "export"],
)
def test_flags_are_the_dataclass_fields(parse, cls):
    flags, fields = vars(parse([])), _field_defaults(cls)
    assert set(flags) == set(fields), set(flags) ^ set(fields)
    differ = {k: (flags[k], fields[k]) for k in flags if not _same(flags[k], fields[k])}
    assert not differ


def test_train_flags_are_train_config_fields():
    flags, fields = vars(train.parse_opt([])), _field_defaults(TrainConfig)
    flags.pop("local_rank")  # accepted for torch.distributed.launch only; the rank is read from the environment
    resolved = {"hyp_file", "save_dir"}  # the --hyp file's name, and the run folder a run resolves
    assert set(flags) == set(fields) - resolved, set(flags) ^ (set(fields) - resolved)
    assert flags.pop("hyp") == "" and fields["hyp_file"] == ""  # '' : the model family's default file
    differ = {k: (flags[k], fields[k]) for k in flags if not _same(flags[k], fields[k])}
    assert not differ


def test_a_planted_mismatch_is_caught():
    """The check can fail: a dataclass with one more field, or another default, differs from the flags."""
    extra = dataclasses.make_dataclass("Extra", [("new_option", int, 1)], bases=(export.ExportCommand,))
    assert set(vars(export.parse_opt([]))) != set(_field_defaults(extra))
    other = dataclasses.make_dataclass("Other", [("batch_size", int, 2)], bases=(export.ExportCommand,))
    assert not _same(vars(export.parse_opt([]))["batch_size"], _field_defaults(other)["batch_size"])


@pytest.mark.parametrize("module", [detect, yolo_test, export, train], ids=["detect", "test", "export", "train"])
def test_every_flag_has_help(module, monkeypatch, capsys):
    """--help is complete: every flag says what it does (legacy flags hidden with argparse.SUPPRESS excepted)."""
    import argparse

    captured = {}
    real_parse = argparse.ArgumentParser.parse_args

    def keep(self, *args, **kwargs):
        captured["parser"] = self
        return real_parse(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    module.parse_opt([])
    silent = [a.option_strings[0] for a in captured["parser"]._actions if a.option_strings and not a.help]
    assert not silent, f"flags without help: {silent}"
