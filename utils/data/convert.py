"""The dataset converter: a data YAML's COCO JSON / VOC splits written out as a YOLO dataset (images/ as links or
copies, labels/ as text files, a data YAML) into a NEW folder, never into or over the source.

The label files hold the very rows training on the annotations uses (utils.data.annotations), each number
written exactly (the float64 repr of the float32 value), so the converted dataset trains to the same numbers.
"""

import glob
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from utils.data.annotation_rows import SplitAnnotations, path_inside
from utils.data.annotations import COCO, AnnotatedSplit
from utils.data.config import load_data_config
from utils.data.verify import checked_image, img2label_paths, inside_image, size_problem
from utils.errors import DatasetError
from utils.files import record_maker, remove_abandoned_folders
from utils.log import LOGGER, one_line

SPLITS = ("train", "val", "test")

OWNER = ".yolo-convert-owner"  # in the private folder a conversion writes into: a SIGKILLed one's is removed next run


@dataclass
class ConvertOptions:
    """What to convert and where: the data YAML, a new (or empty) output folder, copies instead of links, and
    segments: label rows as polygons (a COCO object's outline, `cls x1 y1 x2 y2 ...`; an object without one stays
    a box row), for segment training."""

    data: str | Path
    out: str | Path
    copy: bool = False
    segments: bool = False


@dataclass
class ConvertResult:
    """The YAML written and, per split, the number of images and boxes written."""

    yaml_file: Path
    images: dict[str, int]
    boxes: dict[str, int]


def _format_row(row, outline: np.ndarray | None = None) -> str:
    """One label line, a box or (with an outline of 3+ vertices) a polygon, as much of it as lies inside the image
    (what training on the annotations keeps); float(v) of a float32 is exact, and repr round-trips it: the same
    float32 when read back."""
    if outline is not None and len(outline) >= 3:
        points = inside_image(np.asarray(outline, np.float64))[0].astype(np.float32)
        if len(points) >= 3:
            return " ".join([str(int(row[0]))] + [repr(float(v)) for v in points.ravel()])
    return " ".join([str(int(row[0]))] + [repr(float(v)) for v in row[1:]])


def _source_paths(cfg: dict, splits: dict[str, AnnotatedSplit]) -> list[Path]:
    """Everything the conversion reads: the dataset root, the annotation files and the images folders."""
    paths = [Path(cfg["path"])] + [Path(s) for s in splits.values()]
    paths += [Path(s.image_folder()) for s in splits.values()]
    return [p.resolve() for p in paths]


def _check_target(out: Path, sources: list[Path]) -> None:
    """A target that does not exist, or an empty folder, and that neither holds nor lies in anything read."""
    target = out.resolve()
    for src in sources:
        if target == src or target.is_relative_to(src) or src.is_relative_to(target):
            raise DatasetError(f"{out} overlaps the source {src}: choose a folder outside the dataset")
    if os.path.lexists(out) and (not out.is_dir() or out.is_symlink() or any(out.iterdir())):
        raise DatasetError(f"{out} exists and is not an empty folder: the converter writes only into a new folder")


def _targets(work: Path, dest: Path, image: str, base: Path) -> tuple[Path, Path]:
    """Where an image of the split and its label file are written: dest/<its path under base>, and the label
    file beside, checked (utils.data.annotation_rows.path_inside) to stay inside the output."""
    target = path_inside(dest, os.path.relpath(image, base))
    label = target and Path(img2label_paths([str(target)])[0])
    if target is None or path_inside(work, os.path.relpath(label, work)) is None:
        raise DatasetError(f"{image} is not inside {base}: it would be written outside the output, nothing is")
    return target, label


def _checked(image: str, size: tuple[float, float]) -> tuple[bytes | None, str]:
    """The image's bytes when training would use it (utils.data.verify.checked_image) and its annotated size is its
    own, else None and why: the converter leaves out what training on the annotations leaves out."""
    try:
        raw, shown, stored = checked_image(image)
    except (OSError, ValueError) as e:
        return None, getattr(e, "strerror", None) or one_line(e)
    problem = size_problem(size, shown, stored)
    return (None, problem) if problem else (raw, "")


def _write_split(split: AnnotatedSplit, found: SplitAnnotations, work: Path, key: str, copy: bool) -> tuple[int, int]:
    """work/images/<key>/<the image's path under its folder> (link, or a copy of the bytes checked) and its label
    file, for each image training would use; (images, boxes) written. DatasetError when two images would share one
    label file (x.jpg, x.png) or none could be written."""
    base, dest = Path(split.image_folder()), work / "images" / key
    labels_of, skipped, boxes = {}, [], 0
    outlines = found.polygons or [[None] * len(rows) for rows in found.rows]
    for image, rows, size, image_outlines in zip(found.images, found.rows, found.sizes, outlines):
        raw, problem = _checked(image, size)
        if raw is None:
            skipped.append(f"{image}: {problem}")
            continue
        target, label = _targets(work, dest, image, base)
        if label in labels_of:
            raise DatasetError(
                f"{labels_of[label]} and {image} would share the label file {label.relative_to(work)}: a YOLO "
                "dataset pairs images and labels by name without the extension (rename one)"
            )
        labels_of[label] = image
        target.parent.mkdir(parents=True, exist_ok=True)
        if copy:
            target.write_bytes(raw)  # the bytes checked, not the file read again
        else:
            os.symlink(os.path.abspath(image), target)
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("".join(_format_row(r, o) + "\n" for r, o in zip(rows, image_outlines)))
        boxes += len(rows)
    if skipped:
        LOGGER.warning(f"WARNING: {key}: left out {len(skipped)} images training would not use, e.g. {skipped[0]}")
    if not labels_of:
        raise DatasetError(f"no image of the {key} split ({split}) could be converted: nothing written")
    return len(labels_of), boxes


def _data_yaml(cfg: dict, folders: dict[str, str], ann_json: str | None, source: str) -> str:
    content = {**folders, "nc": cfg["nc"], "names": dict(enumerate(cfg["names"]))}
    if ann_json:
        content["ann_json"] = ann_json
    header = (
        f"# YOLO dataset written by convert_dataset.py from {source}\n"
        "# path is left out: the dataset root is this file's folder\n"
    )
    return header + yaml.safe_dump(content, sort_keys=False, allow_unicode=True)


def convert_dataset(opts: ConvertOptions) -> ConvertResult:
    """Write the COCO JSON / VOC splits of opts.data as a YOLO dataset in opts.out (see the module docstring).
    Everything is written into a temporary folder beside opts.out and renamed into place at the end, so a failed
    run leaves nothing (a killed one's folder is removed by the next conversion into the same place);
    DatasetError (one line) for a target that exists or overlaps the source."""
    cfg = load_data_config(opts.data)
    splits = {k: cfg[k] for k in SPLITS if isinstance(cfg.get(k), AnnotatedSplit)}
    if not splits:
        raise DatasetError(f"{cfg['yaml_file']} names no COCO JSON or VOC split: nothing to convert")
    out = Path(opts.out).expanduser().absolute()
    _check_target(out, _source_paths(cfg, splits))
    work = out.parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_folders(out.parent, f".{glob.escape(out.name)}.*.tmp", OWNER, "a conversion")
    work.mkdir()
    record_maker(work, OWNER)
    try:
        result = _convert_into(work, cfg, splits, opts.copy, opts.segments)
        (work / OWNER).unlink()
        if out.is_dir():
            out.rmdir()  # empty (checked above); replaced by the finished folder
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    result.yaml_file = out / result.yaml_file.name
    LOGGER.info(f"Converted {', '.join(f'{k}: {n} images' for k, n in result.images.items())} into {out}")
    return result


def _convert_into(
    work: Path, cfg: dict, splits: dict[str, AnnotatedSplit], copy: bool, segments: bool = False
) -> ConvertResult:
    folders, written, images, boxes = {}, {}, {}, {}
    for key, split in splits.items():
        same = next((k for k, s in written.items() if s == split and s.recipe() == split.recipe()), None)
        if same is not None:  # the same annotations for two splits (COCO128's train and val): written once
            folders[key], images[key], boxes[key] = folders[same], images[same], boxes[same]
            continue
        images[key], boxes[key] = _write_split(split, split.annotations(segments), work, key, copy)
        folders[key], written[key] = f"images/{key}", split
    for key in SPLITS:  # splits of YOLO label files stay where they are
        if key not in splits and isinstance(cfg.get(key), (str, list)):
            folders[key] = cfg[key]
    ann_json = None
    val = cfg.get("val")
    if isinstance(
        cfg.get("ann_json"), str
    ):  # the evaluation's ground truth (crowd regions, areas) travels with the dataset
        (work / "annotations").mkdir()
        ann_json = f"annotations/{Path(cfg['ann_json']).name}"
        shutil.copy2(cfg["ann_json"], work / ann_json)
    elif isinstance(val, AnnotatedSplit) and val.kind == COCO:
        LOGGER.info(f"{val}: not copied as ann_json (its categories are not the data's classes in id order)")
    yaml_file = work / "data.yaml"
    yaml_file.write_text(_data_yaml(cfg, folders, ann_json, cfg["yaml_file"]))
    return ConvertResult(yaml_file, images, boxes)
