"""Mask metrics (COCO 'segm'): detection RLEs equal pycocotools' encoding, ground truth rasterised as pycocotools
rasterises it, and the in-memory numbers equal pycocotools' COCOeval on the files the evaluator writes (crowd
regions included)."""

import cv2
import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from utils.errors import MetricsError
from utils.eval.coco_io import pycocotools_stats
from utils.eval.evaluator import CocoEvaluator
from utils.eval.segm import (
    detections_that_can_match,
    label_segmentations,
    rle_area,
    segmentation_rle,
)
from utils.infer.masks import crop_rle, instance_masks, letterbox_mapping, pixel_bounds


@pytest.mark.parametrize("small_frames", [0, 2**17])  # 0: every frame by the runs of its crop
def test_crop_rle_equals_pycocotools_encode_of_the_full_frame(monkeypatch, small_frames):
    monkeypatch.setattr("utils.infer.masks.SMALL_FRAME_PIXELS", small_frames)
    rng = np.random.default_rng(0)
    for trial in range(400):
        height, width = (int(v) for v in rng.integers(1, 40, 2))
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        w, h = int(rng.integers(0, width - x0 + 1)), int(rng.integers(0, height - y0 + 1))
        crop = rng.random((h, w)) < rng.random()
        if trial % 4 == 0:
            crop[:] = True  # full columns: runs that meet across column boundaries
        full = np.zeros((height, width), np.uint8, order="F")
        full[y0 : y0 + h, x0 : x0 + w] = crop
        assert crop_rle((x0, y0), crop, (height, width))["counts"] == mask_utils.encode(full)["counts"], trial


def _polygon(rng, cx, cy, radius, k=8) -> np.ndarray:
    """A star-shaped polygon (k, 2) around (cx, cy)."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    r = radius * rng.uniform(0.5, 1.0, k)
    return np.stack((cx + r * np.cos(angles), cy + r * np.sin(angles)), 1)


def _detection(rng, polygon: np.ndarray, shape) -> tuple[np.ndarray, tuple[int, int], np.ndarray]:
    """A detection near a ground-truth polygon: its box (x1, y1, x2, y2), and its mask as a crop of that box."""
    height, width = shape
    moved = polygon + rng.normal(0, 2.0, polygon.shape)
    x1, y1 = np.clip(moved.min(0) - rng.uniform(0, 3, 2), 0, None)
    x2, y2 = np.minimum(moved.max(0) + rng.uniform(0, 3, 2), (width, height))
    origin = (int(np.ceil(x1 - 0.5)), int(np.ceil(y1 - 0.5)))
    size = (max(int(np.ceil(y2 - 0.5)) - origin[1], 0), max(int(np.ceil(x2 - 0.5)) - origin[0], 0))
    crop = np.zeros(size, np.uint8)
    cv2.fillPoly(crop, [np.round(moved - origin).astype(np.int32)], 1)
    return np.array([x1, y1, x2, y2]), origin, crop.astype(bool)


def _fill_evaluator(evaluator: CocoEvaluator, rng, crowd_every: int = 0, only_matchable: bool = False) -> int:
    """Eight images of three classes: polygons (and crowd RLEs), matching detections and false ones; only_matchable:
    the masks given are only those of detections_that_can_match, as validation gives them. The masks given."""
    given_masks = 0
    for image_id in range(1, 9):
        shape = (int(rng.integers(60, 120)), int(rng.integers(60, 140)))
        height, width = shape
        n = int(rng.integers(0, 5))
        polygons = [_polygon(rng, rng.uniform(15, width - 15), rng.uniform(15, height - 15), 14) for _ in range(n)]
        gt_cls = rng.integers(0, 3, n)
        boxes = np.array([[*p.min(0), *p.max(0)] for p in polygons]).reshape(-1, 4)
        normalised = [p / (width, height) for p in polygons]
        segmentations = label_segmentations(normalised, boxes, shape)
        crowd = np.zeros(n, bool)
        if crowd_every and n:
            crowd[0] = image_id % crowd_every == 0
            if crowd[0]:  # a crowd region as COCO stores one: an uncompressed RLE
                full = np.zeros(shape, np.uint8)
                cv2.fillPoly(full, [np.round(polygons[0]).astype(np.int32)], 1)
                flat = full.ravel(order="F")
                change = np.flatnonzero(np.diff(flat)) + 1
                counts = np.diff(np.r_[0, change, flat.size]).tolist()
                segmentations[0] = {"size": [height, width], "counts": ([0] if flat[0] else []) + counts}
        gt_rles = [segmentation_rle(s, height, width) for s in segmentations]
        dets = [_detection(rng, p, shape) for p in polygons if rng.random() < 0.8]
        dets += [_detection(rng, _polygon(rng, width / 2, height / 2, 10), shape) for _ in range(2)]
        det_cls = np.r_[gt_cls[: len(dets) - 2], rng.integers(0, 3, 2)]
        det_boxes = np.array([d[0] for d in dets]).reshape(-1, 4)
        evaluator.add(
            image_id,
            boxes,
            gt_cls,
            det_boxes,
            rng.uniform(0.01, 1.0, len(dets)),
            det_cls,
            gt_areas=rle_area(gt_rles),
            gt_crowd=crowd,
            shape=shape,
        )
        given = np.arange(len(dets))
        if only_matchable:
            given = detections_that_can_match(pixel_bounds(det_boxes, height, width), det_cls, gt_rles, gt_cls, crowd)
        evaluator.add_masks(gt_rles, {i: crop_rle(*dets[i][1:], shape) for i in given.tolist()}, segmentations)
        given_masks += len(given)
    return given_masks


@pytest.mark.parametrize("crowd_every", [0, 3])
def test_mask_metrics_equal_pycocotools_segm_on_the_written_files(crowd_every):
    evaluator = CocoEvaluator(["a", "b", "c"], keep_masks=True)
    _fill_evaluator(evaluator, np.random.default_rng(crowd_every), crowd_every)
    masks, boxes = evaluator.evaluate_masks(), evaluator.evaluate()
    gt, predictions = evaluator.ground_truth(), evaluator.predictions()
    assert all("segmentation" in p for p in predictions) and all("segmentation" in a for a in gt["annotations"])
    reference = pycocotools_stats(gt, predictions, iou_type="segm")
    assert np.abs(masks.stats - reference).max() <= 1e-12
    assert np.abs(boxes.stats - pycocotools_stats(gt, predictions)).max() <= 1e-12
    assert 0.05 < masks.stats[0] < 0.95 and masks.stats[0] != boxes.stats[0]  # real, distinct numbers
    assert masks.instances.sum() == boxes.instances.sum() and 0 < masks.mp <= 1


@pytest.mark.parametrize("crowd_every", [0, 3])
def test_the_masks_of_detections_that_can_match_give_every_mask_s_numbers(crowd_every):
    every, matchable = CocoEvaluator(["a", "b", "c"]), CocoEvaluator(["a", "b", "c"])
    n_every = _fill_evaluator(every, np.random.default_rng(crowd_every), crowd_every)
    n_matchable = _fill_evaluator(matchable, np.random.default_rng(crowd_every), crowd_every, only_matchable=True)
    assert 0.05 < every.evaluate_masks().stats[0] < 0.95 and 0 < n_matchable < n_every
    assert np.array_equal(every.evaluate_masks().stats, matchable.evaluate_masks().stats)
    assert not any("segmentation" in p for p in every.predictions())  # masks are kept only when asked


def test_kept_masks_need_every_detection():
    evaluator = CocoEvaluator(["a"], keep_masks=True)
    evaluator.add(1, np.zeros((0, 4)), [], np.array([[1.0, 1.0, 4.0, 4.0]]), [0.5], [0], shape=(10, 10))
    with pytest.raises(ValueError, match="every detection"):
        evaluator.add_masks([], {})


def test_areas_of_256_or_more_rles():
    full = np.zeros((6, 7), np.uint8, order="F")
    full[1:4, 2:6] = 1
    assert rle_area([mask_utils.encode(full)] * 300).tolist() == [12.0] * 300  # pycocotools' area() of the list fails


def test_evaluate_masks_needs_every_image_masked():
    evaluator = CocoEvaluator(["a"])
    evaluator.add(1, np.zeros((0, 4)), [], np.zeros((0, 4)), [], [], shape=(10, 10))
    with pytest.raises(ValueError, match="masks were added for 0 of 1"):
        evaluator.evaluate_masks()


def test_label_rows_without_a_polygon_are_their_box():
    boxes = np.array([[2.0, 3.0, 12.0, 9.0], [0.0, 0.0, 5.0, 5.0]])
    segments = [np.zeros((0, 2), np.float32), np.array([[0.1, 0.1], [0.4, 0.1], [0.4, 0.4]], np.float32)]
    rows = label_segmentations(segments, boxes, (20, 30))
    assert rows[0] == [[2.0, 3.0, 2.0, 9.0, 12.0, 9.0, 12.0, 3.0]]
    assert np.allclose(rows[1][0], [3, 2, 12, 2, 12, 8], atol=1e-5)  # x by the width, y by the height
    assert rle_area([segmentation_rle(rows[0], 20, 30)])[0] == 60  # pycocotools' rasterisation of the box


@pytest.mark.parametrize(
    "segmentation, message",
    [
        ([[1.0, 2.0]], "at least 2"),
        ([[0.0, 0.0, float("nan"), 1.0, 2.0, 2.0]], "finite"),
        ({"size": [5, 5], "counts": [1, 2]}, "size"),
        ({"size": [10, 10], "counts": [1, 2]}, "cover"),
        ("abc", "neither"),
    ],
)
def test_bad_segmentations_are_one_line(segmentation, message):
    with pytest.raises(MetricsError, match=message):
        segmentation_rle(segmentation, 10, 10)


def test_a_dataset_letterbox_maps_masks_as_the_centred_one_when_they_agree():
    """ratio_pad ((gain_h, gain_w), (pad_w, pad_h)) as the loader records it: the centred letterbox's own values give
    the same masks as no ratio_pad; a rectangular batch's extra padding moves them (boxes stay in place)."""
    torch.manual_seed(0)
    protos, coefficients = torch.randn(32, 40, 56), torch.randn(4, 32)
    input_hw, original_hw = (160, 224), (181, 300)
    boxes = np.array([[10.2, 20.7, 120.4, 90.1], [0, 0, 300, 181], [150.0, 10.0, 210.0, 170.0], [5, 5, 6, 6]])
    gain, pad_x, pad_y = letterbox_mapping(input_hw, original_hw)
    centred = instance_masks(protos, coefficients, boxes, input_hw, original_hw)
    same = instance_masks(protos, coefficients, boxes, input_hw, original_hw, ((gain, gain), (pad_x, pad_y)))
    moved = instance_masks(protos, coefficients, boxes, input_hw, original_hw, ((gain, gain), (pad_x, pad_y + 8)))
    assert all(np.array_equal(a, b) for a, b in zip(centred.crops, same.crops))
    assert centred.origins == moved.origins and not all(
        np.array_equal(a, b) for a, b in zip(centred.crops, moved.crops)
    )


def test_a_detection_can_match_when_its_box_holds_half_a_mask_of_its_class_or_meets_a_crowd_region():
    full = np.zeros((30, 30), np.uint8, order="F")
    full[2:6, 5:10] = 1  # 20 pixels: x 5..9, y 2..5
    gt_rles = [mask_utils.encode(full)] * 2 + [mask_utils.encode(np.zeros_like(full))]
    det_bounds = np.array(
        [[0, 0, 8, 9], [0, 0, 7, 9], [0, 0, 10, 4], [7, 3, 12, 9], [0, 0, 6, 9], [0, 0, 5, 9], [0, 0, 30, 30]]
    )  # x 5..7 (12 of 20), x 5..6 (8), y 2..3 (10: half), x 7..9 y 3..5 (9); crowd: x 5, x < 5; the empty mask
    det_cls = np.array([0, 0, 0, 0, 1, 1, 2])
    found = detections_that_can_match(det_bounds, det_cls, gt_rles, [0, 1, 2], [False, True, False])
    assert found.tolist() == [0, 2, 4]
