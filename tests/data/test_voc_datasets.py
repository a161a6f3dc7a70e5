"""Pascal VOC splits: ImageSets lists or a whole root, 1-based boxes, difficult objects, names, and hostile or
broken XML skipped with a warning."""

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from utils.data.annotations import AnnotatedSplit
from utils.data.config import load_data_config
from utils.data.dataset import LoadImagesAndLabels
from utils.errors import DatasetError

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder

BOMB = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<annotation><size><width>100</width><height>50</height></size><object><name>&lol3;</name></object></annotation>
"""


def voc_xml(objects: list[tuple], w: int = 100, h: int = 50, filename: str | None = None) -> str:
    parts = [f"<filename>{filename}</filename>" if filename else ""]
    parts.append(f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>")
    for name, difficult, (x1, y1, x2, y2) in objects:
        parts.append(
            f"<object><name>{name}</name><difficult>{difficult}</difficult><bndbox><xmin>{x1}</xmin>"
            f"<ymin>{y1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>"
        )
    return f"<annotation>{''.join(parts)}</annotation>\n"


@pytest.fixture
def voc(tmp_path) -> Path:
    """A VOC root: 5 ids (one with a bomb, one malformed, one without its image), a train list of 4."""
    root = tmp_path / "VOC"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    for stem in ("a", "b", "c", "bomb", "broken"):
        assert cv2.imwrite(str(root / "JPEGImages" / f"{stem}.jpg"), np.full((50, 100, 3), 90, np.uint8))
    xml = {
        "a": voc_xml([("dog", 0, (11, 11, 31, 21)), ("cat", 1, (1, 1, 50, 50)), ("horse", 0, (1, 1, 9, 9))]),
        "b": voc_xml([("cat", 0, (91, 41, 111, 61))], filename="b.jpg"),  # clipped at the corner
        "c": voc_xml([]),  # a background
        "bomb": BOMB,
        "broken": "<annotation><size><width>100</width>",
        "gone": voc_xml([("dog", 0, (1, 1, 5, 5))]),  # its image is missing
    }
    for stem, text in xml.items():
        (root / "Annotations" / f"{stem}.xml").write_text(text)
    (root / "ImageSets" / "Main" / "train.txt").write_text("a\nb\nbomb\ngone\n")
    return root


def load(root: Path, split: str, **extra):
    file = root.parent / "voc.yaml"
    file.write_text(yaml.safe_dump({"path": str(root), "train": split, "names": ["dog", "cat"], **extra}))
    cfg = load_data_config(file)
    return cfg, LoadImagesAndLabels(cfg["train"], img_size=64, nc=2)


def test_image_set_list(voc, log):
    cfg, ds = load(voc, "ImageSets/Main/train.txt")
    assert isinstance(cfg["train"], AnnotatedSplit) and cfg["train"].kind == "voc" and cfg["ann_json"] is None
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg"]
    np.testing.assert_allclose(ds.labels[0], [[0, 0.2, 0.3, 0.2, 0.2]], atol=1e-7)  # 1-based -> 0-based pixels
    np.testing.assert_allclose(ds.labels[1], [[1, 0.95, 0.9, 0.1, 0.2]], atol=1e-7)
    assert "1 difficult objects left out of training" in log.text and "1 boxes clipped" in log.text
    (warning,) = [r.getMessage() for r in log.records if r.levelno == logging.WARNING]
    for part in ("1 objects of names not in the data's names", "1 unusable XML files", "DTDForbidden", "1 images not"):
        assert part in warning, warning


def test_whole_root_and_keep_difficult(voc, log):
    _, ds = load(voc, ".", keep_difficult=True)
    assert [Path(f).name for f in ds.im_files] == ["a.jpg", "b.jpg", "c.jpg"]  # c: a background
    assert [len(x) for x in ds.labels] == [2, 1, 0]  # the difficult cat is kept
    assert "2 unusable XML files" in log.text  # the bomb and the malformed file


def test_keep_difficult_must_be_a_boolean(voc):
    with pytest.raises(DatasetError, match="'keep_difficult' must be true or false"):
        load(voc, ".", keep_difficult="yes please")


def test_bomb_is_refused_before_expanding(voc):
    from utils.data.voc_labels import parse_voc_xml

    with pytest.raises(ValueError, match="DTDForbidden"):
        parse_voc_xml(voc / "Annotations" / "bomb.xml")
    big = voc / "Annotations" / "big.xml"
    big.write_text("<annotation>" + " " * (2 << 20) + "</annotation>")
    with pytest.raises(ValueError, match="more than the 1048576 bytes"):
        parse_voc_xml(big)
