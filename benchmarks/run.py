"""The project's speed figures on this machine, as a markdown table and a JSON file.

Usage:
    python benchmarks/run.py                      # everything that applies to this machine
    python benchmarks/run.py --only detect metric # some sections: detect test train metric cuda loader
    python benchmarks/run.py --device 0           # CUDA figures too (AMP vs float32, FP16 vs float32)
    python benchmarks/run.py --only backends      # PyTorch, TorchScript, ONNX Runtime, OpenVINO; float32, int8
    python benchmarks/run.py --only backends --models yolov5n  # one model (yolov5n yolov5s yolov8n yolo11n yolo26n)

Every figure is taken after a warm-up, as the min and median of several runs. COCO128 and the official
yolov5n.pt come from ../shared (or --coco128 / --weights); yolov5s is timed with random weights (same speed; its
int8 rows calibrate those random weights on COCO128, which is as fast as calibrated real ones and says nothing of
accuracy). The CPU's ISA flags (avx2, avx512*, vnni, amx) are printed with the table.
"""

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch
from bench_common import REPO, SHARED, _random_weights, _stats, _timed_command
from bench_inference import _backend_rows, bench_backends, bench_detect, cpu_isa_flags
from bench_loader import bench_loader, loader_rows
from bench_training import _train_row, _train_steps, bench_cuda, bench_train_epoch

from utils.torch_utils import retain_freed_memory  # noqa: E402

# Timed with random weights (no download needed; the speed is that of trained ones): YOLOv5s and the anchor-free family
RANDOM_MODELS = ("yolov5s", "yolov8n", "yolo11n", "yolo26n")


def _coco128_yaml(root: Path, tmp: Path) -> Path:
    """A data YAML for COCO128 at root, with its official annotation file as ground truth when present."""
    ann = root / "annotations" / "instances_train2017.json"
    lines = [f"path: {root}", "train: images/train2017", "val: images/train2017"]
    lines += [f"ann_json: {ann}"] if ann.is_file() else []
    names = json.dumps(__import__("utils.eval.coco_io", fromlist=["COCO80_NAMES"]).COCO80_NAMES)
    (tmp / "coco128.yaml").write_text("\n".join(lines + ["nc: 80", f"names: {names}"]) + "\n")
    return tmp / "coco128.yaml"


def bench_test(data: Path, weights: Path, device: str, tmp: Path, repeats: int) -> dict:
    """Whole `python test.py` wall time on COCO128 at 640 (batch 32), and its images per second."""
    walls, per_image = [], []
    for i in range(repeats):
        name = f"test{i}"
        walls.append(
            _timed_command(
                [
                    "test.py",
                    "--data",
                    str(data),
                    "--weights",
                    str(weights),
                    "--img",
                    "640",
                    "--batch-size",
                    "32",
                    "--device",
                    device,
                    "--no-plots",
                    "--project",
                    str(tmp),
                    "--name",
                    name,
                ]
            )
        )
        speed = json.loads((tmp / name / "results.json").read_text())["speed_ms"]
        per_image.append(sum(speed.values()))
    return {"wall_s": _stats(walls), "images_per_s": round(1000 / min(per_image), 1)}


def bench_metric(n_images: int) -> dict:
    """The metric step against pycocotools' evaluate() + accumulate() on COCO-val-sized synthetic input."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import metric_speed

    return metric_speed.run(n_images=n_images)


def markdown(results: dict) -> str:
    """The results as a markdown table, one row per figure."""
    rows = [f"Machine: {results['machine']}", f"CPU flags: {results.get('cpu_flags', 'not recorded')}", ""]
    rows += ["| benchmark | figure |", "| --- | --- |"]
    for r in results.get("detect", []):
        inf = r["inference_ms"]
        shape = f"{r['shape'][1]}x{r['shape'][0]}"
        rows.append(
            f"| detect {r['model']} {r['precision']}, --img 640, batch 1 ({shape} image) | "
            f"{r['preprocess_ms']} ms pre-process, {inf['min']}/{inf['median']} ms inference (min/median "
            f"of {inf['runs']}), {r['nms_ms']} ms NMS |"
        )
    rows += _backend_rows(results.get("backends", []))
    if "test" in results:
        t = results["test"]
        rows.append(
            f"| test.py COCO128 at 640, batch 32 (whole command) | {t['wall_s']['min']} s wall (min of "
            f"{t['wall_s']['runs']}), {t['images_per_s']} images/s |"
        )
    if "train_epoch" in results:
        rows.append(
            f"| train.py 1 epoch COCO128 at 320, batch 16, hyp.scratch.yaml, with validation and plots | "
            f"{results['train_epoch']['wall_s']} s wall |"
        )
    rows += [_train_row(r) for r in results.get("train_steps", [])]
    rows += loader_rows(results["loader"]) if "loader" in results else []
    if "metric" in results:
        m = results["metric"]
        rows.append(
            f"| metric step, {m['images']} images, {m['gt_boxes']} boxes, {m['detections']} detections | "
            f"{m['ours_s']:.2f} s vs pycocotools evaluate+accumulate {m['pycocotools_s']:.2f} s: "
            f"{m['speedup']:.1f}x (max difference {m['max_abs_diff']:.1e}) |"
        )
    if "cuda" in results:
        c = results["cuda"]
        rows.append(
            f"| {c['gpu']} yolov5s 640 training batch 64 | float32 {c['train_float32']['images_per_s']} "
            f"img/s, {c['train_float32']['peak_memory_gib']} GiB; AMP {c['train_amp']['images_per_s']} img/s, "
            f"{c['train_amp']['peak_memory_gib']} GiB ({c['amp_speedup']}x speed, {c['amp_memory_ratio']}x "
            "memory) |"
        )
        rows.append(
            f"| {c['gpu']} yolov5s 640 inference batch 32 | float32 "
            f"{c['inference_float32']['images_per_s']} img/s, FP16 {c['inference_fp16']['images_per_s']} "
            f"img/s ({c['fp16_inference_speedup']}x) |"
        )
    return "\n".join(rows) + "\n"


def parse_opt(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        nargs="+",
        default=["detect", "backends", "test", "train", "metric", "cuda", "loader"],
        choices=["detect", "backends", "test", "train", "metric", "cuda", "loader"],
    )
    parser.add_argument("--device", default="cpu", help="cpu, or a CUDA index for the GPU figures")
    parser.add_argument("--weights", type=Path, default=SHARED / "weights" / "yolov5n.pt")
    parser.add_argument("--coco128", type=Path, default=SHARED / "datasets" / "coco128")
    parser.add_argument("--image", type=Path, default=SHARED / "images" / "bus.jpg")
    parser.add_argument("--runs", type=int, default=20, help="timed repetitions for detect")
    parser.add_argument("--metric-images", type=int, default=5000)
    parser.add_argument("--models", nargs="+", default=["yolov5n", "yolov5s"], choices=["yolov5n", *RANDOM_MODELS])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks")
    opt = parser.parse_args(argv)
    # absolute: the data YAML is written in a temporary folder and the commands run from the repository
    opt.weights, opt.coco128, opt.image = (p.resolve() for p in (opt.weights, opt.coco128, opt.image))
    return opt


def main(argv: list[str] | None = None) -> int:
    opt = parse_opt(argv)
    for needed in (opt.weights, opt.coco128, opt.image):
        if not needed.exists():
            print(f"ERROR: {needed} not found (pass --weights, --coco128 or --image)")
            return 1
    cuda = opt.device != "cpu" and torch.cuda.is_available()
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}" + (f", {torch.cuda.get_device_name(0)}" if cuda else ""),
        "cpu_flags": cpu_isa_flags(),
    }
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        data = _coco128_yaml(opt.coco128, tmp)
        if "detect" in opt.only:
            weights = {"yolov5n": opt.weights, "yolov5s (random weights)": _random_weights("yolov5s.yaml", tmp)}
            results["detect"] = bench_detect(weights, opt.image, opt.device, opt.runs, tmp)
        if "backends" in opt.only:
            weights = {"yolov5n": opt.weights} if "yolov5n" in opt.models else {}
            for name in (m for m in opt.models if m in RANDOM_MODELS):
                weights[f"{name} (random weights)"] = _random_weights(f"{name}.yaml", tmp)
            results["backends"] = bench_backends(weights, opt.image, opt.runs, tmp, data)
        if "test" in opt.only:
            results["test"] = bench_test(data, opt.weights, opt.device, tmp, repeats=2)
        if "train" in opt.only:
            results["train_epoch"] = bench_train_epoch(data, opt.weights, opt.device, tmp)
            retain_freed_memory()  # as the Trainer does: a step's large blocks are reused, not faulted in anew
            results["train_steps"] = _train_steps(data, opt.device)
        if "metric" in opt.only:
            results["metric"] = bench_metric(opt.metric_images)
        if "loader" in opt.only:
            results["loader"] = bench_loader(data)
        if "cuda" in opt.only and cuda:
            results["cuda"] = bench_cuda(opt.device, steps=10)
        elif "cuda" in opt.only:
            print("No CUDA device selected or available (--device 0 on a CUDA machine): GPU figures skipped")
    opt.out.mkdir(parents=True, exist_ok=True)
    (opt.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (opt.out / "results.md").write_text(table)
    print(table)
    print(f"Saved {opt.out / 'results.md'} and {opt.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
