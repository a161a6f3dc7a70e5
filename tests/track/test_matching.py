"""IoU costs and the assignment built on scipy's solver."""

import numpy as np

from utils.track.matching import assign, box_iou, iou_cost


def test_box_iou_values():
    a = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], float)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]], float)
    assert np.allclose(box_iou(a, b), [[1, 1 / 3, 0], [1, 1 / 3, 0]])
    assert box_iou(np.zeros((0, 4)), b).shape == (0, 3)


def test_fuse_score_prefers_the_confident_detection():
    track = np.array([[0, 0, 10, 10]], float)
    dets = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], float)
    cost = iou_cost(track, dets, np.array([0.3, 0.9]))
    assert np.allclose(cost, [[0.7, 0.1]])
    pairs, _, left = assign(cost, 0.8)
    assert pairs == [(0, 1)] and left == [0]


def test_assign_is_optimal_and_respects_the_threshold():
    # greedy would give row 0 column 0 (0.1) and leave row 1 with 0.95; the optimum pairs crosswise
    cost = np.array([[0.1, 0.2], [0.3, 0.95]])
    pairs, rows, cols = assign(cost, 0.5)
    assert sorted(pairs) == [(0, 1), (1, 0)] and rows == [] and cols == []
    pairs, rows, cols = assign(np.array([[0.9, 0.2], [0.85, 0.95]]), 0.5)
    assert pairs == [(0, 1)] and rows == [1] and cols == [0]


def test_assign_empty():
    assert assign(np.zeros((0, 3)), 0.5) == ([], [], [0, 1, 2])
    assert assign(np.zeros((2, 0)), 0.5) == ([], [0, 1], [])


def test_one_good_pair_beats_two_poor_ones():
    # pairing crosswise costs 0.5 + 0.5 = 1.0; the good pair (0.1) plus two unpaired (0.8 / 2 each) costs 0.9
    cost = np.array([[0.1, 0.5], [0.5, 0.95]])
    pairs, rows, cols = assign(cost, 0.8)
    assert pairs == [(0, 0)] and rows == [1] and cols == [1]
