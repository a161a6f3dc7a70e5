"""The segment quickstart's synthetic set (data/shapes-seg.yaml): polygon rows of the first three shape classes,
generated on first use by the data YAML's `generate: shapes-seg`, into a folder of its own."""

from pathlib import Path

import pytest
import yaml

from utils.data import config
from utils.data.config import load_data_config
from utils.data.shapes import CLASSES, generate_shapes
from utils.errors import ShapesError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("cache_dir")


def _rows(root: Path) -> list[list[str]]:
    return [line.split() for f in sorted(root.glob("labels/*/*.txt")) for line in f.read_text().splitlines()]


def test_n_classes_draws_only_the_first_classes(tmp_path):
    rows = _rows(generate_shapes(tmp_path / "three", 24, 4, 96, polygons=True, n_classes=3))
    assert {r[0] for r in rows} == {"0", "1", "2"}  # all three, none of the others
    assert all(len(r) in (1 + 2 * 4, 1 + 2 * 3, 1 + 2 * 32) for r in rows)  # square, triangle, circle outlines
    one = _rows(generate_shapes(tmp_path / "one", 4, 2, 96, n_classes=1))
    assert one and {r[0] for r in one} == {"0"} and all(len(r) == 5 for r in one)  # box rows without polygons


@pytest.mark.parametrize("n_classes", [0, len(CLASSES) + 1])
def test_n_classes_out_of_range_is_refused_before_writing(tmp_path, n_classes):
    with pytest.raises(ShapesError, match=f"n_classes must be 1 to {len(CLASSES)}") as e:
        generate_shapes(tmp_path / "s", 2, 2, 64, n_classes=n_classes)
    assert "\n" not in str(e.value) and not list(tmp_path.iterdir())


def test_shapes_seg_yaml_generates_its_three_class_polygon_set(tmp_path, monkeypatch):
    """The shipped YAML, its path moved into tmp: loading it generates polygon rows of exactly its classes."""
    data = yaml.safe_load((ROOT / "data" / "shapes-seg.yaml").read_text())
    assert data["nc"] == len(data["names"]) == config.SHAPES_SETS["shapes-seg"]["n_classes"]
    file = tmp_path / "shapes-seg.yaml"
    file.write_text(yaml.safe_dump({**data, "path": str(tmp_path / "set")}))
    small = {**config.SHAPES_SETS["shapes-seg"], "n_train": 12, "n_val": 4, "img_size": 96}  # the defaults: 460
    monkeypatch.setitem(config.SHAPES_SETS, "shapes-seg", small)
    cfg = load_data_config(file)
    assert cfg["names"] == data["names"] and cfg["nc"] == 3
    rows = _rows(tmp_path / "set")
    assert {r[0] for r in rows} == {"0", "1", "2"} and all(len(r) >= 7 and len(r) % 2 for r in rows)
