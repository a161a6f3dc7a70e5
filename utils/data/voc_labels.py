"""A Pascal VOC split as a training split: Annotations/<id>.xml beside JPEGImages/, the ids from an ImageSets list
(or every XML of the folder), the objects' names looked up in the data's names, boxes as YOLO rows.

VOC's pixel coordinates start at 1 (YOLOv5's and Ultralytics' VOC conversion subtract 1, as here). Objects
marked difficult are left out of training unless the data YAML says keep_difficult: true (VOC's evaluation
ignores them). XML is parsed by defusedxml with DTDs, entities and external references refused, and each file
bounded in size, so a crafted file can neither expand nor reach out.
"""

from pathlib import Path
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from utils.data.annotation_rows import SplitAnnotations, as_rows, path_inside, skip, yolo_row
from utils.errors import DatasetError
from utils.images import read_regular_file
from utils.log import one_line

MAX_XML_BYTES = 1 << 20  # a VOC annotation is a few kB; 1 MB holds thousands of objects

MAX_IMAGESET_BYTES = 64 << 20  # an ImageSets list of ids (VOC2012 trainval: 11540 lines, 140 kB)


def _voc_ids(path: Path) -> tuple[Path, list[str]]:
    """The VOC root and the split's image ids: the lines of an ImageSets list (first word: class lists add a
    1/-1 column), or every Annotations/*.xml of a root."""
    if path.is_dir():
        return path, sorted(p.stem for p in (path / "Annotations").glob("*.xml"))
    try:
        text = read_regular_file(path, MAX_IMAGESET_BYTES).decode("utf-8-sig")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read VOC image set {path}: {getattr(e, 'strerror', None) or one_line(e)}") from None
    ids = [line.split()[0] for line in text.splitlines() if line.strip()]
    return path.parents[2], ids


def parse_voc_xml(file: Path) -> tuple[str | None, tuple[float, float], list[tuple[str, bool, tuple]]]:
    """(filename or None, (width, height), [(name, difficult, (xmin, ymin, xmax, ymax))]) of one VOC annotation;
    ValueError (one line) for a file that is too large, not XML, has a DTD or entities, or lacks a size."""
    try:
        root = fromstring(read_regular_file(file, MAX_XML_BYTES), forbid_dtd=True)
    except DefusedXmlException as e:
        why = f"{type(e).__name__}: DTDs, entities and external references are not read"
        raise ValueError(f"refused XML ({why})") from None
    except ParseError as e:
        raise ValueError(f"not well-formed XML ({e})") from None
    size = root.find("size")
    w, h = (_number(size, k) for k in ("width", "height")) if size is not None else (None, None)
    if not w or not h or w <= 0 or h <= 0:
        raise ValueError("no positive <size><width>/<height>")
    objects = []
    for obj in root.iter("object"):
        box = obj.find("bndbox")
        coords = tuple(_number(box, k) for k in ("xmin", "ymin", "xmax", "ymax")) if box is not None else ()
        difficult = (obj.findtext("difficult") or "0").strip() == "1"
        objects.append(((obj.findtext("name") or "").strip(), difficult, coords))
    return root.findtext("filename"), (w, h), objects


def _number(parent: Element, tag: str) -> float | None:
    try:
        value = float((parent.findtext(tag) or "").strip())
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _image_file(root: Path, image_id: str, filename: str | None) -> Path | None:
    """JPEGImages/<the XML's filename>, else JPEGImages/<id>.jpg, if it exists inside JPEGImages."""
    for name in (filename.strip() if filename else None, f"{image_id}.jpg"):
        image = path_inside(root / "JPEGImages", name)
        if image is not None and image.is_file():
            return image
    return None


def _objects_rows(objects: list, size, split, found: SplitAnnotations, where: str) -> list[list[float]]:
    index = {n: i for i, n in enumerate(split.names)}
    rows = []
    for name, difficult, coords in objects:
        if name not in index:
            skip(found, "objects of names not in the data's names", f"{where}: {name!r}")
        elif difficult and not split.keep_difficult:
            found.counts["difficult"] += 1
        elif len(coords) != 4 or None in coords or coords[2] <= coords[0] or coords[3] <= coords[1]:
            skip(found, "objects without a valid <bndbox>", where)
        else:  # 1-based pixel coordinates -> 0-based, as YOLOv5's VOC conversion
            row = yolo_row(index[name], tuple(c - 1 for c in coords), size, found)
            if row is not None:
                rows.append(row)
    return rows


def read_voc_split(split) -> SplitAnnotations:
    """An AnnotatedSplit of kind 'voc' read into YOLO rows (an image without objects is a background)."""
    root, ids = _voc_ids(Path(split))
    found = SplitAnnotations([], [], [str(split)] if Path(split).is_file() else [])
    pairs = []
    for image_id in dict.fromkeys(ids):  # a list naming an id twice trains on it once
        xml = path_inside(root / "Annotations", f"{image_id}.xml")
        if xml is None:
            skip(found, f"ids that are not a file name inside {root}", repr(image_id))
            continue
        found.sources.append(str(xml))
        try:
            filename, size, objects = parse_voc_xml(xml)
        except FileNotFoundError:
            skip(found, "images without an annotation file", str(xml))
            continue
        except (OSError, ValueError) as e:
            skip(found, "unusable XML files", f"{xml}: {getattr(e, 'strerror', None) or one_line(e)}")
            continue
        image = _image_file(root, image_id, filename)
        if image is None:
            skip(found, f"images not found in {root / 'JPEGImages'}", filename or image_id)
            continue
        pairs.append((str(image), as_rows(_objects_rows(objects, size, split, found, xml.name)), size))
    pairs.sort(key=lambda p: p[0])
    found.images, found.rows, found.sizes = [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]
    return found
