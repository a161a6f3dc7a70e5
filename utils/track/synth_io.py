"""Writes the synthetic tracking scenes (utils/track/synth.py) to disk: a video with its MOTChallenge ground truth,
and still frames with YOLO labels for training a detector on the same look.

Layout of a sequence (as MOTChallenge's): <root>/<name>.mp4, <root>/<name>/gt/gt.txt, <root>/<name>/seqinfo.ini and,
with frames=True, <root>/<name>/img1/000001.jpg... Nothing is written over: each output must be absent.
python -m utils.track.synth_io --root DIR [--frames N] [--seed S] [--occluders K] [--shake PX] [--jpg] [--detection-set]
"""

import argparse
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np

from utils.data.shapes import CLASSES
from utils.errors import ShapesError
from utils.track.synth import SceneOptions, SceneRenderer

LABEL_VISIBILITY = 0.35  # a still frame labels an object only when this share of it shows (else it is background)


def _claim(path: Path) -> Path:
    """path, which must not exist yet (we never write over a user's file); its parent is created."""
    if path.exists():
        raise ShapesError(f"{path} exists: generated files are only written to new paths (nothing was changed)")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_sequence(root: str | Path, options: SceneOptions, name: str = "synth", frames: bool = False) -> Path:
    """Render a sequence into root (see the module docstring); returns the video's path."""
    root = Path(root)
    video_path = _claim(root / f"{name}.mp4")
    gt_path = _claim(root / name / "gt" / "gt.txt")
    img_dir = _claim(root / name / "img1") if frames else None
    if img_dir:
        img_dir.mkdir()
    fps = 30
    writer = cv2.VideoWriter(str(video_path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (options.width, options.height))
    if not writer.isOpened():
        raise ShapesError(f"OpenCV cannot write the video {video_path}")
    try:
        with open(gt_path, "w", encoding="utf-8") as gt:
            for t, (img, rows) in enumerate(SceneRenderer(options)):
                writer.write(img)
                if img_dir:
                    cv2.imwrite(str(img_dir / f"{t + 1:06d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
                for track_id, cls, x, y, w, h, vis in rows:
                    gt.write(f"{t + 1},{track_id},{x:.2f},{y:.2f},{w:.2f},{h:.2f},1,{cls + 1},{vis:.3f}\n")
    finally:
        writer.release()
    info = (
        f"[Sequence]\nname={name}\nimDir=img1\nframeRate={fps}\nseqLength={options.frames}\n"
        f"imWidth={options.width}\nimHeight={options.height}\nimExt=.jpg\n"
    )
    (root / name / "seqinfo.ini").write_text(info, encoding="utf-8")
    return video_path


def write_detection_set(root: str | Path, options: SceneOptions, n_train: int, n_val: int) -> Path:
    """Still frames drawn from scenes of other seeds than options.seed, with YOLO labels for every object that shows
    at least LABEL_VISIBILITY of itself, in the shapes dataset's layout and classes; returns root."""
    root = Path(root)
    if root.exists():
        raise ShapesError(f"{root} exists: the detection set is only written into a new folder (nothing was changed)")
    rng = np.random.default_rng([options.seed, 3])
    for split, n, seed_base in (("train", n_train, 1000), ("val", n_val, 2000)):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        per_scene = 40
        for i in range(n):
            if i % per_scene == 0:
                renderer = SceneRenderer(replace(options, seed=options.seed + seed_base + i // per_scene))
            img, rows = renderer.frame(int(rng.integers(options.frames)))
            lines = "".join(
                f"{cls} {(x + w / 2) / img.shape[1]:.6f} {(y + h / 2) / img.shape[0]:.6f} "
                f"{w / img.shape[1]:.6f} {h / img.shape[0]:.6f}\n"
                for _, cls, x, y, w, h, vis in rows
                if vis >= LABEL_VISIBILITY
            )
            cv2.imwrite(str(root / "images" / split / f"{split}_{i:05d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 92])
            (root / "labels" / split / f"{split}_{i:05d}.txt").write_text(lines, encoding="utf-8")
    names = f"[{', '.join(CLASSES)}]"
    (root / "data.yaml").write_text(f"path: {root.resolve()}\ntrain: images/train\nval: images/val\nnames: {names}\n")
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description="Generate a synthetic tracking video with ground truth")
    ap.add_argument("--root", required=True, help="output folder (the files it writes must not exist)")
    ap.add_argument("--name", default="synth", help="sequence name")
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--width", type=int, default=480)
    ap.add_argument("--height", type=int, default=288)
    ap.add_argument("--objects", type=int, default=9, help="about how many objects are in view at once")
    ap.add_argument("--pan", type=float, default=0.35, help="camera pan either side, as a share of the width")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--occluders", type=int, default=0, help="static pillars in front of the objects")
    ap.add_argument("--shake", type=float, default=0.0, help="camera jitter in pixels, on top of the pan")
    ap.add_argument("--jpg", action="store_true", help="also write the frames as img1/*.jpg")
    ap.add_argument("--detection-set", nargs=2, type=int, metavar=("N_TRAIN", "N_VAL"), help="write still frames")
    args = ap.parse_args()
    options = SceneOptions(
        args.frames, args.width, args.height, args.objects, args.pan, args.seed, args.occluders, args.shake
    )
    if args.detection_set:
        root = write_detection_set(args.root, options, *args.detection_set)
        print(f"detection set written to {root}")
    else:
        print(f"sequence written to {write_sequence(args.root, options, args.name, args.jpg)}")
    return 0


if __name__ == "__main__":
    from utils.cli import run_cli

    raise SystemExit(run_cli(main))
