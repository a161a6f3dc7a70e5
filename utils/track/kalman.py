"""A constant-velocity Kalman filter on boxes, the motion model of both trackers.

The state is a box and its velocities per frame, in one of two forms: (cx, cy, w, h), BoT-SORT's, where each
coordinate's noise scales with the box's width or height (a large box moves more pixels per frame and its edges are
less precise); or (cx, cy, a, h) with a = w / h (aspect=True), ByteTrack's, where the noise scales with the height and
the aspect ratio is nearly fixed (small constant noise). Weights as both trackers publish them: 1/20 of the size for
positions, 1/160 for velocities. Every method works on a stack of n tracks at once (means (n, 8), covariances
(n, 8, 8)), so a frame costs a few array operations whatever n is.
"""

import numpy as np

STD_POSITION = 1.0 / 20
STD_VELOCITY = 1.0 / 160
MOTION = np.eye(8) + np.eye(8, k=4)  # x_{t+1} = x_t + v_t
OBSERVATION = np.eye(4, 8)  # a detection sees the box, not its velocity
# the aspect ratio's standard deviations (aspect=True): at a new track, per frame, of a detection; its velocity's
NSA_MIN_SCALE = 0.05  # the least share of R a detection keeps however confident (NSA-Kalman)
ASPECT_STD_INITIAL, ASPECT_STD_PROCESS, ASPECT_STD_MEASURED, ASPECT_VELOCITY_STD = 1e-2, 1e-2, 1e-1, 1e-5


def _diagonal(values: np.ndarray) -> np.ndarray:
    """(n, k, k) matrices with (n, k) values on their diagonals (zeros elsewhere)."""
    n, k = values.shape
    out = np.zeros((n, k, k))
    out.reshape(n, k * k)[:, :: k + 1] = values
    return out


def _sizes(boxes: np.ndarray, aspect: bool) -> np.ndarray:
    """(n, 4) per box of an (n, >=4) box array: the scale of each coordinate's noise, (w, h, w, h) or (h, h, h, h)."""
    if aspect:
        return np.repeat(np.maximum(boxes[:, 3:4], 1e-3), 4, axis=1)
    wh = np.maximum(boxes[:, 2:4], 1e-3)
    return np.concatenate([wh, wh], axis=1)


def _std(boxes: np.ndarray, position: float, velocity: float | None, aspect: bool, aspect_std: float) -> np.ndarray:
    """Standard deviations (n, 4) of the box, or (n, 8) with its velocities: weights times the noise scale, and the
    aspect ratio's own constants when the state holds one."""
    size = _sizes(boxes, aspect)
    std = position * size if velocity is None else np.concatenate([position * size, velocity * size], axis=1)
    if aspect:
        std[:, 2] = aspect_std
        if velocity is not None:
            std[:, 6] = ASPECT_VELOCITY_STD
    return std


def initiate(boxes: np.ndarray, aspect: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Means and covariances of new tracks from (n, 4) measured boxes: at rest, velocity uncertain."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    mean = np.concatenate([boxes, np.zeros_like(boxes)], axis=1)
    std = _std(boxes, 2 * STD_POSITION, 10 * STD_VELOCITY, aspect, ASPECT_STD_INITIAL)
    return mean, _diagonal(std**2)


def predict(
    mean: np.ndarray, covariance: np.ndarray, aspect: bool = False, right_first: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """One frame ahead: mean F x, covariance F P F^T + Q (Q from each box's current size). right_first multiplies
    F (P F^T) rather than (F P) F^T: the same in exact arithmetic, but the reference OC-SORT's replay of an
    occlusion (oc_sort.py) predicts one track at a time that way, and its last bits are what it then matches on."""
    if not len(mean):
        return mean, covariance
    std = _std(mean, STD_POSITION, STD_VELOCITY, aspect, ASPECT_STD_PROCESS)
    new_mean = mean @ MOTION.T
    moved = MOTION @ (covariance @ MOTION.T) if right_first else MOTION @ covariance @ MOTION.T
    diagonal = moved.reshape(len(mean), 64)[:, ::9]  # a view: Q is diagonal, so only these entries change
    diagonal += std**2
    return new_mean, moved


def project(
    mean: np.ndarray, covariance: np.ndarray, aspect: bool = False, confidence: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The predicted measurement (n, 4) and its covariance (n, 4, 4) including the detector's noise R. The
    observation picks the first four state entries, so H P H^T is P's top-left block. With confidence (n,), each
    detection's R is scaled by max(1 - confidence, 0.05): a confident detection is trusted more (NSA-Kalman, as
    TrackTrack uses it)."""
    variance = _std(mean, STD_POSITION, None, aspect, ASPECT_STD_MEASURED) ** 2
    if confidence is not None:
        variance *= np.maximum(1.0 - np.asarray(confidence, np.float64), NSA_MIN_SCALE)[:, None]
    innovation = covariance[:, :4, :4].copy()
    innovation.reshape(len(mean), 16)[:, ::5] += variance  # R is diagonal: only the diagonal changes
    return mean[:, :4], innovation


def update(
    mean: np.ndarray, covariance: np.ndarray, boxes: np.ndarray, aspect: bool = False, confidence=None
) -> tuple[np.ndarray, np.ndarray]:
    """Correct n tracks with their matched (n, 4) measured detections (the standard Kalman update, all n
    solved in one batched call: the gain K = P H^T S^-1 comes from solving S K^T = H P, S symmetric); confidence
    (n,) scales each detection's noise as in project."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if not len(mean):
        return mean, covariance
    projected, innovation_cov = project(mean, covariance, aspect, confidence)
    cross = covariance[:, :, :4]  # P H^T, (n, 8, 4)
    gain = np.linalg.solve(innovation_cov, cross.transpose(0, 2, 1)).transpose(0, 2, 1)
    new_mean = mean + np.einsum("nij,nj->ni", gain, boxes - projected)
    new_cov = covariance - gain @ innovation_cov @ gain.transpose(0, 2, 1)
    return new_mean, new_cov


def warp(mean: np.ndarray, covariance: np.ndarray, affine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move n (cx, cy, w, h) tracks by a 2x3 camera-motion affine (BoT-SORT's compensation): its 2x2 part acts on
    the position and its velocity, its absolute values on the size and its velocity (the box enclosing the turned
    box: a size never changes sign), its translation on the position."""
    if not len(mean):
        return mean, covariance
    linear = _affine_on_state(affine)
    return _moved_mean(mean, linear, affine), linear @ covariance @ linear.T


def warp_mean(mean: np.ndarray, affine: np.ndarray) -> np.ndarray:
    """warp's mean alone: the (n, 8) states moved by the affine, with no covariance to carry."""
    return _moved_mean(mean, _affine_on_state(affine), affine) if len(mean) else mean


def _affine_on_state(affine: np.ndarray) -> np.ndarray:
    """The (8, 8) linear part of a 2x3 affine on a (cx, cy, w, h, and their velocities) state."""
    linear = np.kron(np.eye(4), affine[:, :2])
    linear[2:4, 2:4] = linear[6:8, 6:8] = np.abs(affine[:, :2])
    return linear


def _moved_mean(mean: np.ndarray, linear: np.ndarray, affine: np.ndarray) -> np.ndarray:
    new_mean = mean @ linear.T
    new_mean[:, :2] += affine[:, 2]
    return new_mean
