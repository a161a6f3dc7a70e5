"""--image-weights: class and image weights on hand-made labels, the weighted draw, and the dataset's indices."""

import random
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from utils.data.dataset import LoadImagesAndLabels
from utils.data.hyp import load_hyp
from utils.data.loader import create_dataloader
from utils.errors import ImageWeightsError
from utils.train.image_weights import class_weights, image_weights, sample_indices

pytestmark = pytest.mark.usefixtures("cache_dir")  # label caches in a per-test folder


def labels_of(*classes_per_image: list[int]) -> list[np.ndarray]:
    """One (n, 5) label array per image with the given classes (boxes all alike: only classes matter here)."""
    return [np.array([[c, 0.5, 0.5, 0.2, 0.2] for c in cs], np.float32).reshape(-1, 5) for cs in classes_per_image]


# Four images: classes {0, 0, 1}, {0}, none, {2}. Boxes per class 3, 1, 1 -> inverse 1/3, 1, 1 (sum 7/3).
LABELS = labels_of([0, 0, 1], [0], [], [2])


def test_class_weights_by_hand():
    np.testing.assert_allclose(class_weights(LABELS, 3), [1 / 7, 3 / 7, 3 / 7])
    # a fourth class without any box counts as one box: inverse 1/3, 1, 1, 1 (sum 10/3)
    np.testing.assert_allclose(class_weights(LABELS, 4), [0.1, 0.3, 0.3, 0.3])
    np.testing.assert_allclose(class_weights(labels_of([], []), 2), [0.5, 0.5])  # no boxes at all: uniform
    assert class_weights([], 3).shape == (3,)


def test_image_weights_by_hand():
    weights = image_weights(LABELS, 3, class_weights(LABELS, 3))
    np.testing.assert_allclose(weights, [2 / 7 + 3 / 7, 1 / 7, 0, 3 / 7])  # a box's class weight, summed
    np.testing.assert_allclose(image_weights(LABELS, 3, np.array([1.0, 10.0, 100.0])), [12, 1, 0, 100])


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(ImageWeightsError, match=r"maps has 2 per-class mAPs for 3 classes"):
        sample_indices(LABELS, 3, np.zeros(2), random.Random(0))
    with pytest.raises(ImageWeightsError, match=r"label classes must be in \[0, 2\), found 2"):
        class_weights(LABELS, 2)
    with pytest.raises(ImageWeightsError, match="class_weights has 2 entries for 3 classes"):
        image_weights(LABELS, 3, np.ones(2))
    with pytest.raises(ImageWeightsError, match="nc must be a positive integer"):
        class_weights(LABELS, 0)


def draw_counts(labels, nc, maps, epochs=20, seed=0) -> Counter:
    """How often each image is drawn over several epochs of sample_indices."""
    rng = np.random.default_rng(seed)
    return Counter(i for _ in range(epochs) for i in sample_indices(labels, nc, np.asarray(maps, float), rng))


def test_rare_classes_drawn_more_often():
    # 90 images of class 0, 10 of class 1: class weights 0.1 and 0.9, so each half of the weight -> half the draws
    labels = labels_of(*([[0]] * 90 + [[1]] * 10))
    counts = draw_counts(labels, 2, [0.0, 0.0])
    rare = sum(counts[i] for i in range(90, 100)) / 2000
    assert 0.45 < rare < 0.55  # drawn uniformly it would be 0.10


def test_classes_with_low_map_drawn_more_often():
    # equally frequent classes; class 1 at mAP 0 vs class 0 at 0.9: (1 - mAP)^2 weights 1 and 0.01
    labels = labels_of(*([[0]] * 50 + [[1]] * 50))
    counts = draw_counts(labels, 2, [0.9, 0.0])
    assert sum(counts[i] for i in range(50, 100)) / 2000 > 0.97  # expected 1 / 1.01 = 0.990
    counts = draw_counts(labels, 2, [0.5, 0.5])  # equal mAPs: back to even odds
    assert 0.45 < sum(counts[i] for i in range(50, 100)) / 2000 < 0.55


def test_images_without_boxes_never_drawn_and_all_zero_is_uniform():
    counts = draw_counts(LABELS, 3, [0, 0, 0])
    assert counts[2] == 0 and counts[0] > counts[3] > counts[1] > 0  # weights 5/7, 3/7, 1/7
    for labels, maps in ((labels_of([], [], []), [0.0]), (LABELS, [1.0, 1.0, 1.0])):  # no boxes; all mAP 1
        drawn = sample_indices(labels, len(maps), np.array(maps), random.Random(1))
        assert len(drawn) == len(labels) and set(drawn) <= set(range(len(labels)))
        assert set(draw_counts(labels, len(maps), maps)) == set(range(len(labels)))  # every image in turn
    assert sample_indices([], 2, np.zeros(2), random.Random(0)) == []


def test_both_random_generators_are_reproducible():
    maps = np.array([0.2, np.nan, 0.7])  # NaN: a class missing from validation weighs as unlearnt
    for make in (random.Random, np.random.default_rng):
        first = sample_indices(LABELS, 3, maps, make(5))
        assert first == sample_indices(LABELS, 3, maps, make(5)) and len(first) == 4 and 2 not in first
        assert all(isinstance(i, int) for i in first)


# ---------------------------------------------------------------------------------------------------------------------
# the dataset honours its indices


def class_per_image(root: Path, n: int) -> Path:
    """n images, image k a flat grey of value 20k with one box of class k; returns the images folder."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for k in range(n):
        assert cv2.imwrite(str(root / "images" / f"{k}.png"), np.full((64, 64, 3), 20 * k, np.uint8))
        (root / "labels" / f"{k}.txt").write_text(f"{k} 0.5 0.5 0.5 0.5\n")
    return root / "images"


def test_dataset_loads_its_indices(tmp_path):
    ds = LoadImagesAndLabels(class_per_image(tmp_path, 4), img_size=64, nc=4)
    assert list(ds.indices) == [0, 1, 2, 3]
    ds.indices = [2, 2, 0, 3]
    image, labels, path, _ = ds[0]
    assert Path(path).name == "2.png" and int(image[0, 0, 0]) == 40 and labels[:, 1].tolist() == [2]
    assert [Path(ds[i][2]).name for i in range(4)] == ["2.png", "2.png", "0.png", "3.png"]


def test_mosaic_partners_come_from_the_indices(tmp_path):
    hyp = {**load_hyp("hyp.scratch.yaml"), "mosaic": 1.0, "mixup": 0.0, "scale": 0.0, "translate": 0.0}
    ds = LoadImagesAndLabels(class_per_image(tmp_path, 4), img_size=64, augment=True, hyp=hyp, nc=4)
    ds.indices = [1, 1, 1, 1]
    random.seed(0)
    classes = {int(c) for i in range(4) for c in ds[i][1][:, 1]}
    assert classes == {1}  # the image itself and its 3 partners are all image 1


def test_loader_workers_see_new_indices_each_epoch(tmp_path):
    loader, ds = create_dataloader(class_per_image(tmp_path, 4), 64, 2, 32, workers=2, image_weights=True, nc=4)
    assert loader.num_workers == 2 and not loader.persistent_workers
    for indices in ([3, 3, 3, 3], [0, 1, 0, 1]):  # as the trainer sets them before each epoch
        ds.indices = indices
        assert [Path(p).name for batch in loader for p in batch[2]] == [f"{i}.png" for i in indices]


def test_image_weights_turn_rect_off(tmp_path, log):
    _, ds = create_dataloader(class_per_image(tmp_path, 4), 64, 2, 32, workers=0, rect=True, image_weights=True)
    assert not ds.rect and "--rect is incompatible with --image-weights, rect=False" in log.text
