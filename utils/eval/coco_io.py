"""COCO JSON files: the category table, reading annotation and results files as checked arrays, scoring a results
file against an annotation file, and pycocotools' own numbers for comparison.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from utils.errors import MetricsError
from utils.eval.coco_protocol import evaluate_arrays
from utils.eval.matching import Boxes, box_set, xywh_to_xyxy
from utils.eval.metrics import DetectionMetrics
from utils.log import LOGGER
from utils.safe_json import parse_json

# Class index (0-79) -> official COCO category id (1-90, with gaps): the standard table.
COCO80_TO_91 = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34,
    35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)  # fmt: skip

COCO80_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow", "elephant",
    "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard",
    "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli",
    "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed", "dining table", "toilet",
    "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip


def _read_json(path: str | Path, what: str):
    path = Path(path)
    if not path.is_file():
        raise MetricsError(f"{what} not found: {path}")
    try:
        return parse_json(path.read_text())  # numbers and shape bounded (utils.safe_json)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise MetricsError(f"cannot read {what} {path}: {e}") from None


@dataclass
class CocoGroundTruth:
    """A COCO annotations file as arrays: categories sorted by id, class index = position among them."""

    path: Path
    image_ids: np.ndarray  # (I,) sorted unique image ids
    category_ids: list[int]
    names: list[str]
    boxes: Boxes  # image = image id, cls = class index
    file_names: dict[int, str] = field(default_factory=dict)  # image id -> the images entry's file_name, if any
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # image id -> (height, width), if given
    segmentations: list = field(default_factory=list)  # each annotation's 'segmentation' as read (None if none)

    def __post_init__(self):
        self._order = np.argsort(self.boxes.image, kind="stable")  # rows grouped by image, for image()
        self._sorted_images = self.boxes.image[self._order]

    def image(self, image_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Ground truth of one image: corner boxes (n, 4), category ids, areas, crowd flags."""
        lo, hi = np.searchsorted(self._sorted_images, [image_id, image_id + 1])
        rows, b = self._order[lo:hi], self.boxes
        return xywh_to_xyxy(b.xywh[rows]), np.asarray(self.category_ids)[b.cls[rows]], b.area[rows], b.crowd[rows]

    def image_segmentations(self, image_id: int) -> list:
        """The 'segmentation' of each annotation of one image, in image()'s order (None where it has none)."""
        lo, hi = np.searchsorted(self._sorted_images, [image_id, image_id + 1])
        return [self.segmentations[r] if self.segmentations else None for r in self._order[lo:hi].tolist()]


def _index_in(sorted_ids: Sequence[int], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of values in sorted_ids, and which values are there at all."""
    ids = np.asarray(sorted_ids, np.int64)
    pos = np.searchsorted(ids, values)
    found = np.append(ids, np.iinfo(np.int64).min)[np.minimum(pos, len(ids))] == values
    return pos, found


def _bbox_array(boxes: list, path: str | Path, what: str) -> np.ndarray:
    """(n, 4) finite float64 boxes, or MetricsError naming the first entry that is not [x, y, w, h]."""
    for n, box in enumerate(boxes):
        if not isinstance(box, (list, tuple)) or len(box) != 4:
            raise MetricsError(f"{path}: {what} {n} has bbox {str(box)[:40]}, not [x, y, w, h]")
    xywh = np.array(boxes, dtype=np.float64).reshape(-1, 4)
    bad = ~np.isfinite(xywh).all(1)
    if bad.any():
        raise MetricsError(f"{path}: {what} {int(np.flatnonzero(bad)[0])} has a non-finite bbox")
    return xywh


def _first_repeat(values: list[int]) -> int:
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return values[0]


def load_coco_ground_truth(path: str | Path) -> CocoGroundTruth:
    """Read a COCO instances JSON (images, annotations with bbox/area/iscrowd, categories)."""
    data = _read_json(path, "COCO annotations")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("images"), list)
        or not isinstance(data.get("categories"), list)
    ):
        found = f"keys {', '.join(map(str, data))}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise MetricsError(
            f"{path} is not a COCO annotations file (it needs 'images' and 'categories' lists; found {found})"
        )
    if not data["images"]:
        raise MetricsError(f"{path}: its 'images' list is empty")
    try:
        id_list = [int(im["id"]) for im in data["images"]]
        images = np.unique(np.array(id_list, dtype=np.int64))
        file_names = {i: str(im["file_name"]) for i, im in zip(id_list, data["images"]) if im.get("file_name")}
        sizes = {
            i: (int(im["height"]), int(im["width"]))
            for i, im in zip(id_list, data["images"])
            if isinstance(im.get("height"), (int, float)) and isinstance(im.get("width"), (int, float))
        }
        cats = sorted({int(c["id"]): str(c.get("name", c["id"])) for c in data["categories"]}.items())
        anns = data.get("annotations", [])
        category_ids = [c for c, _ in cats]
        cat_of = np.array([int(a["category_id"]) for a in anns], dtype=np.int64)
        cls, known = _index_in(category_ids, cat_of)
        if not known.all():
            raise MetricsError(
                f"{path}: annotations name category ids missing from 'categories' (e.g. {int(cat_of[~known][0])})"
            )
        xywh = _bbox_array([a["bbox"] for a in anns], path, "annotation")
        area = np.array([a["area"] if "area" in a else a["bbox"][2] * a["bbox"][3] for a in anns], dtype=np.float64)
        crowd = np.array([bool(a.get("iscrowd", 0)) for a in anns], dtype=bool)
        image = np.array([int(a["image_id"]) for a in anns], dtype=np.int64)
    except MetricsError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MetricsError(f"{path} is not a COCO annotations file ({e.__class__.__name__}: {e})") from None
    unknown = np.setdiff1d(image, images)
    if unknown.size:
        raise MetricsError(f"{path}: annotations name image ids missing from 'images' (e.g. {int(unknown[0])})")
    if images.size != len(id_list):
        raise MetricsError(f"{path}: its 'images' list repeats image ids (e.g. {_first_repeat(id_list)})")
    return CocoGroundTruth(
        Path(path),
        images,
        category_ids,
        [n for _, n in cats],
        box_set(image, cls, xywh, area=area, crowd=crowd),
        file_names,
        sizes,
        [a.get("segmentation") for a in anns],
    )


def load_coco_predictions(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read a COCO results JSON: image ids, category ids, xywh boxes, scores (file order)."""
    data = _read_json(path, "predictions JSON")
    if not isinstance(data, list):
        raise MetricsError(f"{path}: a COCO results file is a list of detections, found a {type(data).__name__}")
    try:
        image = np.array([int(p["image_id"]) for p in data], dtype=np.int64)
        cat = np.array([int(p["category_id"]) for p in data], dtype=np.int64)
        xywh = _bbox_array([p["bbox"] for p in data], path, "detection")
        score = np.array([p["score"] for p in data], dtype=np.float64).reshape(len(data))
    except MetricsError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MetricsError(f"{path}: not COCO detection results ({e.__class__.__name__}: {e})") from None
    if not np.isfinite(score).all():
        raise MetricsError(f"{path}: detection {int(np.flatnonzero(~np.isfinite(score))[0])} has a non-finite score")
    return image, cat, xywh, score


def evaluate_coco_json(
    gt_path: str | Path, pred_path: str | Path, map_80_to_91: bool | None = None, confusion: bool = False
) -> DetectionMetrics:
    """Score a COCO results file against a COCO annotations file over all images of the annotations.

    map_80_to_91 translates category ids 0-79 to the official COCO ids; None does so when the file clearly uses
    class indices against COCO's 80 categories.
    """
    gt = load_coco_ground_truth(gt_path)
    image, cat, xywh, score = load_coco_predictions(pred_path)
    unknown = np.setdiff1d(image, gt.image_ids)
    if unknown.size:
        examples = ", ".join(str(i) for i in unknown[:5])
        raise MetricsError(f"{pred_path}: {unknown.size} image id(s) not in {gt_path} (e.g. {examples})")
    if map_80_to_91 is None:
        map_80_to_91 = (
            gt.category_ids == list(COCO80_TO_91)
            and cat.size > 0
            and cat.min() >= 0
            and cat.max() < 80
            and not np.isin(cat, COCO80_TO_91).all()
        )
        if map_80_to_91:
            LOGGER.info(f"{pred_path}: category ids 0-79 read as class indices, mapped to COCO ids 1-90")
    if map_80_to_91:
        cat = np.asarray(COCO80_TO_91)[cat]
    cls, known = _index_in(gt.category_ids, cat)
    if not known.all():
        LOGGER.warning(
            f"WARNING: {pred_path}: {int((~known).sum())} detection(s) with category ids not in "
            f"{gt_path} ignored (e.g. {int(cat[~known][0])})"
        )
    dt = box_set(image[known], cls[known], xywh[known], score=score[known])
    boxes = gt.boxes
    gt_idx = Boxes(
        np.searchsorted(gt.image_ids, boxes.image), boxes.cls, boxes.xywh, boxes.area, boxes.crowd, boxes.score
    )
    dt.image = np.searchsorted(gt.image_ids, dt.image)
    return evaluate_arrays(len(gt.image_ids), gt.names, gt.category_ids, gt_idx, dt, confusion=confusion)


def pycocotools_stats(
    gt: str | Path | dict,
    predictions: str | Path | list,
    image_ids: Sequence[int] | None = None,
    iou_type: str = "bbox",
) -> np.ndarray:
    """pycocotools' own 12 numbers (the reference implementation), quietly; optionally over some images only.
    iou_type: 'bbox', or 'segm' for the masks (the detections' and ground truth's segmentations)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    preds = predictions if isinstance(predictions, list) else _read_json(predictions, "predictions JSON")
    if not isinstance(preds, list) or not preds:
        raise MetricsError("pycocotools needs a non-empty list of detections")
    with contextlib.redirect_stdout(io.StringIO()):
        if isinstance(gt, dict):
            coco_gt = COCO()
            coco_gt.dataset = gt
            coco_gt.createIndex()
        else:
            coco_gt = COCO(str(gt))
        try:
            coco_dt = coco_gt.loadRes([dict(p) for p in preds])  # copies: loadRes edits the dicts it gets
        except AssertionError:
            raise MetricsError("pycocotools: predictions name image ids that are not in the ground truth") from None
        evaluator = COCOeval(coco_gt, coco_dt, iou_type)
        if image_ids is not None:
            evaluator.params.imgIds = [int(i) for i in image_ids]
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.asarray(evaluator.stats, dtype=np.float64)


def format_coco_stats(stats: Sequence[float]) -> str:
    """The 12 numbers as pycocotools prints them, one per line."""
    rows = [
        ("Average Precision", "0.50:0.95", "all", 100),
        ("Average Precision", "0.50", "all", 100),
        ("Average Precision", "0.75", "all", 100),
        ("Average Precision", "0.50:0.95", "small", 100),
        ("Average Precision", "0.50:0.95", "medium", 100),
        ("Average Precision", "0.50:0.95", "large", 100),
        ("Average Recall", "0.50:0.95", "all", 1),
        ("Average Recall", "0.50:0.95", "all", 10),
        ("Average Recall", "0.50:0.95", "all", 100),
        ("Average Recall", "0.50:0.95", "small", 100),
        ("Average Recall", "0.50:0.95", "medium", 100),
        ("Average Recall", "0.50:0.95", "large", 100),
    ]
    lines = []
    for (title, iou, area, max_det), value in zip(rows, stats):
        kind = "(AP)" if title.startswith("Average Precision") else "(AR)"
        lines.append(f" {title:<18} {kind} @[ IoU={iou:<9} | area={area:>6s} | maxDets={max_det:>3d} ] = {value:0.3f}")
    return "\n".join(lines)
