"""Data YAMLs: found (a path, or a bare name from data/), read as bounded data and checked,
with the dataset generated or downloaded when a data YAML says how and it is missing.
"""

from pathlib import Path

from utils.data.annotations import COCO, AnnotatedSplit, annotated_split
from utils.data.coco_labels import coco_category_names
from utils.data.download import download_dataset
from utils.errors import DatasetError
from utils.files import DATA_DIR, REPO_ROOT, resolve_bare_name
from utils.log import LOGGER
from utils.safe_yaml import read_yaml
from utils.text import class_names

MAX_CLASSES = 100_000  # LVIS has 1203; more is a typo

# the folders a COCO JSON split's file_names are found under: per split, or one for all (docs/datasets.md)
FOLDER_KEYS = ("images", "train_images", "val_images", "test_images")


def resolve_yaml(path: str | Path, kind: str) -> Path:
    """A YAML file as given (.yaml may be left off), or a bare name (no folder part) from the repo's data/ folder,
    with a log line. A path with a folder part is never swapped for a same-named file in data/."""
    text = str(path)
    for name in (text, f"{text}.yaml") if not Path(text).suffix else (text,):
        found = resolve_bare_name(name, DATA_DIR, f"{kind} file")
        if found is not None and found.is_file():
            return found.resolve()
    if Path(text).name != text:  # a folder part: say so if only the bare name would have found a file
        name = Path(text).name
        bundled = [DATA_DIR / n for n in (name, f"{name}.yaml") if (DATA_DIR / n).is_file()]
        hint = f" ({bundled[0]} exists: pass the bare name {bundled[0].name} to use it)" if bundled else ""
        raise DatasetError(f"{kind} file '{path}' not found{hint}")
    raise DatasetError(f"{kind} file '{path}' not found (looked in the current folder and {DATA_DIR})")


def read_yaml_mapping(path: Path, kind: str) -> dict:
    """A YAML mapping read with bounds (size, depth, no aliases: see utils.safe_yaml), or one-line DatasetError."""
    data = read_yaml(path, DatasetError)
    if not isinstance(data, dict):
        raise DatasetError(f"{kind} file {path} must hold a YAML mapping (key: value lines)")
    return data


def _dataset_root(value, yaml_file: Path) -> Path:
    """The data YAML's `path`: absolute, or relative to the repo root as in YOLOv5 (../datasets/x), falling
    back to the YAML's folder; without one, the YAML's folder."""
    if not value:
        return yaml_file.parent
    p = Path(str(value)).expanduser()
    if p.is_absolute():
        return p
    from_root, from_yaml = (REPO_ROOT / p).resolve(), (yaml_file.parent / p).resolve()
    return from_yaml if not from_root.exists() and from_yaml.exists() else from_root


def _class_name(value, key, file: Path) -> str:
    """One class name: text (or a number / yes-no YAML reads as one), never a list, mapping or empty entry."""
    if value is None or isinstance(value, (list, tuple, dict)):
        raise DatasetError(f"{file}: names[{key}] must be a class name (text), got {value!r}"[:300])
    return str(value)


def _names_list(names, nc, file: Path) -> list[str]:
    """The data's class names (from its YAML or its COCO JSON's categories), checked as a checkpoint's are
    (utils.text.class_names: length, no control characters) before anything is trained on them."""
    found = _names_found(names, nc, file)
    checked, problem = class_names(found)
    if problem:
        raise DatasetError(f"{file}: {problem}")
    return checked


def _names_found(names, nc, file: Path) -> list[str]:
    if names is None:
        if nc is None:
            raise DatasetError(f"{file}: needs 'names' (a list of class names) or 'nc'")
        return [f"class{i}" for i in range(int(nc))]
    if isinstance(names, (list, tuple, dict)) and len(names) > MAX_CLASSES:
        raise DatasetError(f"{file}: 'names' has {len(names)} entries, more than {MAX_CLASSES} classes")
    if isinstance(names, dict):
        try:
            by_index = {int(k): v for k, v in names.items()}
        except (TypeError, ValueError):
            raise DatasetError(f"{file}: 'names' keys must be class indices 0, 1, ...") from None
        if sorted(by_index) != list(range(len(by_index))):
            raise DatasetError(f"{file}: 'names' keys must be 0..{len(by_index) - 1} with none missing")
        return [_class_name(by_index[i], i, file) for i in range(len(by_index))]
    if isinstance(names, (list, tuple)):
        return [_class_name(n, i, file) for i, n in enumerate(names)]
    raise DatasetError(f"{file}: 'names' must be a list or a {{index: name}} mapping")


def _split_paths(value, root: Path):
    """A split entry (str or list of str) made absolute against the dataset root."""
    if value is None or value == "":
        return None

    def one(x) -> str:
        p = Path(str(x)).expanduser()
        if p.is_absolute():
            return str(p)
        q = (root / p).resolve()
        if not q.exists() and str(x).startswith("../"):  # YOLOv5 tolerates one '../' too many
            q = (root / str(x)[3:]).resolve()
        return str(q)

    return [one(x) for x in value] if isinstance(value, (list, tuple)) else one(value)


def _check_path_entries(data: dict, file: Path) -> None:
    """'path' must be a string; train/val/test/ann_json a string or a list of strings (no NUL characters)."""
    for key in ("path", "train", "val", "test", "ann_json", *FOLDER_KEYS):
        value = data.get(key)
        if value is None or value == "":
            continue
        single = key == "path" or key in FOLDER_KEYS
        items = value if isinstance(value, list) and not single else [value]
        # a folder may be named 2017 (YAML reads it as a number); floats, booleans, mappings are mistakes
        if not items or not all(
            type(x) is int and not single or isinstance(x, str) and x and "\0" not in x for x in items
        ):
            kind = "a folder path" if single else "a path or a list of paths"
            raise DatasetError(f"{file}: '{key}' must be {kind} (text), got {value!r}"[:300])


def _json_names(splits: dict) -> list[str] | None:
    """Without names in the YAML: the categories (in id order) of its first COCO JSON split, if there is one."""
    for value in splits.values():
        if isinstance(value, str) and value.lower().endswith(".json") and Path(value).is_file():
            return coco_category_names(value)
    return None


def _val_json(val, names: list[str]) -> str | None:
    """A COCO JSON val split scores against itself (crowd regions and areas as the COCO protocol wants) when its
    categories are the data's classes in id order; names that restrict or reorder them score on the converted
    labels, since ann_json maps the i-th category by id to class i."""
    if not isinstance(val, AnnotatedSplit) or val.kind != COCO:
        return None
    if coco_category_names(val) != list(names):
        LOGGER.info(f"{val}: its categories are not the data's names in id order; val scores on the converted boxes")
        return None
    return str(val)


def _missing(split) -> list[str]:
    if split is None:
        return []
    return [p for p in ([split] if isinstance(split, str) else split) if not Path(p).exists()]


def load_data_config(path: str | Path) -> dict:
    """Read a YOLOv5 data YAML: absolute split paths, nc, names (checked), ann_json; download or generate the
    dataset when its splits are missing and the YAML says how."""
    file = resolve_yaml(path, "data")
    data = read_yaml_mapping(file, "data")
    _check_path_entries(data, file)
    if "nc" in data and (isinstance(data["nc"], bool) or not isinstance(data["nc"], int) or data["nc"] < 1):
        raise DatasetError(f"{file}: 'nc' must be a positive integer, got {data['nc']!r}")
    if data.get("nc", 0) > MAX_CLASSES:  # a typo (extra zeros) would otherwise build a huge names list
        raise DatasetError(f"{file}: 'nc' is {data['nc']}, more than {MAX_CLASSES} classes: a typo?")
    root = _dataset_root(data.get("path"), file)
    splits = {key: _split_paths(data.get(key), root) for key in ("train", "val", "test")}
    names = data.get("names")
    names = _names_list(_json_names(splits) if names is None else names, data.get("nc"), file)
    nc = data.get("nc", len(names))
    if nc < 1:
        raise DatasetError(f"{file}: 'names' is empty: a dataset needs at least one class")
    if len(names) != nc:
        raise DatasetError(f"{file}: nc is {nc} but {len(names)} names are given")
    if not data.get("train") and not data.get("val"):
        raise DatasetError(f"{file}: needs 'train' and/or 'val' split paths")
    cfg = {
        "path": str(root),
        **splits,
        "nc": nc,
        "names": names,
        "ann_json": _split_paths(data.get("ann_json"), root),
        "download": data.get("download"),
        "yaml_file": str(file),
    }
    missing = _missing(cfg["train"]) + _missing(cfg["val"])
    if missing:
        if data.get("generate") in SHAPES_SETS:
            _generate_shapes(root, file, missing[0], data["generate"])
        elif data.get("download"):
            download_dataset(data["download"], root, missing[0])
        else:
            raise DatasetError(f"dataset not found: {missing[0]} does not exist and {file.name} has no 'download'")
        still = _missing(cfg["train"]) + _missing(cfg["val"])
        if still:
            raise DatasetError(f"dataset still incomplete after download/generation: {still[0]} does not exist")
    for key, value in splits.items():  # once the files are there: COCO JSON / VOC splits read their labels
        cfg[key] = annotated_split(value, key, data, root, names, file)
    if cfg["ann_json"] is None:
        cfg["ann_json"] = _val_json(cfg["val"], names)
    return cfg


# `generate:` values: the synthetic sets' generator arguments. The segment set is the quickstart's: three classes
# (circle, square, triangle), so that a nano segment model learns it to mask mAP50 >= 0.9 within 3 CPU minutes.
SHAPES_SETS = {"shapes": {}, "shapes-seg": {"polygons": True, "n_classes": 3}}


def _generate_shapes(root: Path, file: Path, missing: str, kind: str = "shapes") -> None:
    """`generate: shapes` (or shapes-seg: polygon labels): write the synthetic dataset, but only into an absent or
    empty folder. A split path with a typo must not make a real dataset's folders look missing: nothing that exists
    is deleted or written into."""
    from utils.data.shapes import generate_shapes, is_occupied  # lazy: only needed on first use
    from utils.errors import ShapesError

    try:
        occupied = is_occupied(root)
    except ShapesError as e:
        raise DatasetError(f"{file}: {e}") from None
    if occupied:
        raise DatasetError(
            f"{file}: {missing} does not exist, and 'generate: {kind}' only writes into an absent or empty folder: "
            f"{root} is not empty, nothing was changed (check the split paths, or point 'path' at a new folder)"
        )
    LOGGER.info(f"Generating the synthetic shapes dataset in {root} ...")
    try:
        generate_shapes(root, **SHAPES_SETS[kind])
    except ShapesError as e:
        raise DatasetError(f"{file}: {e}") from None
