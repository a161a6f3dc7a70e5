"""Simulated detections for the synthetic tracking scenes (utils/track/synth.py): what a trained detector gives a
tracker, drawn from the ground truth, so that trackers can be compared and tuned on many sequences without running a
network over every frame.

A detector's faults, as a small model trained on the shapes set shows them at a low confidence threshold: an
object is found unless too little of it shows, and missed more often the more it is covered; its score falls with
its visibility and varies per object (some look harder than others) and per frame; its box is jittered, more when
it is covered; now and then an object is found twice; false positives come from clutter (anywhere, mostly weak)
and from a few spots of the background that look like an object (fixed in the world, so they move with the camera
and come back frame after frame). Some covered objects are left to the "recovered" boxes, those only a looser NMS
keeps (what Ultralytics' track mode hands TrackTrack). Same seed, same detections.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DetectorNoise:
    """How the simulated detector errs (shares are per object and frame unless said)."""

    min_visibility: float = 0.15  # less of the object shows: never found
    miss: float = 0.03  # missed at random even when in full view
    miss_covered: float = 0.3  # extra miss chance x (1 - visibility)^2
    score_floor: float = 0.25  # score at no visibility; full view adds score_span
    score_span: float = 0.7
    score_noise: float = 0.1  # per frame
    object_noise: float = 0.08  # per object, for its whole life (some objects are harder)
    jitter: float = 0.03  # box jitter as a share of its size, in full view
    jitter_covered: float = 0.05  # extra jitter x (1 - visibility)
    duplicate: float = 0.01  # found twice (a shifted second box, weaker)
    recovered_below: float = 0.6  # an object less visible than this...
    recovered: float = 0.3  # ...is left to the recovered boxes this often
    clutter: float = 1.2  # false positives per frame, anywhere, mostly weak
    ghosts: int = 3  # background spots that look like an object
    ghost_rate: float = 0.25  # chance a ghost is detected in a frame it is in view


class SimulatedDetector:
    """`detect(rows, camera)` per frame: (dets, recovered), each (n, 6) float32 x1, y1, x2, y2, score, class."""

    def __init__(self, width: int, height: int, seed: int, noise: DetectorNoise = DetectorNoise()):
        self.width, self.height, self.noise = width, height, noise
        self.rng = np.random.default_rng([seed, 77])
        world = self.rng.uniform(0, 2 * max(width, height), (noise.ghosts, 2))
        sizes = self.rng.uniform(15, 45, (noise.ghosts, 1))
        self.ghosts = np.concatenate([world, world + sizes], axis=1)  # world x1, y1, x2, y2
        self.object_offset: dict[int, float] = {}

    def _score(self, track_id: int, visibility: float) -> float:
        n = self.noise
        if track_id not in self.object_offset:
            self.object_offset[track_id] = float(self.rng.normal(0, n.object_noise))
        score = n.score_floor + n.score_span * visibility**0.8 + self.object_offset[track_id]
        return float(np.clip(score + self.rng.normal(0, n.score_noise), 0.02, 0.97))

    def _objects(self, rows) -> tuple[list, list]:
        n, rng = self.noise, self.rng
        dets, recovered = [], []
        for track_id, cls, x, y, w, h, vis in rows:
            if vis < n.min_visibility or rng.random() < n.miss + n.miss_covered * (1 - vis) ** 2:
                continue
            score = self._score(track_id, vis)
            j = rng.normal(0, n.jitter + n.jitter_covered * (1 - vis), 4) * [w, h, w, h]
            box = [x + j[0], y + j[1], x + w + j[2], y + h + j[3], score, cls]
            if vis < n.recovered_below and rng.random() < n.recovered:
                recovered.append(box)
                continue
            dets.append(box)
            if rng.random() < n.duplicate:
                shift = rng.normal(0, 0.15, 2) * [w, h]
                dets.append([box[0] + shift[0], box[1] + shift[1], box[2] + shift[0], box[3] + shift[1]])
                dets[-1] += [0.6 * score, cls]
        return dets, recovered

    def _false_positives(self, camera: tuple[float, float]) -> list:
        n, rng = self.noise, self.rng
        found = []
        for _ in range(rng.poisson(n.clutter)):
            cx, cy, size = rng.uniform(0, self.width), rng.uniform(0, self.height), rng.uniform(10, 50)
            score = 0.1 + 0.5 * rng.beta(1, 3)
            found.append([cx, cy, cx + size, cy + size * rng.uniform(0.7, 1.4), score, int(rng.integers(5))])
        for x1, y1, x2, y2 in self.ghosts - [*camera, *camera]:
            if rng.random() < n.ghost_rate:
                found.append([x1, y1, x2, y2, float(rng.uniform(0.15, 0.5)), 0])
        return found

    def _boxes(self, rows: list) -> np.ndarray:
        boxes = np.array(rows, np.float64).reshape(-1, 6)
        boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, self.width)
        boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, self.height)
        return boxes[(boxes[:, 2] - boxes[:, 0] > 1) & (boxes[:, 3] - boxes[:, 1] > 1)].astype(np.float32)

    def detect(self, rows, camera: tuple[float, float] = (0.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
        """A frame's detections and recovered boxes from its ground-truth rows (track_id, cls, x, y, w, h,
        visibility), as SceneRenderer.frame gives them; camera: the view's world offset (synth.camera_offset)."""
        dets, recovered = self._objects(rows)
        return self._boxes(dets + self._false_positives(camera)), self._boxes(recovered)
