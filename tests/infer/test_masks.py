"""Instance masks at the original resolution inside each box (utils/infer/masks.py): the same logits as sampling the
prototypes through the letterbox with torch's own bilinear sampler, outlines, drawing."""

import numpy as np
import torch
import torch.nn.functional as F

from utils.infer.masks import InstanceMasks, draw_masks, instance_masks, letterbox_mapping


def _reference_full_logits(protos, coefficients, input_hw, original_hw) -> torch.Tensor:
    """Every detection's logits on the whole original image, by torch's grid_sample (align_corners=False, border
    clamped): an independent route to the same sampling, affordable on small images only."""
    gain, pad_x, pad_y = letterbox_mapping(input_hw, original_hw)
    nm, h, w = protos.shape
    ys, xs = torch.meshgrid(torch.arange(original_hw[0]) + 0.5, torch.arange(original_hw[1]) + 0.5, indexing="ij")
    x_in, y_in = xs * gain + pad_x, ys * gain + pad_y  # input pixels
    grid = torch.stack((2 * x_in / input_hw[1] - 1, 2 * y_in / input_hw[0] - 1), -1)[None].float()
    logits = torch.einsum("nc,chw->nhw", coefficients, protos)[:, None]
    sampled = F.grid_sample(logits, grid.expand(len(logits), -1, -1, -1), align_corners=False, padding_mode="border")
    return sampled[:, 0]


def test_masks_inside_boxes_equal_full_frame_sampling_cropped():
    torch.manual_seed(0)
    protos, coefficients = torch.randn(32, 40, 56), torch.randn(7, 32)
    input_hw, original_hw = (160, 224), (181, 300)  # letterboxed with padding rows
    boxes = np.array(
        [
            [10.2, 20.7, 120.4, 90.1],
            [0, 0, 300, 181],
            [250.5, 100.5, 299.9, 180.9],
            [40, 40, 40.3, 40.2],
            [-5, -5, 30, 30],
            [100, 60, 100, 90],
            [150.0, 10.0, 210.0, 170.0],
        ]
    )
    masks = instance_masks(protos, coefficients, boxes, input_hw, original_hw)
    full = _reference_full_logits(protos, coefficients, input_hw, original_hw) > 0
    xs, ys = np.arange(original_hw[1]) + 0.5, np.arange(original_hw[0]) + 0.5
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        inside = ((ys >= y1) & (ys < y2))[:, None] & ((xs >= x1) & (xs < x2))[None]
        expected = full[i].numpy() & inside
        got = masks.full(i)
        # bilinear weights differ by float rounding between the two routes: only pixels at logit ~0 may flip
        assert (got != expected).sum() <= max(2, expected.sum() // 1000), i
        assert not (got & ~inside).any()
    assert masks.crops[3].size <= 1 and masks.crops[5].size == 0  # a sliver and an empty box: no mask, no error


def test_memory_is_the_boxes_not_the_frame():
    protos, coefficients = torch.randn(32, 160, 160), torch.randn(300, 32)
    boxes = np.tile([[100.0, 200.0, 164.0, 264.0]], (300, 1))  # 300 detections of 64 x 64 on a 4K frame
    masks = instance_masks(protos, coefficients, boxes, (384, 640), (2160, 3840))
    assert sum(c.nbytes for c in masks.crops) == 300 * 64 * 64  # one byte per box pixel, none elsewhere
    assert all(c.dtype == bool for c in masks.crops)


def test_polygon_is_the_largest_piece_in_pixels_and_normalised():
    crop = np.zeros((50, 80), dtype=bool)
    crop[5:45, 10:50] = True  # the large piece
    crop[10:14, 70:76] = True  # a small one
    masks = InstanceMasks((100, 200), [(20, 30)], [crop])
    polygon = masks.polygon(0)
    assert polygon[:, 0].min() == 30 and polygon[:, 0].max() == 69 and polygon[:, 1].min() == 35
    assert polygon[:, 1].max() == 74
    normalised = masks.polygon_normalised(0)
    assert np.allclose(normalised, polygon / [200, 100]) and normalised.max() <= 1
    assert InstanceMasks((10, 10), [(0, 0)], [np.zeros((3, 3), bool)]).polygon(0).shape == (0, 2)


def test_draw_masks_colours_only_mask_pixels():
    image = np.zeros((20, 30, 3), dtype=np.uint8)
    crop = np.zeros((5, 6), dtype=bool)
    crop[1:3, 2:5] = True
    draw_masks(image, InstanceMasks((20, 30), [(4, 7)], [crop]), [(0, 0, 200)], alpha=0.5)
    assert (image[8:10, 6:9, 2] == 100).all() and image.sum() == 6 * 100


def test_draw_masks_blends_overlapping_masks_in_order_as_the_float_formula():
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    origins = [(int(x), int(y)) for x, y in rng.integers(0, 20, (6, 2))]
    crops = [rng.random((int(h), int(w))) < 0.6 for h, w in rng.integers(1, 20, (6, 2))]
    colors = [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in crops]
    expected = image.copy()
    for (x, y), crop, colour in zip(origins, crops, colors):  # each mask over the ones before it
        region = expected[y : y + crop.shape[0], x : x + crop.shape[1]]
        region[crop] = (region[crop] * 0.5 + np.asarray(colour, np.float32) * 0.5).astype(np.uint8)
    drawn = draw_masks(image, InstanceMasks((40, 50), origins, crops), colors, alpha=0.5)
    assert drawn is image and (image == expected).all()
