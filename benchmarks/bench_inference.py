"""Inference benchmarks: detect.py's engine per image, and every exported backend on the same input shape and
threads (float32, bf16 and int8 rows), with the CPU's ISA flags.
"""

from pathlib import Path

import torch
from bench_common import _stats

from utils.torch_utils import cpu_supports_bf16


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
    from models.export.exporter import ExportOptions, export

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
