"""GPU check of mixed-precision training: python scripts/gpu_check.py [--steps 300] [--img 320] [--batch 32]

1. Trains yolov5s (--cfg: another, e.g. yolo11n.yaml) for --steps steps with train.py's own training step
   (utils.train.step: warmup, loss gains,
   FP16 autocast + GradScaler, clipping, EMA) on the synthetic shapes data: every loss must be finite, the loss
   must fall and the scaler's scale must move (a short growth interval makes it grow).
2. Saves that model, optimizer and scaler as a checkpoint, reloads it with torch.load(weights_only=True): weights
   FP16, scaler scale restored, FP16 outputs of the reloaded model close to FP32.
3. Runs train.py end to end on the GPU (AMP check, checkpoints, validation), then FP16 detection with detect.py
   and FP16 vs FP32 validation of its best.pt with test.py.
Prints a summary; exits 1 when a check fails, 0 (with a message) on a machine without CUDA.
--device cpu runs the same steps on the CPU under bfloat16 autocast, a quick smoke test of this script.
"""

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.optim import lr_scheduler  # noqa: E402

from models.nn.yolo import Model  # noqa: E402
from models.weights.checkpoint import checkpoint_dict, load_model, save_checkpoint  # noqa: E402
from utils.data.config import load_data_config  # noqa: E402
from utils.data.hyp import load_hyp  # noqa: E402
from utils.data.loader import create_dataloader  # noqa: E402
from utils.data.shapes import generate_shapes, write_data_yaml  # noqa: E402
from utils.eval.validate_weights import run as validate_weights  # noqa: E402
from utils.torch_utils import ModelEMA, cpu_supports_bf16, prefers_channels_last  # noqa: E402
from utils.train.setup import build_loss, lr_lambda, smart_optimizer  # noqa: E402
from utils.train.step import (  # noqa: E402
    TrainingParts,
    apply_warmup,
    loss_gains,
    prepare_images,
    train_step,
    warmup_values,
)

MODEL = {"cfg": "yolov5s.yaml"}  # the model config every part trains (--cfg)


class CheckFailed(Exception):
    """A GPU check that did not hold; the message says which."""


def check(condition: bool, message: str) -> None:
    """Raise CheckFailed(message) unless condition holds."""
    if not condition:
        raise CheckFailed(message)


def make_shapes(folder: Path, n_train: int, img: int) -> Path:
    """Generate a shapes dataset under folder and return its data YAML."""
    root = generate_shapes(folder / "shapes", n_train=n_train, n_val=64, img_size=img)
    return write_data_yaml(root, folder / "shapes.yaml")


def _amp_parts(data: dict, img: int, device: torch.device) -> tuple[TrainingParts, dict, lr_scheduler.LambdaLR]:
    """yolov5s with train.py's optimizer groups, schedule, loss gains and EMA, and a GradScaler that grows fast."""
    low = torch.float16 if device.type == "cuda" else torch.bfloat16
    model = Model(MODEL["cfg"], nc=data["nc"]).to(device).train()
    if prefers_channels_last(device):  # the layout the Trainer trains in
        model.to(memory_format=torch.channels_last)
    hyp_file = model.family.hyp_file  # the family's default, as train.py picks
    hyp = loss_gains(load_hyp(hyp_file), model.model[-1].nl, data["nc"], img, scaled=model.family.anchors)
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda(1, hyp["lrf"]))
    scaler = torch.amp.GradScaler(device.type, growth_interval=10)  # grows after 10 clean steps: the scale must move
    parts = TrainingParts(model, optimizer, build_loss(model, hyp), scaler, ModelEMA(model), amp_dtype=low)
    return parts, hyp, scheduler


def _checkpoint_round_trip(parts: TrainingParts, images: torch.Tensor, folder: Path) -> tuple[float, Path]:
    """Part 2: FP16 weights plus optimizer and scaler state, loadable without unpickling code; the FP16 vs FP32
    confidence difference of the reloaded model, and the file."""
    model, optimizer, scaler, low = parts.model, parts.optimizer, parts.scaler, parts.amp_dtype
    device = images.device
    file = folder / "amp_check.pt"
    save_checkpoint(checkpoint_dict(model, optimizer=optimizer.state_dict(), scaler=scaler.state_dict()), file)
    ckpt = torch.load(file, map_location="cpu", weights_only=True)
    check(
        all(v.dtype == torch.float16 for v in ckpt["model"].values() if v.is_floating_point()),
        "checkpoint weights are not all FP16",
    )
    restored = torch.amp.GradScaler(device.type)
    restored.load_state_dict(ckpt["scaler"])
    check(restored.get_scale() == scaler.get_scale(), "GradScaler scale not restored from the checkpoint")
    fp32 = load_model(file, device=device)
    fp16 = load_model(file, device=device).to(low)
    with torch.no_grad():
        y32 = fp32(images)[0]
        y16 = fp16(images.to(low))[0].float()
    # detection confidence = objectness x best class score (the anchor-free family's objectness is always 1)
    conf_diff = float(((y16[..., 4:5] * y16[..., 5:]).amax(-1) - (y32[..., 4:5] * y32[..., 5:]).amax(-1)).abs().max())
    check(bool(torch.isfinite(y16).all()) and conf_diff < 0.05, f"FP16 outputs differ from FP32 (conf {conf_diff:.3g})")
    return conf_diff, file


def amp_training(
    data_yaml: Path, steps: int, img: int, batch: int, workers: int, folder: Path, device: torch.device
) -> dict:
    """Part 1 and 2: train.py's training step under AMP on yolov5s (with its warmup), then a checkpoint round trip."""
    data = load_data_config(data_yaml)
    parts, hyp, scheduler = _amp_parts(data, img, device)
    optimizer, scaler = parts.optimizer, parts.scaler
    loader = create_dataloader(
        data["train"], img, batch, 32, hyp=hyp, augment=True, workers=workers, shuffle=True, nc=data["nc"]
    )[0]
    n_warmup = max(round(hyp["warmup_epochs"] * len(loader)), 100)
    targets_lr = [g["initial_lr"] * scheduler.lr_lambdas[0](0) for g in optimizer.param_groups]
    losses, scales, skipped, last_update = [], [scaler.get_scale()], 0, -1
    t0 = time.time()
    while len(losses) < steps:
        for imgs, targets, _, _ in loader:
            i = len(losses)
            warm = warmup_values(i, n_warmup, targets_lr, hyp, batch)
            apply_warmup(optimizer, warm)
            imgs = prepare_images(imgs, device, img, 32, multi_scale=False, channels_last=prefers_channels_last(device))
            before = scaler.get_scale()
            update = i - last_update >= warm.accumulate
            step = train_step(parts, imgs, targets.to(device), update)
            check(step.skipped != "loss", f"non-finite loss {step.loss_items.tolist()} at step {i}")
            last_update = i if update else last_update
            skipped += scaler.get_scale() < before  # a shrinking scale means the step was skipped (inf grads)
            losses.append(float(step.loss_items.sum()))
            scales.append(scaler.get_scale())
            if len(losses) >= steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    step_ms = (time.time() - t0) / steps * 1000
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    check(len(set(scales)) > 1, f"GradScaler scale never moved from {scales[0]}")
    check(last < first, f"loss did not fall: {first:.4f} over the first 20 steps, {last:.4f} over the last 20")

    conf_diff, file = _checkpoint_round_trip(parts, imgs[:4], folder)
    return {
        "steps": steps,
        "ms/step": round(step_ms, 1),
        "loss first20": round(first, 4),
        "loss last20": round(last, 4),
        "scale start": scales[0],
        "scale end": scales[-1],
        "scale distinct": len(set(scales)),
        "skipped steps": int(skipped),
        "fp16 vs fp32 max conf diff": round(conf_diff, 5),
        "checkpoint MB": round(file.stat().st_size / 1e6, 2),
    }


def _train_py(data_yaml: Path, img: int, batch: int, epochs: int, workers: int, folder: Path, device: str) -> dict:
    """train.py --amp from scratch: exit 0, FP16 weights-only best.pt, one finite results.csv row per epoch."""
    import train

    args = f"--data {data_yaml} --cfg {MODEL['cfg']} --img {img} --batch-size {batch} --epochs {epochs} "
    args += f"--device {device} --workers {workers} --project {folder / 'runs'} --name gpu --exist-ok --amp"
    t0 = time.time()
    rc = train.main(train.parse_opt(args.split() + ["--weights", ""]))
    check(rc == 0, f"train.py exited with {rc}")
    run_dir = folder / "runs" / "gpu"
    best = run_dir / "weights" / "best.pt"
    ckpt = torch.load(best, map_location="cpu", weights_only=True)
    check(
        all(v.dtype == torch.float16 for v in ckpt["model"].values() if v.is_floating_point()),
        "best.pt weights are not all FP16",
    )
    check("optimizer" not in ckpt, "best.pt still holds the optimizer")
    rows = (run_dir / "results.csv").read_text().strip().splitlines()
    check(len(rows) == epochs + 1, f"results.csv has {len(rows) - 1} epoch rows, expected {epochs}")
    last_row = dict(zip(rows[0].split(","), rows[-1].split(",")))
    check(all(math.isfinite(float(v)) for v in last_row.values()), f"non-finite values in results.csv: {rows[-1]}")
    return {"train.py wall s": round(time.time() - t0, 1), "final epoch": rows[-1], "best": best}


def _low_precision_maps(data: dict, best: Path, img: int, batch: int, device: str, folder: Path) -> dict:
    """mAP50-95 of best.pt through test.py's side of validation, in low precision (True) and float32 (False)."""
    on_gpu = device != "cpu"
    low = {"half": True} if on_gpu else {"bf16": cpu_supports_bf16()}
    maps = {}
    for half in (True, False):
        result = validate_weights(
            data,
            weights=best,
            batch_size=batch,
            imgsz=img,
            device=device,
            plots=False,
            project=folder / "val",
            name="fp16" if half else "fp32",
            exist_ok=True,
            **(low if half else {"half": False if on_gpu else None}),
        )
        maps[half] = result.metrics.map
    return maps


def end_to_end(data_yaml: Path, img: int, batch: int, epochs: int, workers: int, folder: Path, device: str) -> dict:
    """Part 3: train.py on the GPU, then FP16 detection and FP16/FP32 validation of its best.pt."""
    import detect

    summary = _train_py(data_yaml, img, batch, epochs, workers, folder, device)
    best = summary.pop("best")
    data = load_data_config(data_yaml)
    found = detect.run(
        weights=best,
        source=data["val"],
        imgsz=img,
        device=device,
        half=device != "cpu",
        conf_thres=0.1,
        nosave=True,
        project=folder / "detect",
        name="fp16",
        exist_ok=True,
    )
    n_boxes = sum(len(r.boxes) for r in found.results)
    check(all(torch.isfinite(torch.as_tensor(r.boxes)).all() for r in found.results), "non-finite FP16 detections")
    maps = _low_precision_maps(data, best, img, batch, device, folder)
    check(abs(maps[True] - maps[False]) < 0.01, f"FP16 mAP50-95 {maps[True]:.4f} vs FP32 {maps[False]:.4f}")
    return summary | {
        "best.pt MB": round(best.stat().st_size / 1e6, 2),
        "fp16 detections (conf>0.1)": n_boxes,
        "detect ms/img": [round(x, 2) for x in found.speed_ms],
        "mAP50-95 fp16": round(maps[True], 4),
        "mAP50-95 fp32": round(maps[False], 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="AMP training steps of part 1")
    ap.add_argument("--cfg", default="yolov5s.yaml", help="model config to train, e.g. yolo11n.yaml")
    ap.add_argument("--img", type=int, default=320)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=5, help="train.py epochs of part 3")
    ap.add_argument("--n-train", type=int, default=1024, help="shapes training images to generate")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="0", help="CUDA device index, or cpu for a bfloat16 smoke test of the script")
    args = ap.parse_args(argv)
    MODEL["cfg"] = args.cfg
    if args.device != "cpu" and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU available here, nothing to check (run it on a machine with one)")
        return 0
    device = torch.device("cpu") if args.device == "cpu" else torch.device(f"cuda:{args.device}")
    where = "CPU" if device.type == "cpu" else torch.cuda.get_device_name(device)
    print(f"gpu_check on {where}, torch {torch.__version__}")
    summary = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            data_yaml = make_shapes(folder, args.n_train, args.img)
            summary["amp"] = amp_training(data_yaml, args.steps, args.img, args.batch, args.workers, folder, device)
            summary["train.py"] = end_to_end(
                data_yaml, args.img, args.batch, args.epochs, args.workers, folder, args.device
            )
    except CheckFailed as e:
        print(f"gpu_check FAILED: {e}")
        for part, values in summary.items():
            print(f"  {part}: {values}")
        return 1
    print("gpu_check passed")
    for part, values in summary.items():
        for k, v in values.items():
            print(f"  {part:9s} {k:28s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
