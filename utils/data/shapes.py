"""A small deterministic synthetic detection dataset: coloured geometric shapes on noisy backgrounds.

Layout (YOLO): <root>/images/{train,val}/*.jpg and <root>/labels/{train,val}/*.txt. data/shapes.yaml points at
../datasets/shapes and generates it on first use; it is only ever written into an absent or empty folder. Each
class has its own shape and colour family, so a nano model trained from scratch for a few epochs learns it. With
polygons the same images are labelled with each shape's outline, YOLO segment rows (cls x1 y1 x2 y2 ...,
normalised; a circle as a CIRCLE_VERTICES-gon). data/shapes-seg.yaml's set (../datasets/shapes-seg3) has polygons
and only the first three classes, so that the segment quickstart learns it within its 3 CPU minutes.
"""

import argparse
import math
import os
import secrets
import shutil
from pathlib import Path

import cv2
import numpy as np

from utils.errors import ShapesError
from utils.files import REPO_ROOT

CLASSES = ("circle", "square", "triangle", "star", "cross")
# BGR base colour of each class: red, green, blue, white, magenta. Per-object jitter stays well apart from the
# other classes (a first version with yellow stars had them confused with green squares after a short training).
COLORS = ((40, 40, 220), (40, 200, 40), (220, 80, 30), (235, 235, 235), (210, 40, 210))
DEFAULT_ROOT = REPO_ROOT.parent / "datasets" / "shapes"  # beside the checkout, as YOLOv5 keeps datasets
N_TRAIN, N_VAL, IMG_SIZE, SEED = 400, 60, 256, 0
SEGMENT_ROOT = REPO_ROOT.parent / "datasets" / "shapes-seg3"  # data/shapes-seg.yaml's set: polygons, 3 classes
CIRCLE_VERTICES = 32  # a circle's outline: within 0.5% of its radius, its box exactly the circle's


def _polygon(cls: int, cx: float, cy: float, r: float, angle: float) -> np.ndarray:
    """Vertices (k, 2) of a shape of radius r centred at (cx, cy), rotated by angle (radians)."""
    if cls == 1:  # square
        t = np.arange(4) * math.pi / 2 + math.pi / 4
        radii = np.full(4, r)
    elif cls == 2:  # triangle
        t = np.arange(3) * 2 * math.pi / 3 - math.pi / 2
        radii = np.full(3, r)
    elif cls == 3:  # five-pointed star
        t = np.arange(10) * math.pi / 5 - math.pi / 2
        radii = np.where(np.arange(10) % 2, 0.45 * r, r)
    else:  # cross (plus sign) with arms a third of its size thick
        a, b = r / 3, r
        pts = np.array(
            [(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b), (-a, a), (-b, a), (-b, -a), (-a, -a)]
        )
        rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        return pts @ rot.T + (cx, cy)
    t = t + angle
    return np.stack((cx + radii * np.cos(t), cy + radii * np.sin(t)), 1)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A greyish gradient with blurred noise texture (mid grey, low saturation: every class colour stands out)."""
    base = rng.uniform(80, 160)
    tint = rng.uniform(-15, 15, 3)
    ramp = np.linspace(-1, 1, size, dtype=np.float32)
    gx, gy = rng.uniform(-20, 20, 2)
    img = base + gx * ramp[None, :, None] + gy * ramp[:, None, None] + tint.astype(np.float32)
    texture = cv2.GaussianBlur(rng.normal(0, 25, (size, size, 1)).astype(np.float32), (0, 0), 3)[..., None]
    img = img + texture + rng.normal(0, 6, (size, size, 3)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _circle(cx: float, cy: float, r: float) -> np.ndarray:
    t = np.arange(CIRCLE_VERTICES) * 2 * math.pi / CIRCLE_VERTICES
    return np.stack((cx + r * np.cos(t), cy + r * np.sin(t)), 1)


def _draw_image(
    rng: np.random.Generator, size: int, n_classes: int = len(CLASSES)
) -> tuple[np.ndarray, list[tuple], list[np.ndarray]]:
    """One image with 2-5 non-overlapping shapes of the first n_classes classes (fewer shapes if they do not fit),
    their labels (cls, cx, cy, w, h) and their outlines (normalised (k, 2) vertices)."""
    img = _background(rng, size)
    boxes, labels, outlines = [], [], []
    for _ in range(int(rng.integers(2, 6))):
        for _attempt in range(20):  # rejection-sample a free spot
            cls = int(rng.integers(n_classes))
            r = rng.uniform(0.06, 0.19) * size  # objects 12%-38% of the image across
            cx, cy = rng.uniform(r, size - r, 2)
            angle = math.radians(rng.uniform(-20, 20))  # near upright: one clear look per class
            pts = _polygon(cls, cx, cy, r, angle) if cls else None
            x1, y1, x2, y2 = (cx - r, cy - r, cx + r, cy + r) if pts is None else (*pts.min(0), *pts.max(0))
            x1, y1, x2, y2 = max(x1, 0), max(y1, 0), min(x2, size), min(y2, size)
            if all(x1 > b[2] + 2 or x2 < b[0] - 2 or y1 > b[3] + 2 or y2 < b[1] - 2 for b in boxes):
                break
        else:
            continue
        color = tuple(int(c) for c in np.clip(np.array(COLORS[cls]) + rng.integers(-25, 26, 3), 0, 255))
        if pts is None:
            cv2.circle(img, (round(cx * 16), round(cy * 16)), round(r * 16), color, -1, cv2.LINE_AA, shift=4)
        else:
            cv2.fillPoly(img, [np.round(pts * 16).astype(np.int32)], color, cv2.LINE_AA, shift=4)
        boxes.append((x1, y1, x2, y2))
        labels.append((cls, (x1 + x2) / 2 / size, (y1 + y2) / 2 / size, (x2 - x1) / size, (y2 - y1) / size))
        outlines.append(np.clip((_circle(cx, cy, r) if pts is None else pts) / size, 0, 1))
    return img, labels, outlines


def _write_split(
    folder: Path, split: str, n: int, size: int, rng: np.random.Generator, polygons: bool, n_classes: int
) -> None:
    (folder / "images" / split).mkdir(parents=True)
    (folder / "labels" / split).mkdir(parents=True)
    for i in range(n):
        img, labels, outlines = _draw_image(rng, size, n_classes)
        name = f"{split}_{i:05d}"
        cv2.imwrite(str(folder / "images" / split / f"{name}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 92])
        if polygons:
            rows = [
                f"{row[0]} " + " ".join(f"{v:.6f}" for v in points.ravel()) for row, points in zip(labels, outlines)
            ]
            lines = "".join(f"{row}\n" for row in rows)
        else:
            lines = "".join(f"{c} {x:.6f} {y:.6f} {w:.6f} {h:.6f}\n" for c, x, y, w, h in labels)
        (folder / "labels" / split / f"{name}.txt").write_text(lines)


def is_occupied(root: Path) -> bool:
    """True when root exists and is not an empty folder (a file, or a folder with anything in it)."""
    try:
        return root.exists() and (not root.is_dir() or any(root.iterdir()))
    except OSError as e:
        raise ShapesError(f"cannot look into {root}: {e.strerror or e}") from None


def _check_target(root: Path) -> None:
    """Refuse a root that exists and is not an empty folder: generating never deletes or writes over anything."""
    if is_occupied(root):
        raise ShapesError(
            f"{root} exists and is not empty: the shapes dataset is only written into an absent or empty folder "
            "(nothing was changed; choose another folder, or remove this one yourself to regenerate it)"
        )


def generate_shapes(
    root: str | Path = DEFAULT_ROOT,
    n_train: int = N_TRAIN,
    n_val: int = N_VAL,
    img_size: int = IMG_SIZE,
    seed: int = SEED,
    polygons: bool = False,
    n_classes: int = len(CLASSES),
) -> Path:
    """Write the shapes dataset (train and val splits) into root, which must be absent or an empty folder (else
    ShapesError, nothing changed); same arguments, same bytes. polygons: label rows are the shapes' outlines
    (segment labels; the images are the same). n_classes: only the first n_classes of CLASSES are drawn (the
    segment quickstart's set has 3). Returns root."""
    if not 1 <= n_classes <= len(CLASSES):
        raise ShapesError(f"n_classes must be 1 to {len(CLASSES)}, not {n_classes}")
    root = Path(root).resolve()
    _check_target(root)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = root.parent / f".{root.name}.{secrets.token_hex(4)}.tmp"
        tmp.mkdir()  # a new name of our own: fails rather than reuse anything that exists
    except OSError as e:
        raise ShapesError(f"cannot create the shapes dataset in {root.parent}: {e.strerror or e}") from None
    try:
        # one generator per split, so the val split does not change when n_train does
        for split, n, offset in (("train", n_train, 0), ("val", n_val, 1)):
            _write_split(tmp, split, n, img_size, np.random.default_rng([seed, offset]), polygons, n_classes)
        # the finished dataset moves in at once: an interrupted run never leaves a half-written one behind
        if root.is_dir():
            root.rmdir()  # empty (checked above); rmdir itself refuses a folder that has been filled since
        os.rename(tmp, root)  # fails, changing nothing, if root has reappeared meanwhile
    except OSError as e:
        raise ShapesError(f"cannot create the shapes dataset in {root}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # our own staging folder (gone already after the rename)
    return root


def write_data_yaml(root: str | Path, file: str | Path) -> Path:
    """A data YAML for the shapes dataset at root (train and val splits, the five class names); returns file."""
    file = Path(file)
    names = f"[{', '.join(CLASSES)}]"
    file.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames: {names}\n", encoding="utf-8")
    return file


def main() -> int:
    """Command line: python -m utils.data.shapes [--root DIR] [--n-train N] [--n-val N] [--img SIZE] [--seed S]
    [--polygons] [--classes N]."""
    ap = argparse.ArgumentParser(description="Generate the synthetic shapes detection dataset")
    ap.add_argument("--root", default=str(DEFAULT_ROOT), help="output folder (absent or empty)")
    ap.add_argument("--n-train", type=int, default=N_TRAIN)
    ap.add_argument("--n-val", type=int, default=N_VAL)
    ap.add_argument("--img", type=int, default=IMG_SIZE, help="image size (square, px)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--polygons", action="store_true", help="segment labels: each shape's outline as a polygon row")
    ap.add_argument("--classes", type=int, default=len(CLASSES), help=f"draw only the first N of {', '.join(CLASSES)}")
    args = ap.parse_args()
    root = generate_shapes(args.root, args.n_train, args.n_val, args.img, args.seed, args.polygons, args.classes)
    print(f"shapes dataset written to {root} ({args.n_train} train, {args.n_val} val images)")
    return 0


if __name__ == "__main__":
    from utils.cli import run_cli

    raise SystemExit(run_cli(main))
