"""train.py's YOLOv5 conveniences: AutoBatch (--batch-size -1), the default --hyp, the legacy --local_rank flag,
the --freeze line, and option combinations refused under distributed training."""

import argparse

import pytest
import yaml

import train
from models.nn.yolo import Model
from utils.errors import TrainError
from utils.train import options as train_options
from utils.train.autobatch import DEFAULT_BATCH, autobatch, fit_batch_size
from utils.train.setup import freeze_layers

FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--workers", "0", "--noplots"]


# AutoBatch


def test_fit_batch_size_solves_the_memory_line():
    # Memory 1.5 GiB + 0.5 GiB per image: a 9.5 GiB budget fits 16 images.
    fit = fit_batch_size([1, 2, 4, 8], [2.0, 2.5, 3.5, 5.5], budget_gib=9.5, default=16)
    assert fit.slope == pytest.approx(0.5) and fit.intercept == pytest.approx(1.5)
    assert fit.batch_size == 16
    assert fit_batch_size([1, 2, 4], [2.0, 2.5, 3.5], budget_gib=1.0, default=16).batch_size == 1  # never below 1


def test_fit_batch_size_falls_back_when_the_probe_says_nothing():
    assert fit_batch_size([1], [2.0], budget_gib=10, default=16).batch_size == 16  # too few points
    assert fit_batch_size([1, 2, 4], [3.0, 3.0, 3.0], budget_gib=10, default=16).batch_size == 16  # flat


def test_autobatch_on_the_cpu_is_a_note_and_the_default(log):
    import torch

    assert autobatch(Model("yolov5n.yaml"), 64, torch.device("cpu")) == DEFAULT_BATCH
    assert "needs a CUDA device" in log.text


@pytest.mark.slow
def test_batch_size_minus_one_trains_on_the_cpu(shapes_yaml, tmp_path, log):
    args = ["--data", shapes_yaml, *FAST, "--batch-size", "-1", "--epochs", "1", "--project", tmp_path]
    assert train.main(train.parse_opt([str(a) for a in args])) == 0
    saved = yaml.safe_load((tmp_path / "exp" / "opt.yaml").read_text())
    assert saved["batch_size"] == DEFAULT_BATCH  # the resolved batch is what the run (and --resume) records
    assert "using the default batch size 16" in log.text


# --hyp default, --local_rank


@pytest.mark.parametrize("weights", ["", "yolov5n.pt"])
def test_default_hyp_is_scratch_whatever_the_starting_point(weights, tmp_path):
    # As YOLOv5 HEAD: hyp.finetune.yaml (VOC-evolved) cost a third of the mAP as the default from weights.
    opt = train.parse_opt(["--weights", weights, "--cfg", "yolov5n.yaml", "--project", str(tmp_path)])
    config, _, _ = train.setup_run(opt)
    assert config.hyp_file.endswith("hyp.scratch.yaml")
    assert config.hyp["lr0"] == 0.01


def test_explicit_hyp_is_kept(tmp_path):
    opt = train.parse_opt(["--weights", "x.pt", "--hyp", "hyp.scratch.yaml", "--project", str(tmp_path)])
    config, _, _ = train.setup_run(opt)
    assert config.hyp_file == "hyp.scratch.yaml" and config.hyp["lr0"] == 0.01


@pytest.mark.parametrize("argv", [["--local_rank", "1"], ["--local-rank=1"], ["--local_rank=0"]])
def test_legacy_launcher_flag_is_accepted(argv):
    assert train.parse_opt(argv).local_rank in (0, 1)


def test_evolve_flag_defaults_to_300_generations():
    assert train.parse_opt(["--evolve"]).evolve == 300
    assert train.parse_opt(["--evolve", "3"]).evolve == 3
    assert train.parse_opt([]).evolve is None


# Refused combinations


def _opt(**changes) -> argparse.Namespace:
    opt = train.parse_opt(["--cfg", "yolov5n.yaml"])
    for k, v in changes.items():
        setattr(opt, k, v)
    return opt


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"batch_size": -1}, "AutoBatch (--batch-size -1) sizes the batch for one GPU"),
    ],
)
def test_distributed_refusals(changes, message, monkeypatch):
    train_options.check_options(_opt(**changes))  # fine on one process
    monkeypatch.setattr(train_options, "RANK", 0)
    with pytest.raises(TrainError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train_options.check_options(_opt(**changes))


def test_batch_size_minus_two_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        train.parse_opt(["--batch-size", "-2"])
    assert e.value.code == 2
    assert "or -1 for AutoBatch" in capsys.readouterr().err


# --freeze


@pytest.mark.parametrize(
    "freeze, expected", [([10], "layers 0-9 of 0-24 frozen"), ([0, 1, 2, 5], "layers 0-2, 5 of 0-24 frozen")]
)
def test_freeze_says_which_layers(freeze, expected, log):
    model = Model("yolov5n.yaml")
    freeze_layers(model, freeze)
    assert expected in log.text
    frozen = {name.split(".")[1] for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {str(i) for i in (range(freeze[0]) if len(freeze) == 1 else freeze)}


def test_no_freeze_says_nothing(log):
    freeze_layers(Model("yolov5n.yaml"), [0])
    assert "frozen" not in log.text
