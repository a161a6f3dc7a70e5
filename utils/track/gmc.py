"""Camera-motion estimate between consecutive frames (BoT-SORT's global motion compensation), through OpenCV.

Each method returns the 2x3 affine that maps the previous frame's pixels onto the current one's, found on a
downscaled grey image (2x, as BoT-SORT does) and scaled back: sparseOptFlow tracks the previous frame's corners (up
to 400, Ultralytics' count) into this one with pyramidal Lucas-Kanade, orb and sift match keypoints outside the
detections, ecc aligns the images by enhanced correlation; the point methods fit a partial affine (rotation, uniform
scale, shift) robustly with RANSAC. When an estimate fails (fewer than 5 point pairs, a blank frame) the motion is
taken as none. A frame of another size than the previous one (a folder of mixed images, a stream that changes
resolution) cannot be compared with it: the estimate starts again from that frame (no motion), said once.
"""

import cv2
import numpy as np

from utils.log import LOGGER

IDENTITY = np.eye(2, 3)
DOWNSCALE = 2
FLOW_CORNERS = 400  # corners followed by sparseOptFlow: far more than a 4-parameter motion needs
MIN_POINT_PAIRS = 5  # fewer pairs than this: no estimate (as BoT-SORT)


class CameraMotion:
    """Keeps the previous frame's features; `estimate(frame)` gives the affine from the previous frame to this one."""

    def __init__(self, method: str = "sparseOptFlow"):
        self.method = method
        self.previous = None  # the previous frame's grey image, and its keypoints/descriptors for orb/sift
        self.size: tuple[int, int] | None = None  # (h, w) of the previous frame
        self.size_change_said = False
        if method == "orb":
            self.detector, self.norm = cv2.ORB_create(), cv2.NORM_HAMMING
        elif method == "sift":
            self.detector, self.norm = cv2.SIFT_create(nOctaveLayers=3, contrastThreshold=0.02), cv2.NORM_L2

    def reset(self) -> None:
        self.previous, self.size = None, None

    def _restart_on_new_size(self, size: tuple[int, int]) -> None:
        """Forget the previous frame when this one has another size: neither optical flow nor ECC can pair two
        images of different sizes, and keypoints of a resized frame would read as camera motion."""
        if self.size is not None and size != self.size:
            self.previous = None
            if not self.size_change_said:
                LOGGER.warning(
                    f"WARNING: frame size changed from {self.size[1]}x{self.size[0]} to {size[1]}x{size[0]}: the "
                    "camera-motion estimate restarts on each new size (said once)"
                )
                self.size_change_said = True
        self.size = size

    def estimate(self, frame: np.ndarray | None, boxes: np.ndarray | None = None) -> np.ndarray:
        """The affine from the previous frame to this one. boxes (n, >=4 x1, y1, x2, y2), the frame's detections,
        are left out of orb's and sift's keypoint search (points on moving objects would be taken for the camera's
        motion); sparseOptFlow uses every corner, as BoT-SORT does."""
        if self.method == "none" or frame is None:
            return IDENTITY.copy()
        grey = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY) if frame.ndim == 3 else frame
        h, w = grey.shape[:2]
        self._restart_on_new_size((h, w))
        grey = cv2.resize(grey, (max(w // DOWNSCALE, 1), max(h // DOWNSCALE, 1)))
        if self.method == "ecc":
            affine = self._ecc(grey)
        elif self.method == "sparseOptFlow":
            affine = self._optical_flow(grey)
        else:
            affine = self._features(grey, _background_mask(grey.shape, boxes))
        affine[:, 2] *= DOWNSCALE  # the shift back in full-size pixels
        return affine

    def _optical_flow(self, grey: np.ndarray) -> np.ndarray:
        corners = cv2.goodFeaturesToTrack(grey, FLOW_CORNERS, 0.01, 0, blockSize=3)
        previous, self.previous = self.previous, (grey, corners)
        if previous is None or previous[1] is None:  # the previous frame's corners are followed, not this one's
            return IDENTITY.copy()
        moved, status, _ = cv2.calcOpticalFlowPyrLK(previous[0], grey, previous[1], None)
        ok = status.ravel() == 1
        return _fit(previous[1][ok], moved[ok])

    def _features(self, grey: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        keypoints, descriptors = self.detector.detectAndCompute(grey, mask)
        previous, self.previous = self.previous, (keypoints, descriptors)
        if previous is None or previous[1] is None or descriptors is None or len(keypoints) < 4:
            return IDENTITY.copy()
        pairs = cv2.BFMatcher(self.norm).knnMatch(previous[1], descriptors, k=2)
        good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < 0.9 * p[1].distance]  # Lowe's ratio test
        src = np.float32([previous[0][m.queryIdx].pt for m in good])
        dst = np.float32([keypoints[m.trainIdx].pt for m in good])
        return _fit(src, dst)

    def _ecc(self, grey: np.ndarray) -> np.ndarray:
        grey = cv2.GaussianBlur(grey, (3, 3), 1.5)
        previous, self.previous = self.previous, grey
        if previous is None:
            return IDENTITY.copy()
        warp = np.eye(2, 3, dtype=np.float32)
        criteria = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 100, 1e-5)
        try:
            _, warp = cv2.findTransformECC(previous, grey, warp, cv2.MOTION_EUCLIDEAN, criteria, None, 1)
        except cv2.error:  # no convergence (a blank or uniform frame): take the camera as still
            return IDENTITY.copy()
        return warp.astype(np.float64)  # maps previous-frame pixels x to current ones: current(W x) = previous(x)


def _background_mask(shape: tuple[int, int], boxes: np.ndarray | None) -> np.ndarray | None:
    """A uint8 mask of a downscaled frame, 0 inside the boxes (full-size pixels), 255 elsewhere; None without boxes
    or when the boxes would leave under a tenth of the frame (then every point is better than none)."""
    if boxes is None or not len(boxes):
        return None
    mask = np.full(shape[:2], 255, np.uint8)
    for x1, y1, x2, y2 in (np.asarray(boxes)[:, :4] / DOWNSCALE).round().astype(int).tolist():
        mask[max(y1, 0) : max(y2, 0), max(x1, 0) : max(x2, 0)] = 0
    return mask if np.count_nonzero(mask) >= 0.1 * mask.size else None


def _fit(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The partial affine from points src to dst (RANSAC), or the identity with too few pairs or no fit."""
    if len(src) < MIN_POINT_PAIRS:
        return IDENTITY.copy()
    affine, _ = cv2.estimateAffinePartial2D(src.reshape(-1, 2), dst.reshape(-1, 2), method=cv2.RANSAC)
    return IDENTITY.copy() if affine is None else affine.astype(np.float64)
