"""A COCO annotations JSON as the ground truth of a list of image files: image ids, category table, size check.

Validation scores against the official JSON when there is one (crowd regions and areas as the protocol wants
them). These functions tie the dataset's files to the JSON's images (by file_name, then numeric stem) and its
categories to the data's classes; anything that does not fit raises MetricsError with a one-line message.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.errors import MetricsError
from utils.eval.coco_io import COCO80_NAMES, COCO80_TO_91, CocoGroundTruth, load_coco_ground_truth
from utils.log import LOGGER


@dataclass
class JsonGroundTruth:
    """A COCO annotations file matched to a dataset: its arrays and the category id -> class index table."""

    path: str  # the JSON file
    gt: CocoGroundTruth
    class_of: np.ndarray  # category id -> class index (-1 for ids that are not a class)
    image_ids: list[int]  # COCO image id of each file, in the files' order


def image_ids_for(files: list[str]) -> list[int]:
    """COCO image ids: the numeric file stems when all are numeric and distinct, else positions in the list."""
    stems = [Path(f).stem for f in files]
    if all(s.isdigit() for s in stems) and len({int(s) for s in stems}) == len(stems):
        return [int(s) for s in stems]
    return list(range(len(files)))


def json_image_ids(files: list[str], gt: CocoGroundTruth) -> list[int]:
    """COCO image ids of files from the annotations: by the images' file_name (basename), then by numeric stem.

    Raises MetricsError naming the first image that matches nothing, matches ambiguously, or shares an id."""
    by_name: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for image_id, file_name in gt.file_names.items():
        parts = Path(file_name.replace("\\", "/")).parts
        by_name.setdefault(parts[-1], []).append((parts, image_id))
    known = set(gt.image_ids.tolist())
    ids, owner = [], {}
    for f in files:
        image_id = _match_file(Path(f), by_name, known, gt.path)
        if image_id in owner:
            raise MetricsError(f"{gt.path}: {f} and {owner[image_id]} both match image id {image_id}")
        owner[image_id] = f
        ids.append(image_id)
    return ids


def _match_file(file: Path, by_name: dict, known: set[int], ann_json: Path) -> int:
    """One image's id: a unique file_name basename (a longer path suffix settles ties), else its numeric stem."""
    candidates = by_name.get(file.name, [])
    if len(candidates) > 1:  # the same basename in several folders: the file_name whose path ends like ours
        candidates = [(p, i) for p, i in candidates if file.parts[-len(p) :] == p]
        if len(candidates) != 1:
            raise MetricsError(f"{ann_json}: several images are named {file.name}; cannot tell which one {file} is")
    if candidates:
        return candidates[0][1]
    if file.stem.isdigit() and int(file.stem) in known:
        return int(file.stem)
    raise MetricsError(
        f"{ann_json} has no image for {file} (no file_name {file.name!r}, no image id "
        f"{int(file.stem) if file.stem.isdigit() else 'from its name'})"
    )


def coco_category_ids(names: list[str]) -> list[int] | None:
    """The official COCO category ids when names are COCO's 80 classes, else None."""
    return list(COCO80_TO_91) if list(names) == list(COCO80_NAMES) else None


def load_json_ground_truth(ann_json: str, names: list[str], files: list[str]) -> JsonGroundTruth:
    """The COCO annotations file as the ground truth of files, whose classes are names.

    Raises MetricsError when the file cannot be read or does not describe these images and classes."""
    gt = load_coco_ground_truth(ann_json)
    image_ids = json_image_ids(files, gt)
    coco_ids = coco_category_ids(names)
    if not gt.category_ids:
        raise MetricsError(f"{ann_json} has no categories")
    if coco_ids is not None and set(gt.category_ids) <= set(coco_ids):
        table = coco_ids
    elif len(gt.category_ids) == len(names):
        table = gt.category_ids  # the i-th category by id is class i
        if gt.names != list(names):
            LOGGER.warning(
                f"WARNING: {ann_json} category names differ from the data YAML's; class i is taken to be "
                f"the i-th category by id"
            )
    else:
        raise MetricsError(f"{ann_json} has {len(gt.category_ids)} categories but the data has {len(names)} classes")
    class_of = np.full(max(max(table), max(gt.category_ids)) + 1, -1, np.int64)
    class_of[table] = np.arange(len(table))
    return JsonGroundTruth(str(ann_json), gt, class_of, image_ids)


def check_json_sizes(json_gt: JsonGroundTruth, image_hw: dict[str, tuple[int, int]], id_of: dict[str, int]) -> None:
    """Warn when the JSON's height/width differ from the images': its boxes then describe other (resized) images."""
    sizes = json_gt.gt.sizes
    differ = [f for f, hw in image_hw.items() if sizes.get(id_of[f], hw) != hw]
    if differ:
        f = differ[0]
        (h, w), (jh, jw) = image_hw[f], sizes[id_of[f]]
        LOGGER.warning(
            f"WARNING: {len(differ)} image(s) differ in size from {json_gt.path}, e.g. {f} is {w}x{h} but "
            f"{jw}x{jh} there: its boxes may be for other (e.g. resized) images, and the mAP meaningless"
        )
