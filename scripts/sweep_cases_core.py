"""The sweep's cases for each command line (detect.py, test.py, train.py, export.py): flags out of range, odd
sources, broken weights and datasets. See scripts/bad_input_sweep.py.
"""

import json
from pathlib import Path

import torch
import yaml
from sweep_common import (
    COCO,
    IMAGES,
    ROOT,
    WEIGHTS,
    Case,
    _copy_dataset,
    _data_yaml,
    _detect_sources,
    _no_file,
    _outputs,
    _renumbered_json,
    _same_map,
    _subset_json,
    _write_yaml,
)

from models.weights.checkpoint import load_checkpoint


def detect_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """detect.py: flags out of range, sources that collide or are odd, broken weights."""
    out = tmp / "runs_detect"
    w = ["--weights", str(WEIGHTS), "--project", str(out)]
    bus = str(IMAGES / "bus.jpg")
    video = _detect_sources(tmp)
    return [
        Case("detect --conf-thres 2", ["detect.py", *w, "--source", bus, "--conf-thres", "2"], "error"),
        Case("detect --iou-thres 5", ["detect.py", *w, "--source", bus, "--iou-thres", "5"], "error"),
        Case("detect --max-det -3", ["detect.py", *w, "--source", bus, "--max-det", "-3"], "error"),
        Case("detect --classes 999", ["detect.py", *w, "--source", bus, "--classes", "999"], "error"),
        Case("detect --line-thickness -4", ["detect.py", *w, "--source", bus, "--line-thickness", "-4"], "error"),
        Case("detect --line-thickness 40000", ["detect.py", *w, "--source", bus, "--line-thickness", "40000"], "error"),
        Case("detect --vid-stride 0", ["detect.py", *w, "--source", bus, "--vid-stride", "0"], "error"),
        Case("detect --img-size -1", ["detect.py", *w, "--source", bus, "--img-size", "-1"], "error"),
        Case("detect --device cuda (no CUDA)", ["detect.py", *w, "--source", bus, "--device", "cuda"], "error"),
        Case("detect --device mps", ["detect.py", *w, "--source", bus, "--device", "mps"], "error"),
        Case("detect missing source", ["detect.py", *w, "--source", str(tmp / "nope.jpg")], "error"),
        Case("detect folder of folders", ["detect.py", *w, "--source", str(tmp / "only_dirs")], "error"),
        Case("detect truncated JPEG only", ["detect.py", *w, "--source", str(tmp / "corrupt.jpg")], "error"),
        Case(
            "detect same stem in a glob",
            ["detect.py", *w, "--name", "glob", "--save-txt", "--source", str(tmp / "same_stem" / "*" / "x.jpg")],
            "ok",
            _outputs(out / "glob" / "labels", "*.txt", 2),
        ),
        Case(
            "detect same stem in a list",
            ["detect.py", *w, "--name", "list", "--source", str(tmp / "list.txt")],
            "ok",
            _outputs(out / "list", "x*.jpg", 2),
        ),
        Case(
            "detect x.jpg and x.png",
            ["detect.py", *w, "--name", "png", "--save-txt", "--source", str(tmp / "same_folder")],
            "ok",
            _outputs(out / "png" / "labels", "*.txt", 2),
        ),
        Case("detect file name with [ ]", ["detect.py", *w, "--source", str(tmp / "globchars" / "a[1].jpg")], "ok"),
        Case("detect video cut short", ["detect.py", *w, "--source", str(video)], "ok"),
    ] + detect_weights_cases(tmp, ckpt)


def detect_weights_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """detect.py with broken, hostile or mismatched weights."""
    out, bus = tmp / "runs_detect", str(IMAGES / "bus.jpg")

    def detect(*weights: Path) -> list[str]:
        return ["detect.py", "--weights", *map(str, weights), "--source", bus, "--project", str(out)]

    return [
        Case("detect random-bytes weights", detect(ckpt["random"]), "error"),
        Case("detect pickle that runs code", detect(ckpt["pickle_exec"]), "error", _no_file(tmp / "PWNED")),
        Case("detect names shorter than nc", detect(ckpt["short_names"]), "error"),
        Case("detect NaN weights", detect(ckpt["nan"]), "error"),
        Case("detect ensemble of different class lists", detect(WEIGHTS, ckpt["three_classes"]), "error"),
    ]


def _test_data(tmp: Path) -> dict[str, Path]:
    """Data YAMLs and JSON files for the test.py cases."""
    tiny = _data_yaml(_copy_dataset(tmp / "tiny", 3), "tiny")
    corrupt_root = _copy_dataset(tmp / "corrupt", 4)
    next((corrupt_root / "images" / "train").glob("*.jpg")).write_text("not an image")
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("path: [unclosed\n")
    coco16 = _copy_dataset(tmp / "coco16", 16)
    keep = {p.name for p in (coco16 / "images" / "train").glob("*.jpg")}
    _subset_json(COCO / "annotations" / "instances_train2017.json", keep, tmp / "stems.json")
    _renumbered_json(COCO / "annotations" / "instances_train2017.json", keep, tmp / "renumbered.json")
    (tmp / "notjson.json").write_text("{oops")
    (tmp / "pred_bad.json").write_text(json.dumps([{"image_id": 1}]))
    return {
        "tiny": tiny,
        "corrupt": _data_yaml(corrupt_root, "corrupt"),
        "shell": _data_yaml(tmp / "absent", "shell", download=f"bash -c 'touch {tmp / 'SHELL_RAN'}'"),
        "bad_yaml": bad_yaml,
        "stems": _data_yaml(coco16, "coco16_stems", ann_json=str(tmp / "stems.json")),
        "renumbered": _data_yaml(coco16, "coco16_renumbered", ann_json=str(tmp / "renumbered.json")),
    }


def test_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """test.py: flags, tiny and damaged datasets, renumbered COCO ids, broken JSON and weights."""
    out, data = tmp / "runs_test", _test_data(tmp)
    tiny = ["test.py", "--data", str(data["tiny"]), "--project", str(out)]
    w = ["--weights", str(WEIGHTS)]
    coco16 = [*w, "--img", "320", "--batch-size", "16", "--save-json", "--project", str(out)]
    cases = [
        Case("test --batch-size 0", [*tiny, *w, "--batch-size", "0"], "error"),
        Case("test --conf-thres 2", [*tiny, *w, "--conf-thres", "2"], "error"),
        Case("test --device cuda (no CUDA)", [*tiny, *w, "--device", "cuda"], "error"),
        Case("test 3 images, default batch 32", [*tiny, *w, "--img", "160"], "ok"),
        Case(
            "test corrupt image dropped",
            ["test.py", "--data", str(data["corrupt"]), *w, "--img", "160", "--batch-size", "4", "--project", str(out)],
            "ok",
        ),
        Case(
            "test data YAML with a shell download",
            ["test.py", "--data", str(data["shell"]), *w],
            "error",
            _no_file(tmp / "SHELL_RAN"),
        ),
        Case("test data YAML syntax error", ["test.py", "--data", str(data["bad_yaml"]), *w], "error"),
        Case(
            "test ann_json with stem ids", ["test.py", "--data", str(data["stems"]), *coco16, "--name", "stems"], "ok"
        ),
        Case(
            "test ann_json renumbered 1..N",
            ["test.py", "--data", str(data["renumbered"]), *coco16, "--name", "renumbered"],
            "ok",
            _same_map(out / "stems", out / "renumbered"),
        ),
        Case("test --ann-json not JSON", [*tiny, *w, "--ann-json", str(tmp / "notjson.json")], "error"),
        Case(
            "test --pred-json malformed",
            [
                "test.py",
                "--ann-json",
                str(tmp / "stems.json"),
                "--pred-json",
                str(tmp / "pred_bad.json"),
                "--project",
                str(out),
            ],
            "error",
        ),
        Case("test --task test without a test split", [*tiny, *w, "--task", "test"], "error"),
    ]
    broken = {
        "text": "refused weights file",
        "truncated": "truncated weights",
        "no_names": "no names in weights",
        "model_list": "model entry a list",
        "wrong_yaml": "weights not fitting their YAML",
    }
    cases += [Case(f"test {what}", [*tiny, "--weights", str(ckpt[key])], "error") for key, what in broken.items()]
    cases.append(Case("test ensemble of different class lists", [*tiny, *w, str(ckpt["three_classes"])], "error"))
    return cases


def _train_fixtures(tmp: Path) -> Path:
    """Broken model configs, a malformed evolve.csv and a crafted last.pt in tmp; the last.pt."""
    cfg = yaml.safe_load((ROOT / "models" / "yolov5n.yaml").read_text())
    (tmp / "cfg_syntax.yaml").write_text("nc: 80\nbackbone: [[-1, 1, Conv, [64, 6, 2, 2]]\n")
    concat = json.loads(json.dumps(cfg))
    concat["head"][2][0] = [-1, 2]  # Concat of layers with other spatial sizes
    _write_yaml(tmp / "cfg_concat.yaml", concat)
    negative = json.loads(json.dumps(cfg))
    negative["backbone"][0][3][0] = -64
    _write_yaml(tmp / "cfg_negative.yaml", negative)
    (tmp / "evolve" / "exp").mkdir(parents=True)
    (tmp / "evolve" / "exp" / "evolve.csv").write_text("metrics/precision,lr0\nnot-a-number,0.01\n")
    crafted = tmp / "crafted_last.pt"  # a loadable model whose training options are not a mapping
    ours = load_checkpoint(WEIGHTS)
    resume_state = {"epoch": 0, "best_fitness": 0.0, "ema_updates": 0, "optimizer": {"state": {}, "param_groups": []}}
    torch.save({**ours, **resume_state, "train_model": ours["model"], "train_args": "oops"}, crafted)
    return crafted


def train_cases(tmp: Path) -> list[Case]:
    """train.py: tiny data with the default batch, missing labels, broken configs, crafted checkpoints."""
    out = tmp / "runs_train"
    tiny = _data_yaml(_copy_dataset(tmp / "train_tiny", 3), "train_tiny")
    nolabels = _data_yaml(_copy_dataset(tmp / "nolabels", 3, labels=False), "nolabels")
    base = ["--data", str(tiny), "--img", "64", "--epochs", "1", "--project", str(out), "--workers", "0"]
    crafted = _train_fixtures(tmp)
    scratch = ["--weights", "", "--cfg", "yolov5n.yaml"]
    return [
        Case("train --batch-size -2", ["train.py", *base, *scratch, "--batch-size", "-2"], "error"),
        Case(
            "train --batch-size -1 (AutoBatch) on the CPU",
            ["train.py", *base, *scratch, "--batch-size", "-1", "--name", "autobatch", "--noplots"],
            "ok",
        ),
        Case("train --quad with a batch of 6", ["train.py", *base, *scratch, "--quad", "--batch-size", "6"], "error"),
        Case("train --evolve with --resume", ["train.py", *base, *scratch, "--evolve", "2", "--resume"], "error"),
        Case(
            "train --evolve continuing a malformed evolve.csv",
            ["train.py", *base, *scratch, "--evolve", "2", "--project", str(tmp / "evolve"), "--exist-ok"],
            "error",
        ),
        Case("train --epochs 0", ["train.py", *base, *scratch, "--epochs", "0"], "error"),
        Case(
            "train 3 images, default batch 16",
            ["train.py", *base, *scratch, "--name", "tiny", "--noplots"],
            "ok",
            _outputs(out / "tiny" / "weights", "*.pt", 2),
        ),
        Case(
            "train without labels",
            ["train.py", *[a if a != str(tiny) else str(nolabels) for a in base], *scratch],
            "error",
        ),
        Case(
            "train --cfg YAML syntax error",
            ["train.py", *base, "--weights", "", "--cfg", str(tmp / "cfg_syntax.yaml")],
            "error",
        ),
        Case(
            "train --cfg Concat mismatch",
            ["train.py", *base, "--weights", "", "--cfg", str(tmp / "cfg_concat.yaml")],
            "error",
        ),
        Case(
            "train --cfg negative channels",
            ["train.py", *base, "--weights", "", "--cfg", str(tmp / "cfg_negative.yaml")],
            "error",
        ),
        Case("train --freeze every layer", ["train.py", *base, *scratch, "--freeze", "25"], "error"),
        Case("train --resume crafted last.pt", ["train.py", "--resume", str(crafted)], "error"),
        Case(
            "train data YAML with a shell download",
            ["train.py", *base, *scratch, "--data", str(tmp / "shell.yaml")],
            "error",
            _no_file(tmp / "SHELL_RAN"),
        ),
    ]


def export_cases(tmp: Path, ckpt: dict[str, Path]) -> list[Case]:
    """export.py on broken and malicious checkpoints and impossible requests; detect.py on a non-YOLO .onnx."""
    not_yolo = tmp / "linear.onnx"
    try:
        torch.onnx.export(torch.nn.Linear(4, 7), (torch.zeros(1, 3, 4),), str(not_yolo), dynamo=False)
    except Exception:  # no onnx package: detect.py must still end in one line (it names the package)
        not_yolo.write_bytes(b"\x08\x07")
    w = ["--weights", str(WEIGHTS)]
    bus = str(IMAGES / "bus.jpg")
    return [
        Case("export random bytes .pt", ["export.py", "--weights", str(ckpt["random"])], "error"),
        Case(
            "export malicious pickle",
            ["export.py", "--weights", str(ckpt["pickle_exec"])],
            "error",
            _no_file(tmp / "PWNED"),
        ),
        Case("export missing weights", ["export.py", "--weights", str(tmp / "none.pt")], "error"),
        Case("export --half on the CPU", ["export.py", *w, "--include", "onnx", "--half"], "error"),
        Case("export --include engine without CUDA", ["export.py", *w, "--include", "engine"], "error"),
        Case("export --img 100 (not a stride multiple)", ["export.py", *w, "--img", "100"], "error"),
        Case("detect with a non-YOLO .onnx", ["detect.py", "--weights", str(not_yolo), "--source", bus], "error"),
        Case("detect with a missing .onnx", ["detect.py", "--weights", str(tmp / "x.onnx"), "--source", bus], "error"),
    ]
