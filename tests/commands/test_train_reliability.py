"""train.py on bad input: flags, tiny or unlabelled datasets, broken model YAMLs, --freeze, crafted resume
checkpoints, a full disk. Each ends in one ERROR line (exit 1), or exit 2 for a flag, never in a traceback."""

import errno
import shutil

import pytest
import torch

import train
from models.nn.yolo import Model
from models.weights.checkpoint import fp16_state_dict
from utils.data.shapes import generate_shapes, write_data_yaml
from utils.files import REPO_ROOT
from utils.train import setup as train_setup
from utils.train.callbacks import Callback

NAMES = "[circle, square, triangle, star, cross]"
FAST = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "64", "--workers", "0", "--noplots", "--epochs", "1"]


@pytest.fixture(scope="module")
def tiny_yaml(tmp_path_factory):
    """3 train and 2 val shapes images of 64 px, fewer than the default --batch-size 16."""
    folder = tmp_path_factory.mktemp("tiny")
    root = generate_shapes(folder / "shapes", n_train=3, n_val=2, img_size=64)
    return write_data_yaml(root, folder / "tiny.yaml")


def _train(*args, callbacks: list[Callback] | None = None) -> int:
    return train.main(train.parse_opt([str(a) for a in args]), callbacks=callbacks)


class OnStart(Callback):
    """Calls a function with the trainer once set-up is done."""

    def __init__(self, function):
        self.function = function

    def on_train_start(self, trainer):
        self.function(trainer)


def _one_error(log) -> str:
    errors = [m for m in log.messages if m.startswith("ERROR")]
    assert len(errors) == 1, errors
    assert "\n" not in errors[0] and "Traceback" not in errors[0]
    return errors[0]


# ---------------------------------------------------------------------------------------------------------------------
# Item 4: a dataset smaller than the batch trains; one without labels is refused


@pytest.mark.slow
def test_tiny_dataset_trains_with_default_batch_size(tiny_yaml, tmp_path, log):
    decays = []
    record = OnStart(lambda trainer: decays.append(trainer.parts.optimizer.param_groups[1]["weight_decay"]))
    # No --batch-size: the default 16 is more than the 3 images.
    assert _train("--data", tiny_yaml, *FAST, "--project", tmp_path, callbacks=[record]) == 0
    assert (tmp_path / "exp" / "weights" / "best.pt").is_file()
    # Gradients accumulate to the nominal batch 64 from the loader's batch of 3 (21 steps), not from 16 (4 steps),
    # and weight decay scales with that effective batch.
    hyp = train.load_hyp("hyp.scratch.yaml")
    assert decays == [pytest.approx(hyp["weight_decay"] * 3 * round(64 / 3) / 64)]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [-7, 2**40])
def test_any_integer_seed_trains(seed, tiny_yaml, tmp_path):
    assert _train("--data", tiny_yaml, *FAST, "--batch-size", 3, "--project", tmp_path, "--seed", seed) == 0


def test_dataset_without_labels_is_refused(tmp_path, log):
    root = generate_shapes(tmp_path / "shapes", n_train=3, n_val=2, img_size=64)
    shutil.rmtree(root / "labels" / "train")  # the labels folder forgotten
    data = write_data_yaml(root, tmp_path / "nolabels.yaml")
    assert _train("--data", data, *FAST, "--project", tmp_path / "runs") == 1
    error = _one_error(log)
    assert "no labels found" in error and str(root / "labels" / "train") in error
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------------------------------
# Item 5: numeric flags are checked while parsing


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--epochs", "0", "must be an integer >= 1"),
        ("--batch-size", "0", "must be an integer >= 1"),
        ("--batch-size", "-2", "or -1 for AutoBatch"),
        ("--imgsz", "31", "must be an integer >= 32"),
        ("--img", "-640", "must be an integer >= 32"),
        ("--workers", "-1", "must be an integer >= 0"),
        ("--patience", "-2", "must be an integer >= 0"),
        ("--label-smoothing", "1", "must be in [0, 1)"),
        ("--label-smoothing", "-0.1", "must be in [0, 1)"),
        ("--label-smoothing", "nan", "must be a finite number"),
        ("--freeze", "-3", "must be an integer >= 0"),
        ("--epochs", "ten", "must be an integer"),
        ("--optimizer", "Lion", "invalid choice"),
    ],
)
def test_bad_flag_exits_2_with_one_line(flag, value, message, capsys):
    with pytest.raises(SystemExit) as e:
        train.parse_opt([flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ERROR: argument ")
    assert flag.lstrip("-") in err and message in err


def test_valid_flag_edges_are_accepted():
    opt = train.parse_opt(
        [
            "--epochs",
            "1",
            "--batch-size",
            "1",
            "--img",
            "32",
            "--workers",
            "0",
            "--patience",
            "0",
            "--label-smoothing",
            "0.99",
            "--freeze",
            "0",
            "1",
            "--seed",
            "-5",
            "--save-period",
            "-1",
        ]
    )
    assert (opt.epochs, opt.batch_size, opt.imgsz, opt.workers, opt.patience) == (1, 1, 32, 0, 0)
    assert opt.label_smoothing == 0.99 and opt.freeze == [0, 1] and opt.seed == -5 and opt.save_period == -1


# ---------------------------------------------------------------------------------------------------------------------
# Item 8: model configs, --freeze, a full disk, and other bad input


def _cfg(tmp_path, old: str, new: str):
    text = (REPO_ROOT / "models" / "yolov5n.yaml").read_text()
    assert old in text
    file = tmp_path / "model.yaml"
    file.write_text(text.replace(old, new, 1))
    return file


@pytest.mark.parametrize(
    "case, message",
    [
        ("yaml_syntax", "not readable as YAML"),
        ("folder", "is a folder"),
        ("concat_size", "layer 12 (Concat) cannot take its inputs"),
        ("negative_channels", "output channels (first arg) must be a whole number >= 1, got -128"),
        ("later_layer", "input 15 is not an earlier layer"),
        ("unknown_module", "unknown layer type 'Foo'"),
        ("negative_repeats", "repeats must be a whole number >= 1, got -3"),
    ],
)
def test_unusable_cfg_gives_one_line_error(case, message, tiny_yaml, tmp_path, log):
    if case == "yaml_syntax":
        cfg = tmp_path / "model.yaml"
        cfg.write_text("nc: [80\nbackbone: :\n")
    elif case == "folder":
        cfg = tmp_path
    else:
        cfg = _cfg(
            tmp_path,
            *{
                "concat_size": ("[[-1, 6], 1, Concat, [1]]", "[[-1, 2], 1, Concat, [1]]"),
                "negative_channels": ("[-1, 1, Conv, [128, 3, 2]]", "[-1, 1, Conv, [-128, 3, 2]]"),
                "later_layer": ("[[-1, 6], 1, Concat, [1]]", "[[-1, 15], 1, Concat, [1]]"),
                "unknown_module": ("SPPF, [1024, 5]", "Foo, [1024, 5]"),
                "negative_repeats": ("[-1, 3, C3, [128]]", "[-1, -3, C3, [128]]"),
            }[case],
        )
    args = ["--data", tiny_yaml, *FAST[2:], "--cfg", cfg, "--batch-size", 3, "--project", tmp_path / "runs"]
    assert _train(*args) == 1
    error = _one_error(log)
    assert "unusable model config" in error and message in error
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "freeze, message",
    [
        (["25"], "nothing left to train"),
        ([str(i) for i in range(25)], "nothing left to train"),
        (["26"], "--freeze 26: the model has 25 layers"),
        (["3", "40"], "--freeze 40: the model has 25 layers"),
    ],
)
def test_freeze_that_cannot_work_is_refused(freeze, message, tiny_yaml, tmp_path, log):
    args = ["--data", tiny_yaml, *FAST, "--batch-size", 3, "--project", tmp_path, "--freeze", *freeze]
    assert _train(*args) == 1
    assert message in _one_error(log)
    assert not list(tmp_path.glob("exp*"))


class DiskFullLogger(Callback):
    """A logger whose disk fills up when it writes an epoch's results."""

    def on_epoch_end(self, trainer, result):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_while_logging_results_is_one_line(tiny_yaml, tmp_path, log):
    args = ["--data", tiny_yaml, *FAST, "--batch-size", 3, "--project", tmp_path]
    assert _train(*args, callbacks=[DiskFullLogger()]) == 1
    assert "the disk is full (ENOSPC)" in _one_error(log)


def test_out_of_memory_is_one_line(tiny_yaml, tmp_path, log):
    def out_of_memory(preds, targets):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity")

    def swap_loss(trainer):
        trainer.parts.train_loss = out_of_memory

    args = ["--data", tiny_yaml, *FAST, "--batch-size", 3, "--project", tmp_path]
    assert _train(*args, callbacks=[OnStart(swap_loss)]) == 1
    error = _one_error(log)
    assert "out of memory (CUDA out of memory)" in error and "smaller --batch-size" in error


@pytest.mark.parametrize(
    "case, message",
    [
        ("project_is_a_file", "is a file, not a folder"),
        ("broken_weights", "refused"),
        ("missing_data", "not found"),
        ("hyp_syntax", "could not be read"),
    ],
)
def test_other_bad_input_gives_one_line_error(case, message, tiny_yaml, tmp_path, log):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all")
    args = ["--data", tiny_yaml, *FAST, "--batch-size", 3, "--project", tmp_path / "runs"]
    if case == "project_is_a_file":
        args[-1] = junk
    elif case == "broken_weights":
        args += ["--weights", junk]
    elif case == "missing_data":
        args[1] = tmp_path / "missing.yaml"
    else:
        (tmp_path / "hyp.yaml").write_text("lr0: [0.01\nlrf: :\n")
        args += ["--hyp", tmp_path / "hyp.yaml"]
    assert _train(*args) == 1
    assert message in _one_error(log)
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------------------------------
# Item 8: --resume from checkpoints that cannot be resumed


@pytest.fixture(scope="module")
def interrupted_last(tiny_yaml, tmp_path_factory):
    """A resumable last.pt: a 3-epoch run stopped (as by Ctrl-C) right after epoch 0 was saved."""
    project = tmp_path_factory.mktemp("interrupted")

    class InterruptAfterFirstSave(Callback):
        def on_checkpoint_saved(self, trainer, path, result):
            raise KeyboardInterrupt

    args = ["--data", tiny_yaml, *FAST[:-1], 3, "--batch-size", 3, "--project", project]
    assert _train(*args, callbacks=[InterruptAfterFirstSave()]) == 130
    return project / "exp" / "weights" / "last.pt"


def _other_model_state(ckpt: dict) -> dict:
    return fp16_state_dict(Model("yolov5s.yaml", nc=ckpt["yaml"]["nc"]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, message",
    [
        ("class_count_changed", "trained for 5 classes but"),
        ("other_model_weights", "training weights do not fit its model config"),
        ("other_model_optimizer", "optimizer state does not fit the model"),
        ("other_model_optimizer_buffers", "optimizer state does not fit the model"),
        ("no_epoch", "'epoch' entry must be a whole number >= -1 (missing)"),
        ("epoch_not_int", "'epoch' entry must be a whole number >= -1 (a str)"),
        ("no_train_model", "its training finished"),
        ("train_args_not_dict", "('train_args') are a list, not a mapping"),
        ("train_args_lack_epochs", "lack epochs"),
        ("train_args_wrong_type", "--epochs has the wrong type: 'ten'"),
        ("train_args_out_of_range", "--imgsz must be an integer >= 32, got 0"),
        ("train_args_bad_hyp", "--hyp lacks a finite value for lr0"),
        ("folder", "is a folder"),
    ],
)
def test_resume_of_unusable_checkpoint_gives_one_line_error(case, message, interrupted_last, tiny_yaml, tmp_path, log):
    ckpt = torch.load(interrupted_last, weights_only=True)
    assert ckpt["epoch"] == 0 and "optimizer" in ckpt  # resumable as saved
    args = ckpt["train_args"]
    if case == "class_count_changed":
        three = tmp_path / "three.yaml"
        three.write_text(tiny_yaml.read_text().replace(NAMES, "[circle, square, triangle]"))
        args["data"] = str(three)
    elif case == "other_model_weights":
        ckpt["train_model"] = _other_model_state(ckpt)
    elif case == "other_model_optimizer":  # a fresh one: same group sizes as yolov5n, but never stepped
        ckpt["optimizer"] = train_setup.smart_optimizer(Model("yolov5s.yaml", nc=5), decay=0.0).state_dict()
    elif case == "other_model_optimizer_buffers":  # SGD momentum of yolov5s weights
        shapes = [p.shape for p in Model("yolov5s.yaml", nc=5).parameters()]
        for i, state in ckpt["optimizer"]["state"].items():
            state["momentum_buffer"] = torch.zeros(shapes[i])
    elif case == "no_epoch":
        del ckpt["epoch"]
    elif case == "epoch_not_int":
        ckpt["epoch"] = "0"
    elif case == "no_train_model":
        del ckpt["train_model"]
    elif case == "train_args_not_dict":
        ckpt["train_args"] = ["--epochs", "3"]
    elif case == "train_args_lack_epochs":
        del args["epochs"]
    elif case == "train_args_wrong_type":
        args["epochs"] = "ten"
    elif case == "train_args_out_of_range":
        args["imgsz"] = 0
    elif case == "train_args_bad_hyp":
        del args["hyp"]["lr0"]
    last = tmp_path / "exp" / "weights" / "last.pt"
    last.parent.mkdir(parents=True)
    (tmp_path / "exp" / ".yolo-run").write_text("")  # a run folder (utils.files.RUN_MARKER): resumed in place
    torch.save(ckpt, last)
    assert _train("--resume", tmp_path if case == "folder" else last) == 1
    assert message in _one_error(log)
    assert not (tmp_path / "exp" / "results.csv").exists()  # nothing was trained


@pytest.mark.slow
def test_resume_of_untouched_checkpoint_still_works(interrupted_last, tmp_path):
    last = tmp_path / "exp" / "weights" / "last.pt"
    last.parent.mkdir(parents=True)
    (tmp_path / "exp" / ".yolo-run").write_text("")  # a run folder (utils.files.RUN_MARKER): resumed in place
    shutil.copy(interrupted_last, last)
    assert _train("--resume", last) == 0
    assert torch.load(last, weights_only=True)["epoch"] == 2
