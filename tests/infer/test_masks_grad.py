"""Masks from tensors that still require grad (test.py scoring a model whose weights were loaded outside
torch.no_grad, as a checkpoint with trainable parameters is): the masks are the same as from detached tensors."""

import numpy as np
import torch

from utils.infer.masks import instance_masks


def test_masks_from_tensors_that_require_grad_equal_the_detached_ones():
    torch.manual_seed(0)
    protos, coefficients = torch.randn(32, 20, 20, requires_grad=True), torch.randn(3, 32, requires_grad=True)
    boxes = np.array([[4.0, 6.0, 50.0, 70.0], [0.0, 0.0, 80.0, 80.0], [30.5, 20.5, 31.0, 60.0]])
    live = instance_masks(protos * 1.0, coefficients * 1.0, boxes, (80, 80), (80, 80))
    plain = instance_masks(protos.detach(), coefficients.detach(), boxes, (80, 80), (80, 80))
    assert live.origins == plain.origins
    assert all(np.array_equal(a, b) for a, b in zip(live.crops, plain.crops))
    assert live.crops[1].any() and not live.crops[1].all()  # a real mask, not an empty or full one
