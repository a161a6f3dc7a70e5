"""The segment loader's polygon cut (augment_segments._clipped): a polygon wholly outside the image is dropped at
once instead of being cut edge by edge, and every polygon comes out as polygons.clip_polygon cuts it."""

import numpy as np
import pytest

from utils.data.augment_segments import _clipped
from utils.data.polygons import clip_polygon


@pytest.mark.parametrize("seed", range(3))
def test_clipped_equals_clip_polygon_inside_crossing_and_outside(seed):
    rng = np.random.default_rng(seed)
    kinds = {"inside": 0, "outside": 0, "crossing": 0}
    for _ in range(400):
        centre = rng.uniform(-60, 260, 2)
        points = centre + rng.uniform(-40, 40, (int(rng.integers(3, 12)), 2))
        fast, reference = _clipped(points, 200.0, 150.0), clip_polygon(points, 200.0, 150.0)
        assert fast.shape == reference.shape and np.allclose(fast, reference)
        inside = (points >= 0).all() and (points <= (200.0, 150.0)).all()
        kinds["inside" if inside else "outside" if not len(reference) else "crossing"] += 1
    assert min(kinds.values()) >= 20, kinds  # each case was exercised


def test_clipped_keeps_an_empty_polygon_and_the_dtype():
    empty = np.zeros((0, 2))
    assert _clipped(empty, 10, 10) is empty
    outside = np.array([[20.0, 1.0], [30.0, 1.0], [25.0, 5.0]])
    cut = _clipped(outside, 10, 10)
    assert cut.shape == (0, 2) and cut.dtype == np.float64
