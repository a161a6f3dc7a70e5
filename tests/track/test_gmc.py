"""Camera-motion estimates recover a known shift of a textured frame with every method."""

import cv2
import numpy as np
import pytest

from utils.track.gmc import CameraMotion


@pytest.fixture(scope="module")
def texture():
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 255, (300, 460, 3), dtype=np.uint8), (0, 0), 4)
    for x, y, w, h, c in zip(*rng.integers(0, 440, (2, 60)), *rng.integers(6, 30, (2, 60)), rng.integers(0, 255, 60)):
        cv2.rectangle(img, (int(x), int(y)), (int(x + w), int(y + h)), (int(c),) * 3, -1)  # corners for keypoints
    return cv2.GaussianBlur(img, (0, 0), 1)


@pytest.mark.parametrize("method", ["sparseOptFlow", "orb", "sift", "ecc"])
def test_recovers_a_known_shift(texture, method):
    motion = CameraMotion(method)
    assert np.allclose(motion.estimate(texture[20:260, 40:360]), np.eye(2, 3))  # first frame: nothing to compare
    # the camera moves 12 px right and 6 px down: the scene moves 12 px left and 6 px up in the image
    affine = motion.estimate(texture[26:266, 52:372])
    assert np.allclose(affine[:, :2], np.eye(2), atol=0.02)
    assert np.allclose(affine[:, 2], [-12, -6], atol=1.0)  # within a pixel (found at half size)


@pytest.mark.parametrize("method", ["sparseOptFlow", "orb", "ecc"])
def test_a_blank_frame_is_no_motion(method):
    motion = CameraMotion(method)
    blank = np.full((120, 160, 3), 128, np.uint8)
    motion.estimate(blank)
    assert np.allclose(motion.estimate(blank), np.eye(2, 3))


def test_none_and_reset(texture):
    assert np.allclose(CameraMotion("none").estimate(texture), np.eye(2, 3))
    motion = CameraMotion("sparseOptFlow")
    motion.estimate(texture[:240, :320])
    motion.reset()
    assert np.allclose(motion.estimate(texture[6:246, 12:332]), np.eye(2, 3))


@pytest.mark.parametrize("method", ["orb", "sift"])
def test_detections_are_left_out_of_the_keypoint_methods(method):
    """A still camera over a faint background and one big, sharp-cornered object moving 10 px: without its box the
    object's corners pass for camera motion; with its box masked out of orb's or sift's search the camera is (nearly)
    still. (sparseOptFlow follows every corner, as BoT-SORT's does: the next test.)"""
    rng = np.random.default_rng(1)
    background = cv2.GaussianBlur(rng.integers(100, 140, (240, 320, 3), dtype=np.uint8), (0, 0), 2)
    frames, boxes = [], []
    for x in (60, 70):
        frame = background.copy()
        for dx, dy in ((0, 0), (50, 20), (20, 60)):
            cv2.rectangle(frame, (x + dx, 40 + dy), (x + dx + 40, 80 + dy), (255, 255, 255), -1)
        frames.append(frame)
        boxes.append(np.array([[x - 5, 35, x + 115, 145, 0.9, 0]]))
    unmasked, masked = CameraMotion(method), CameraMotion(method)
    for frame, box in zip(frames, boxes):
        moved = unmasked.estimate(frame)
        still = masked.estimate(frame, box)
    assert moved[0, 2] > 5
    assert abs(still[0, 2]) < 1 and abs(still[1, 2]) < 1


def test_optical_flow_needs_corners_in_the_previous_frame_only(texture, monkeypatch):
    """Lucas-Kanade follows the previous frame's corners: a frame where no corner of its own is found still gets
    its estimate (once it gave none), and the frame after it none (nothing to follow)."""
    motion = CameraMotion("sparseOptFlow")
    motion.estimate(texture[20:260, 40:360])
    assert 5 <= len(motion.previous[1]) <= 400  # at most BoT-SORT's count (Ultralytics')
    monkeypatch.setattr(cv2, "goodFeaturesToTrack", lambda *a, **k: None)
    affine = motion.estimate(texture[26:266, 52:372])
    assert np.allclose(affine[:, 2], [-12, -6], atol=1.0)
    assert np.allclose(motion.estimate(texture[20:260, 40:360]), np.eye(2, 3))


@pytest.mark.parametrize("method", ["sparseOptFlow", "orb", "sift", "ecc"])
def test_a_new_frame_size_restarts_the_estimate(texture, method, log):
    """Frames whose size changes (a folder of mixed images, a stream that changes resolution) cannot be paired with
    the previous one: no motion on the new size, said once, and the estimate works again between frames of it."""
    motion = CameraMotion(method)
    motion.estimate(texture[20:260, 40:360])
    assert np.allclose(motion.estimate(texture[:200, :400]), np.eye(2, 3))  # wider and shorter
    assert np.allclose(motion.estimate(texture[20:260, 40:360]), np.eye(2, 3))  # back to the first size
    said = [m for m in log.messages if "frame size changed" in m]
    assert len(said) == 1 and "320x240 to 400x200" in said[0]
    affine = motion.estimate(texture[26:266, 52:372])
    assert np.allclose(affine[:, 2], [-12, -6], atol=1.0)
