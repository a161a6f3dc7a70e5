"""A COCO instances JSON as a training split: its images found under a folder, its categories (in id order, or as
the data YAML's names order them) as classes 0..nc-1, its boxes as YOLO rows. Crowd regions are left out of
training (the evaluation reads them from the same JSON as ann_json); bad entries are counted and skipped, a file
that is not a COCO JSON at all is a one-line DatasetError.
"""

import math
from pathlib import Path

from utils.data.annotation_rows import SplitAnnotations, as_rows, path_inside, skip, yolo_row
from utils.data.coco_segments import SEGMENT_KEYS, coco_outline
from utils.errors import DatasetError
from utils.images import read_regular_file
from utils.log import one_line
from utils.safe_json import JsonError, parse_json
from utils.safe_numbers import NumberRangeError

# COCO train2017's instances JSON is 448 MB, LVIS's 1.1 GB; json parsing takes several times a file's size in
# memory, so a larger file is refused by its size before a byte of it is read.
MAX_JSON_BYTES = 2 << 30


# The keys the training reader uses: everything else (segmentation, area, licenses, info) is dropped while parsing.
COCO_KEYS = frozenset(
    ("images", "annotations", "categories", "id", "file_name", "width", "height")
    + ("image_id", "category_id", "bbox", "iscrowd", "name")
)


def _json_text(path: Path, what: str) -> str:
    try:
        raw = read_regular_file(path, MAX_JSON_BYTES)
    except FileNotFoundError:
        raise DatasetError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {what} {path}: {getattr(e, 'strerror', None) or one_line(e)}") from None
    try:
        return raw.decode("utf-8-sig")  # not json's own guess: bytes of another encoding are refused
    except UnicodeDecodeError:
        raise DatasetError(f"{what} {path} is not UTF-8 text") from None


def read_json(path: Path, what: str = "COCO JSON", keep: frozenset[str] = COCO_KEYS):
    """A COCO JSON's content (only COCO_KEYS), bounded by MAX_JSON_BYTES and utils.safe_json's bounds; DatasetError
    (one line) when it cannot be used. The bytes are freed before parsing: the text is all that is kept."""
    text = _json_text(path, what)
    try:
        return parse_json(text, keep=keep)
    except JsonError as e:
        raise DatasetError(f"{what} {path} is {e}") from None
    except NumberRangeError as e:
        raise DatasetError(f"{what} {path}: {e}") from None


def _checked_top(data, path: Path) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        found = f"a {type(data).__name__}"
        if isinstance(data, dict):  # only COCO keys are read: another JSON shows none
            found = f"keys {', '.join(map(str, data))[:100]}" if data else "no COCO key"
        raise DatasetError(f"{path} is not a COCO annotations file (it needs an 'images' list; found {found})")
    if not isinstance(data.get("categories"), list) or not data["categories"]:
        raise DatasetError(f"{path} is not a COCO annotations file: it has no 'categories' list")
    if not isinstance(data.get("annotations", []), list):
        raise DatasetError(f"{path}: 'annotations' must be a list")
    return data


def _integer(value) -> int | None:
    """A JSON id as an int (7 or 7.0), None for anything else (text, booleans, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) else None


def category_table(path: Path, data: dict) -> dict[int, str]:
    """Category id -> name, in id order; DatasetError for entries without an integer id or name, or repeated ids."""
    table, named = {}, {}
    for c in data["categories"]:
        cid = _integer(c.get("id")) if isinstance(c, dict) else None
        if cid is None or not isinstance(c.get("name"), str):
            raise DatasetError(f"{path}: category {str(c)[:80]} needs an integer 'id' and a 'name'")
        if cid in table:
            raise DatasetError(f"{path}: category id {cid} appears twice in 'categories'")
        if c["name"] in named:  # classes are matched by name: the two would become one class
            raise DatasetError(
                f"{path}: categories {named[c['name']]} and {cid} are both named {c['name']!r}: one class each "
                "needs a name of its own (rename one)"[:300]
            )
        table[cid], named[c["name"]] = c["name"], cid
    return dict(sorted(table.items()))


def coco_category_names(path: str | Path) -> list[str]:
    """The class names a COCO JSON defines: its categories' names in id order."""
    path = Path(path)
    return list(category_table(path, _checked_top(read_json(path), path)).values())


def _class_of(path: Path, data: dict, names: tuple[str, ...]) -> dict[int, int]:
    """Category id -> class index in names (-1: a category the data leaves out); every name must be a category."""
    table = category_table(path, data)
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in names if n not in set(table.values())]
    if missing:
        raise DatasetError(
            f"{path}: the data's class '{missing[0]}' is not a category of this JSON (its categories: "
            f"{', '.join(list(table.values())[:10])}{', ...' if len(table) > 10 else ''})"[:400]
        )
    return {cid: index.get(name, -1) for cid, name in table.items()}


def _image_table(path: Path, data: dict, folder: Path, found: SplitAnnotations) -> tuple[dict, set[int]]:
    """Image id -> (file, (w, h)) of the usable entries, and the ids of entries skipped (bad or missing file).
    Repeated ids or file names make the annotations ambiguous: DatasetError."""
    images, skipped, owner = {}, set(), {}
    for entry in data["images"]:
        iid = _integer(entry.get("id")) if isinstance(entry, dict) else None
        if iid is None:
            skip(found, "image entries without an integer id", str(entry)[:80])
            continue
        if iid in images or iid in skipped:
            raise DatasetError(f"{path}: image id {iid} appears twice in 'images'")
        w, h = entry.get("width"), entry.get("height")
        image = path_inside(folder, entry.get("file_name"))
        if image is None:
            skipped.add(iid)
            skip(found, f"images whose file_name is not a path inside {folder}", repr(entry.get("file_name")))
        elif not all(_positive(v) for v in (w, h)):
            skipped.add(iid)
            skip(found, "images without a positive width and height", str(image))
        elif str(image) in owner:
            raise DatasetError(
                f"{path}: images {owner[str(image)]} and {iid} both have file_name {entry['file_name']!r}"[:300]
            )
        elif not image.is_file():
            skipped.add(iid)
            skip(found, f"images not found under {folder}", entry["file_name"])
        else:
            owner[str(image)] = iid
            images[iid] = (str(image), (float(w), float(h)))
    return images, skipped


def _positive(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _bbox(a: dict) -> tuple[float, float, float, float] | None:
    """A finite [x, y, w, h] with w, h > 0 as (x1, y1, x2, y2), else None."""
    box = a.get("bbox")
    if not isinstance(box, list) or len(box) != 4:
        return None
    if not all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) for v in box):
        return None
    x, y, w, h = (float(v) for v in box)
    return (x, y, x + w, y + h) if w > 0 and h > 0 else None


def _add_annotation(
    a, images: dict, skipped: set, class_of: dict, rows: dict, found: SplitAnnotations, outlines: dict | None
) -> None:
    """One annotation into its image's rows (and its outline into outlines, for segment training), or counted as
    left out (crowd, other class) or skipped (bad)."""
    if not isinstance(a, dict):
        return skip(found, "annotations that are not objects", str(a)[:80])
    iid, cid = _integer(a.get("image_id")), _integer(a.get("category_id"))
    if iid in skipped:
        return None  # its image was skipped and counted already
    if iid not in images:
        return skip(found, "annotations of image ids not in 'images'", f"annotation {a.get('id')}: {iid}")
    if cid not in class_of:
        return skip(found, "annotations of unknown category ids", f"annotation {a.get('id')}: {a.get('category_id')}")
    if class_of[cid] < 0:
        found.counts["other_class"] += 1
        return None
    if a.get("iscrowd") is True or _integer(a.get("iscrowd")) == 1:
        found.counts["crowd"] += 1
        return None
    box = _bbox(a)
    if box is None:
        return skip(
            found, "annotations with a NaN, negative or empty bbox", f"annotation {a.get('id')}: {a.get('bbox')}"
        )
    row = yolo_row(class_of[cid], box, images[iid][1], found)
    if row is not None:
        rows[iid].append(row)
        if outlines is not None:
            outlines[iid].append(
                coco_outline(a.get("segmentation"), images[iid][1], found, f"annotation {a.get('id')}")
            )
    return None


def read_coco_split(split, polygons: bool = False) -> SplitAnnotations:
    """An AnnotatedSplit of kind 'coco' read into YOLO rows (images without annotations are backgrounds); with
    polygons, each row's outline from its `segmentation` too (utils.data.coco_segments)."""
    path = Path(split)
    data = _checked_top(read_json(path, keep=COCO_KEYS | SEGMENT_KEYS if polygons else COCO_KEYS), path)
    folder = Path(split.images) if split.images else path.parent
    found = SplitAnnotations([], [], [str(path)])
    class_of = _class_of(path, data, split.names)
    images, skipped = _image_table(path, data, folder, found)
    rows: dict[int, list] = {iid: [] for iid in images}
    outlines: dict[int, list] | None = {iid: [] for iid in images} if polygons else None
    for a in data.get("annotations", []):
        _add_annotation(a, images, skipped, class_of, rows, found, outlines)
    order = sorted(images, key=lambda iid: images[iid][0])  # file order, as a folder of the images is listed
    found.images = [images[iid][0] for iid in order]
    found.rows = [as_rows(rows[iid]) for iid in order]
    found.sizes = [images[iid][1] for iid in order]
    if outlines is not None:
        found.polygons = [outlines[iid] for iid in order]
    return found
