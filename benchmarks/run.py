"""The project's speed figures on this machine, as a markdown table and a JSON file.

Usage:
    python benchmarks/run.py                      # everything that applies to this machine
    python benchmarks/run.py --only detect metric # some sections: detect test train metric cuda
    python benchmarks/run.py --device 0           # CUDA figures too (AMP vs float32, FP16 vs float32)
    python benchmarks/run.py --only backends      # PyTorch, TorchScript, ONNX Runtime, OpenVINO; float32, int8
    python benchmarks/run.py --only backends --models yolov5n  # one model

Every figure is taken after a warm-up, as the min and median of several runs. COCO128 and the official
yolov5n.pt come from ../shared (or --coco128 / --weights); yolov5s is timed with random weights (same speed; its
int8 rows calibrate those random weights on COCO128, which is as fast as calibrated real ones and says nothing of
accuracy). The CPU's ISA flags (avx2, avx512*, vnni, amx) are printed with the table.
"""

import argparse
import functools
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from utils.torch_utils import cpu_supports_bf16, retain_freed_memory, select_device  # noqa: E402

SHARED = REPO.parent / "shared"


def _stats(values: list[float]) -> dict:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "runs": len(values)}


def _random_weights(cfg: str, folder: Path) -> Path:
    """A checkpoint of a randomly initialised model: same speed as trained weights, nothing to download."""
    from models.checkpoint import checkpoint_dict, save_checkpoint
    from models.yolo import Model

    path = folder / f"{Path(cfg).stem}-random.pt"
    save_checkpoint(checkpoint_dict(Model(cfg).eval()), path)
    return path


def bench_detect(weights: dict[str, Path], image: Path, device: str, runs: int, tmp: Path) -> list[dict]:
    """detect.py's own pipeline on one image repeated: per-image inference, mean pre-process and NMS."""
    import detect

    listing = tmp / "images.txt"
    listing.write_text("\n".join([str(image)] * runs) + "\n")
    rows = []
    precisions = ["float32"] + (["bf16"] if device == "cpu" and cpu_supports_bf16() else [])
    precisions += ["fp16"] if device != "cpu" else []
    for name, path in weights.items():
        for precision in precisions:
            result = detect.run(
                weights=path,
                source=listing,
                imgsz=640,
                device=device,
                nosave=True,
                project=tmp / "detect",
                bf16=precision == "bf16",
                half=True if precision == "fp16" else False if device != "cpu" else None,
            )
            inference = [r.inference_ms for r in result.results]
            rows.append(
                {
                    "model": name,
                    "precision": precision,
                    "shape": list(result.results[0].shape),
                    "preprocess_ms": round(result.speed_ms[0], 2),
                    "inference_ms": _stats(inference),
                    "nms_ms": round(result.speed_ms[2], 2),
                }
            )
    return rows


BACKEND_FORMATS = {
    "TorchScript": ".torchscript",
    "ONNX Runtime": ".onnx",
    "OpenVINO": "_openvino_model",
    "ONNX Runtime int8": "_int8.onnx",
    "OpenVINO int8": "_int8_openvino_model",
}
ISA_FLAGS = ("avx2", "avx512", "vnni", "amx")  # what decides CPU int8 and bf16 speed


def cpu_isa_flags() -> str:
    """The CPU's vector ISA flags from /proc/cpuinfo (avx2, avx512*, *vnni, amx*), or a note where unreadable."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    wanted = sorted({f for f in flags if any(key in f for key in ISA_FLAGS)})
    return " ".join(wanted) or "none of avx2/avx512/vnni/amx"


def _exports(weights: Path, folder: Path, data: Path) -> dict[str, Path]:
    """PyTorch weights and their dynamic exports, float32 and int8 (calibrated on data's val images), by backend:
    every backend then gets the same rectangular input."""
    from models.export import ExportOptions, export

    folder.mkdir(parents=True, exist_ok=True)
    local = folder / weights.name
    local.write_bytes(weights.read_bytes())  # exports are written beside the weights: never into ../shared
    cpu = torch.device("cpu")
    export(local, ["torchscript", "onnx", "openvino"], ExportOptions(), cpu)
    export(local, ["onnx", "openvino"], ExportOptions(int8=True, data=data), cpu)
    return {"PyTorch float32": local} | {k: folder / f"{local.stem}{v}" for k, v in BACKEND_FORMATS.items()}


def bench_backends(weights: dict[str, Path], image: Path, runs: int, tmp: Path, data: Path) -> list[dict]:
    """detect.py's inference per backend (--weights the exported file): same image, so the same letterboxed input
    shape, and the same thread count (ONNX Runtime and OpenVINO take torch's), at 640."""
    import detect

    listing = tmp / "images.txt"
    listing.write_text("\n".join([str(image)] * runs) + "\n")
    from utils.data.augment import letterbox
    from utils.images import read_image

    # every export is dynamic, so every backend gets detect.py's letterbox of the image: one shape for all rows
    shape = list(letterbox(read_image(image), 640, stride=32, auto=True)[0].shape[:2])
    rows = []
    for name, path in weights.items():
        files = _exports(path, tmp / "exports" / path.stem, data)
        runs = [(backend, file, False) for backend, file in files.items()]
        if cpu_supports_bf16():  # bfloat16 where the CPU runs it natively: PyTorch autocast and OpenVINO's hint
            runs += [("PyTorch bf16", files["PyTorch float32"], True), ("OpenVINO bf16", files["OpenVINO"], True)]
        for backend, file, bf16 in runs:
            result = detect.run(
                weights=file, source=listing, imgsz=640, device="cpu", nosave=True, project=tmp / "b", bf16=bf16
            )
            inference = [r.inference_ms for r in result.results]
            rows.append({"model": name, "backend": backend, "shape": shape, "inference_ms": _stats(inference)})
    return rows


def _backend_rows(rows: list[dict]) -> list[str]:
    """Markdown rows for the backends section, each with its ratio to PyTorch float32 (min against min)."""
    out, base = [], {r["model"]: r["inference_ms"]["min"] for r in rows if r["backend"] == "PyTorch float32"}
    for r in rows:
        inf = r["inference_ms"]
        ratio = inf["min"] / base[r["model"]] if base.get(r["model"]) else float("nan")
        shape = "x".join(map(str, r.get("shape", [])))
        out.append(
            f"| backend {r['model']} {r['backend']}, --img 640, batch 1, input {shape} (h x w) | "
            f"{inf['min']}/{inf['median']} ms inference (min/median of {inf['runs']}), {ratio:.2f}x PyTorch float32 |"
        )
    return out


def _coco128_yaml(root: Path, tmp: Path) -> Path:
    """A data YAML for COCO128 at root, with its official annotation file as ground truth when present."""
    ann = root / "annotations" / "instances_train2017.json"
    lines = [f"path: {root}", "train: images/train2017", "val: images/train2017"]
    lines += [f"ann_json: {ann}"] if ann.is_file() else []
    names = json.dumps(__import__("utils.eval.coco_io", fromlist=["COCO80_NAMES"]).COCO80_NAMES)
    (tmp / "coco128.yaml").write_text("\n".join(lines + ["nc: 80", f"names: {names}"]) + "\n")
    return tmp / "coco128.yaml"


def _timed_command(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


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


def bench_train_epoch(data: Path, weights: Path, device: str, tmp: Path) -> dict:
    """Wall time of one fine-tuning epoch on COCO128 at 320, validation included (the README command)."""
    wall = _timed_command(
        [
            "train.py",
            "--data",
            str(data),
            "--weights",
            str(weights),
            "--img",
            "320",
            "--batch-size",
            "16",
            "--epochs",
            "1",
            "--workers",
            "2",
            "--device",
            device,
            "--project",
            str(tmp),
            "--name",
            "train",
            "--exist-ok",
            "--hyp",  # the official's default hyperparameters, so that its wall time compares like for like
            str(REPO / "data" / "hyp.scratch.yaml"),
        ]
    )
    return {"wall_s": round(wall, 1)}


def _training_parts(cfg: str, nc: int, imgsz: int, dev: torch.device, amp_dtype: torch.dtype | None = None):
    """train.py's model layout, optimizer groups, loss gains, EMA and GradScaler for the real training step."""
    from models.yolo import Model
    from utils.data.config import load_hyp
    from utils.torch_utils import ModelEMA
    from utils.train.loss import ComputeLoss
    from utils.train.setup import smart_optimizer
    from utils.train.step import TrainingParts, loss_gains

    model = Model(cfg, nc=nc).to(dev).train()
    if dev.type == "cpu":  # as the Trainer: oneDNN trains convolutions faster in NHWC
        model.to(memory_format=torch.channels_last)
    hyp = loss_gains(load_hyp(REPO / "data" / "hyp.scratch.yaml"), model.model[-1].nl, nc, imgsz)
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    scaler = torch.amp.GradScaler(dev.type, enabled=amp_dtype == torch.float16)
    return TrainingParts(model, optimizer, ComputeLoss(model, hyp), scaler, ModelEMA(model), amp_dtype), hyp


def _as_trainer_prepares(images: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """The Trainer's _prepare_images: uint8 -> 0-1 floats on the device, then NHWC on the CPU."""
    images = images.to(dev, non_blocking=True).float() / 255
    return images.contiguous(memory_format=torch.channels_last) if dev.type == "cpu" else images


def matmul_gflops(size: int = 2048, repeats: int = 5) -> float:
    """This machine's float32 GFLOP/s on a large matrix product (min time of repeats), with torch's threads."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up: first calls pay MKL's one-off setup
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        seconds.append(time.perf_counter() - t)
    return 2 * size**3 / min(seconds) / 1e9


def _step_gflop(parts, images: torch.Tensor, targets: torch.Tensor) -> float:
    """FLOPs of one training step (forward and backward; the optimizer and EMA add too few to count), in GFLOP."""
    from torch.utils.flop_counter import FlopCounterMode

    from utils.train.step import train_step

    with FlopCounterMode(display=False) as counter:
        train_step(parts, images, targets, update=True)
    return counter.get_total_flops() / 1e9


def bench_train_steps(
    data: Path, device: str, imgsz: int, batch: int, steps: int, cfg: str = "yolov5n.yaml", bf16: bool = False
) -> dict:
    """train.py's training step (utils.train.step: forward, loss, backward, clipping, SGD, EMA) per second on real
    augmented batches, the loader alone, and the compute floor: the step's FLOPs at the GFLOP/s of a large float32
    matrix product measured in the same run."""
    from utils.data.config import load_data_config
    from utils.data.loader import create_dataloader
    from utils.train.step import train_step

    dev = select_device(device)
    cfg_data = load_data_config(data)
    parts, hyp = _training_parts(cfg, cfg_data["nc"], imgsz, dev, torch.bfloat16 if bf16 else None)
    loader, _ = create_dataloader(cfg_data["train"], imgsz, batch, 32, hyp=hyp, augment=True, workers=2, shuffle=True)
    t0, n = time.perf_counter(), 0
    batches = []
    for i, b in enumerate(loader):
        batches.append(b)
        n += b[0].shape[0]
        if i + 1 == steps:
            break
    loader_ips = n / (time.perf_counter() - t0)

    times = []
    for i, (imgs, targets, _, _) in enumerate(batches * 2):
        t = time.perf_counter()
        train_step(parts, _as_trainer_prepares(imgs, dev), targets.to(dev), update=True)
        if i >= 1:  # the first step pays one-off allocation costs
            times.append(time.perf_counter() - t)
    images_per_s = batch / statistics.median(times)
    gflop = _step_gflop(parts, _as_trainer_prepares(batches[0][0], dev), batches[0][1].to(dev))
    result = {"imgsz": imgsz, "batch": batch, "precision": "bf16 autocast" if bf16 else "float32"}
    result |= {"train_images_per_s": round(images_per_s, 1), "loader_images_per_s": round(loader_ips, 1)}
    if dev.type == "cpu":
        gflops = matmul_gflops()
        floor = batch / (gflop / gflops)
        result |= {"step_gflop": round(gflop, 1), "matmul_gflops": round(gflops, 1)}
        result |= {"floor_images_per_s": round(floor, 1), "fraction_of_floor": round(images_per_s / floor, 2)}
    return result


def _train_steps(data: Path, device: str) -> list[dict]:
    """Training steps at 320 and 640 in float32, and under bfloat16 autocast (--amp) where the CPU has it."""
    rows = [bench_train_steps(data, device, s, 16, 6) for s in (320, 640)]
    if select_device(device).type == "cpu" and cpu_supports_bf16():
        rows += [bench_train_steps(data, device, s, 16, 6, bf16=True) for s in (320, 640)]
    return rows


def bench_metric(n_images: int) -> dict:
    """The metric step against pycocotools' evaluate() + accumulate() on COCO-val-sized synthetic input."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import metric_speed

    return metric_speed.run(n_images=n_images)


def _cuda_median_seconds(step, device: torch.device, steps: int, warmup: int = 3) -> float:
    """Median seconds of step() over steps runs after warmup runs, synchronised around each."""
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize(device)
        t = time.perf_counter()
        step()
        torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_cuda(device: str, steps: int) -> dict:
    """yolov5s at 640: AMP vs float32 training (batch 64) and FP16 vs float32 inference (batch 32)."""
    from models.yolo import Model
    from utils.train.step import train_step

    dev = select_device(device)
    out = {"gpu": torch.cuda.get_device_name(dev)}
    images = torch.rand(64, 3, 640, 640, device=dev)
    g = torch.Generator().manual_seed(0)
    targets = torch.cat(
        (
            torch.arange(64).repeat_interleave(8)[:, None].float(),
            torch.randint(0, 80, (512, 1)).float(),
            torch.rand(512, 2, generator=g) * 0.8 + 0.1,
            torch.rand(512, 2, generator=g) * 0.3 + 0.02,
        ),
        1,
    ).to(dev)
    for amp in (False, True):
        torch.manual_seed(0)
        parts, _ = _training_parts("yolov5s.yaml", 80, 640, dev, torch.float16 if amp else None)
        torch.cuda.reset_peak_memory_stats(dev)
        step = functools.partial(train_step, parts, images, targets, True)
        seconds = _cuda_median_seconds(step, dev, steps)
        key = "amp" if amp else "float32"
        out[f"train_{key}"] = {
            "images_per_s": round(64 / seconds, 1),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2),
        }
        del parts
        torch.cuda.empty_cache()
    model = Model("yolov5s.yaml").fuse().to(dev).eval()
    batch = images[:32]
    for half in (False, True):
        m, x = (model.half(), batch.half()) if half else (model.float(), batch.float())
        with torch.inference_mode():
            seconds = _cuda_median_seconds(lambda m=m, x=x: m(x), dev, steps)
        out[f"inference_{'fp16' if half else 'float32'}"] = {"images_per_s": round(32 / seconds, 1)}
    out["amp_speedup"] = round(out["train_amp"]["images_per_s"] / out["train_float32"]["images_per_s"], 2)
    out["amp_memory_ratio"] = round(out["train_amp"]["peak_memory_gib"] / out["train_float32"]["peak_memory_gib"], 2)
    out["fp16_inference_speedup"] = round(
        out["inference_fp16"]["images_per_s"] / out["inference_float32"]["images_per_s"], 2
    )
    return out


def _train_row(r: dict) -> str:
    """A markdown row for one training-step figure, with the compute floor where it was measured."""
    floor = ""
    if "floor_images_per_s" in r:
        floor = (
            f"; compute floor {r['floor_images_per_s']} images/s ({r['step_gflop']} GFLOP per step at "
            f"{r['matmul_gflops']} GFLOP/s float32 matmul): {r['fraction_of_floor']:.0%} of it"
        )
    return (
        f"| training yolov5n {r['precision']} at {r['imgsz']}, batch {r['batch']} (real step: NHWC, clipping, SGD, "
        f"EMA) | {r['train_images_per_s']} images/s{floor} (loader alone, 2 workers: "
        f"{r['loader_images_per_s']} images/s) |"
    )


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        nargs="+",
        default=["detect", "backends", "test", "train", "metric", "cuda"],
        choices=["detect", "backends", "test", "train", "metric", "cuda"],
    )
    parser.add_argument("--device", default="cpu", help="cpu, or a CUDA index for the GPU figures")
    parser.add_argument("--weights", type=Path, default=SHARED / "weights" / "yolov5n.pt")
    parser.add_argument("--coco128", type=Path, default=SHARED / "datasets" / "coco128")
    parser.add_argument("--image", type=Path, default=SHARED / "images" / "bus.jpg")
    parser.add_argument("--runs", type=int, default=20, help="timed repetitions for detect")
    parser.add_argument("--metric-images", type=int, default=5000)
    parser.add_argument("--models", nargs="+", default=["yolov5n", "yolov5s"], choices=["yolov5n", "yolov5s"])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks")
    opt = parser.parse_args(argv)
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
            if "yolov5s" in opt.models:
                weights["yolov5s (random weights)"] = _random_weights("yolov5s.yaml", tmp)
            results["backends"] = bench_backends(weights, opt.image, opt.runs, tmp, data)
        if "test" in opt.only:
            results["test"] = bench_test(data, opt.weights, opt.device, tmp, repeats=2)
        if "train" in opt.only:
            results["train_epoch"] = bench_train_epoch(data, opt.weights, opt.device, tmp)
            retain_freed_memory()  # as the Trainer does: a step's large blocks are reused, not faulted in anew
            results["train_steps"] = _train_steps(data, opt.device)
        if "metric" in opt.only:
            results["metric"] = bench_metric(opt.metric_images)
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
