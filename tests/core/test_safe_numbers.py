"""One bounded reader for whole numbers (utils.safe_numbers), as JSON (utils.safe_json), YAML (utils.safe_yaml) and
export metadata read them: a number outside int64, over 4300 digits or beyond float range is one line, never an
OverflowError or ValueError traceback; JSON shaped to take far more memory than its size is refused unparsed."""

import json

import pytest

from models.export.metadata import _decoded
from utils import safe_json
from utils.errors import BackendError, MetricsError, UnsafeYamlError
from utils.eval.coco_io import load_coco_ground_truth, load_coco_predictions
from utils.safe_json import JsonError, parse_json
from utils.safe_numbers import NumberRangeError, check_numbers, parse_int
from utils.safe_yaml import parse_yaml

HUGE = {
    "beyond float range": "1" + "0" * 400,  # float() of it: OverflowError
    "over 4300 digits": "9" * 5000,  # int() of its text: ValueError
    "just over int64": str(1 << 63),
    "negative, under int64": str(-(1 << 63) - 1),
}


@pytest.mark.parametrize("text", HUGE.values(), ids=HUGE)
def test_json_refuses_whole_numbers_outside_int64(text):
    with pytest.raises(NumberRangeError, match="outside the range") as e:
        parse_json(f'{{"images": [{{"id": {text}}}]}}')
    assert "\n" not in str(e.value) and len(str(e.value)) < 200


@pytest.mark.parametrize("text", ["1e400", "-1E+400", "9" * 320 + ".5", "1.5e0309"])
def test_json_refuses_numbers_beyond_float_range(text):
    with pytest.raises(NumberRangeError, match="beyond the range of a float"):
        parse_json(f'{{"images": [{{"width": {text}}}]}}')


def test_int64_edges_and_floats_read_as_before():
    data = parse_json(f"[{(1 << 63) - 1}, {-(1 << 63)}, 1e308, 1e-400, 0.5, -0, NaN]")
    assert data[:6] == [(1 << 63) - 1, -(1 << 63), 1e308, 0.0, 0.5, 0] and data[6] != data[6]
    assert parse_int("-12") == -12


YAML_HUGE = {
    **HUGE,
    "hexadecimal": "0x" + "f" * 17,
    "binary": "0b1" + "0" * 64,
    "sexagesimal, 3000 places": "1:" * 3000 + "1",  # a few kB of text, a number of 5000 digits
    "with separators": "1_000_000_000_000_000_000_0",
}


@pytest.mark.parametrize("scalar", YAML_HUGE.values(), ids=YAML_HUGE)
def test_yaml_refuses_whole_numbers_outside_int64(scalar):
    for text in (f"lr0: {scalar}\n", f"names:\n  0: a\n  {scalar}: person\n", f"anchors: [[{scalar}, 1]]\n"):
        with pytest.raises(UnsafeYamlError) as e:
            parse_yaml(text, "hyp.yaml")
        assert "\n" not in str(e.value)
        # a key over 1024 characters is refused by YAML itself, before it is a number
        assert "outside the range" in str(e.value) or "could not find expected ':'" in str(e.value)


@pytest.mark.parametrize("text", ["1.0e+400", "-1.5e+999", "9" * 320 + ".0"])
def test_yaml_refuses_floats_beyond_range(text):
    with pytest.raises(UnsafeYamlError, match="beyond the range of a float"):
        parse_yaml(f"lr0: {text}\n", "hyp.yaml")


def test_yaml_numbers_in_range_read_as_before():
    text = "a: 0x7fffffffffffffff\nb: 1_000\nc: 1:30\nd: -9223372036854775808\ne: .inf\nf: 017\n"
    assert parse_yaml(text, "x") == {
        "a": (1 << 63) - 1,
        "b": 1000,
        "c": 90,
        "d": -(1 << 63),
        "e": float("inf"),
        "f": 15,
    }


@pytest.mark.parametrize("value", ['{"stride": %s}', "[%s, 2]", "{0: 'person', 1: %s}"])
@pytest.mark.parametrize("number", [HUGE["beyond float range"], str(1 << 70)])
def test_export_metadata_numbers_are_bounded(value, number):
    with pytest.raises(BackendError, match="outside the range") as e:
        _decoded(value % number, "names", "model.onnx")
    assert "\n" not in str(e.value)
    assert _decoded(value % "32", "names", "model.onnx") is not None


def test_literals_are_checked_all_the_way_down():
    assert check_numbers({0: [1, (2, {3})], "a": True}) == {0: [1, (2, {3})], "a": True}
    with pytest.raises(NumberRangeError):
        check_numbers({0: [1, (2, {1 << 64})]})


def test_json_of_tiny_pieces_is_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(safe_json, "_SLACK", 0)  # the bound without the allowance small files get
    tiny = ("{},", "[],", '{"a":0},', '"ab",')  # 12 to 24 times their text once parsed
    for text in ("[" + piece * 1000 + "0]" for piece in tiny):
        with pytest.raises(JsonError, match="more than 10x"):
            parse_json(text)
    real = json.dumps([{"id": i, "bbox": [1.5, 2.5, 30.25, 40.75], "segmentation": [[1.25] * 40]} for i in range(50)])
    assert len(parse_json(real)) == 50  # COCO's shape: far under the bound
    polygons = json.dumps([{"segmentation": [list(range(100, 400))]} for _ in range(50)])
    assert len(parse_json(polygons)) == 50  # whole-number polygons (`123, `) pass too


def test_keep_drops_other_keys_as_it_parses():
    text = json.dumps({"images": [{"id": 1, "license": 3}, {"flickr": 1}], "info": {"year": 2017}})
    data = parse_json(text, keep=frozenset({"images", "id"}))
    assert data == {"images": [{"id": 1}, {}]}
    with pytest.raises(JsonError, match="not valid JSON"):
        parse_json('{"images": [', keep=frozenset({"images"}))


@pytest.mark.parametrize("number", ["1e400", "1" + "0" * 400, str(1 << 64)])
def test_evaluation_json_numbers_are_bounded(tmp_path, number):
    gt = tmp_path / "gt.json"
    image = f'{{"id": 1, "file_name": "a.jpg", "width": 64, "height": {number}}}'
    gt.write_text(f'{{"images": [{image}], "annotations": [], "categories": [{{"id": 1, "name": "a"}}]}}')
    preds = tmp_path / "preds.json"
    preds.write_text(f'[{{"image_id": {number}, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}}]')
    for load, file in ((load_coco_ground_truth, gt), (load_coco_predictions, preds)):
        with pytest.raises(MetricsError, match="range") as e:
            load(file)
        assert "\n" not in str(e.value)
