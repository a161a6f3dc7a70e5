"""The Kalman filter: a constant-velocity box is followed exactly, noise is averaged out, camera motion moves the
state."""

import numpy as np

from utils.track import kalman


def test_initiate_is_at_rest_with_size_scaled_uncertainty():
    mean, cov = kalman.initiate(np.array([[100.0, 50.0, 20.0, 40.0], [0.0, 0.0, 200.0, 400.0]]))
    assert mean.shape == (2, 8) and cov.shape == (2, 8, 8)
    assert np.all(mean[:, 4:] == 0) and np.allclose(mean[:, :4], [[100, 50, 20, 40], [0, 0, 200, 400]])
    assert np.allclose(cov[1], cov[0] * 100)  # ten times the box: ten times the standard deviation


def test_learns_a_constant_velocity_and_predicts_it():
    velocity = np.array([3.0, -2.0, 0.5, 0.25])
    box = np.array([50.0, 80.0, 30.0, 60.0])
    mean, cov = kalman.initiate(box[None])
    for t in range(1, 40):
        mean, cov = kalman.predict(mean, cov)
        mean, cov = kalman.update(mean, cov, (box + t * velocity)[None])
    assert np.allclose(mean[0, 4:], velocity, atol=0.05)
    ahead, _ = kalman.predict(mean, cov)
    assert np.allclose(ahead[0, :4], box + 40 * velocity, atol=0.2)


def test_update_averages_out_noise_and_shrinks_uncertainty():
    rng = np.random.default_rng(0)
    truth = np.array([200.0, 100.0, 40.0, 80.0])
    mean, cov = kalman.initiate((truth + rng.normal(0, 2, 4))[None])
    start = np.trace(cov[0, :4, :4])
    errors = []
    for _ in range(60):
        mean, cov = kalman.predict(mean, cov)
        measured = truth + rng.normal(0, 2, 4)
        mean, cov = kalman.update(mean, cov, measured[None])
        errors.append((np.abs(mean[0, :4] - truth).mean(), np.abs(measured - truth).mean()))
    filtered, raw = np.mean(errors[20:], axis=0)
    assert filtered < 0.8 * raw
    assert np.trace(cov[0, :4, :4]) < start


def test_predict_grows_uncertainty_and_handles_none():
    mean, cov = kalman.initiate(np.array([[10.0, 10.0, 5.0, 5.0]]))
    _, cov2 = kalman.predict(mean, cov)
    assert np.all(np.diag(cov2[0]) >= np.diag(cov[0]))
    empty_mean, empty_cov = kalman.predict(np.zeros((0, 8)), np.zeros((0, 8, 8)))
    assert empty_mean.shape == (0, 8) and empty_cov.shape == (0, 8, 8)


def test_warp_moves_position_and_rotates_velocity():
    mean, cov = kalman.initiate(np.array([[10.0, 20.0, 4.0, 6.0]]))
    mean[0, 4:6] = [1.0, 0.0]
    shift = np.array([[1.0, 0.0, 5.0], [0.0, 1.0, -3.0]])
    moved, moved_cov = kalman.warp(mean, cov, shift)
    assert np.allclose(moved[0, :4], [15, 17, 4, 6]) and np.allclose(moved_cov, cov)
    quarter = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0]])  # 90 degrees
    turned, _ = kalman.warp(mean, cov, quarter)
    assert np.allclose(turned[0, :2], [-20, 10]) and np.allclose(turned[0, 4:6], [0, 1])
    assert np.allclose(turned[0, 2:4], [6, 4])  # the turned box's enclosing size: never negative


def test_aspect_state_follows_a_box_and_keeps_its_aspect_nearly_fixed():
    """(cx, cy, w / h, h), ByteTrack's state: noise scales with the height, the aspect ratio's is a small constant."""
    mean, cov = kalman.initiate(np.array([[50.0, 80.0, 0.5, 60.0]]), aspect=True)
    assert np.isclose(cov[0, 2, 2], 1e-4) and np.isclose(cov[0, 0, 0], (2 * 60 / 20) ** 2)
    assert np.isclose(cov[0, 6, 6], 1e-10) and np.isclose(cov[0, 7, 7], (10 * 60 / 160) ** 2)
    velocity = np.array([3.0, -2.0, 0.0, 0.25])
    box = np.array([50.0, 80.0, 0.5, 60.0])
    for t in range(1, 40):
        mean, cov = kalman.predict(mean, cov, aspect=True)
        mean, cov = kalman.update(mean, cov, (box + t * velocity)[None], aspect=True)
    assert np.allclose(mean[0, 4:], velocity, atol=0.05) and np.isclose(mean[0, 2], 0.5)
