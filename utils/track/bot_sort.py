"""BoT-SORT: ByteTrack's association, with every track moved by the camera's motion before matching,
so that a pan does not push the predicted boxes off their objects."""

import numpy as np

from utils.track.appearance import TrackerNeeds, blend_embeddings, cosine_distance, detection_embeddings
from utils.track.byte_tracker import ByteTracker
from utils.track.config import TrackerConfig
from utils.track.gmc import CameraMotion
from utils.track.matching import iou_cost
from utils.track.oc_sort import OcSort
from utils.track.track_track import TrackTrack
from utils.track.tracks import Track, boxes_xyxy, warp_all


class BotSort(ByteTracker):
    """With with_reid, the first association (and the new tracks' confirmation) also weighs appearance: a pair's cost
    is the lower of its IoU cost and half its embeddings' cosine distance, the latter counted only where that half is
    at most 1 - appearance_thresh and the boxes overlap by IoU >= proximity_thresh (Ultralytics' BoT-SORT)."""

    ASPECT = False  # (cx, cy, w, h): the camera-motion affine acts on width and height as on any (x, y) pair
    SMOOTHING = 0.9  # share of a track's smoothed embedding kept at each match

    def __init__(self, config: TrackerConfig, frame_rate: float = 30.0):
        self.camera = CameraMotion(config.gmc_method)
        super().__init__(config, frame_rate)

    @classmethod
    def needs(cls, config: TrackerConfig) -> TrackerNeeds:
        return TrackerNeeds(embeddings=config.with_reid and config.model == "auto")

    def reset(self) -> None:
        super().reset()
        self.camera.reset()

    def _compensate(self, tracks: list[Track], frame: np.ndarray | None, detections: np.ndarray) -> None:
        warp_all(tracks, self.camera.estimate(frame, detections))

    def _costs(self, tracks: list[Track], detections: np.ndarray, fuse: bool) -> np.ndarray:
        cost = super()._costs(tracks, detections, fuse)
        if not fuse or self.embeddings is None or not cost.size:
            return cost
        far = iou_cost(boxes_xyxy(tracks), detections[:, :4]) > 1 - self.config.proximity_thresh
        embeddings = detection_embeddings(self.embeddings, detections)
        half = cosine_distance([t.smoothed for t in tracks], embeddings, upper=2.0) / 2
        half[np.isnan(half) | far | (half > 1 - self.config.appearance_thresh)] = 1.0
        return np.minimum(cost, half)

    def _apply(self, tracks: list[Track], detections: np.ndarray, pairs) -> list[Track]:
        matched = super()._apply(tracks, detections, pairs)
        self._take_embeddings(matched, detections[[j for _, j in pairs]])
        return matched

    def _new_track(self, row: np.ndarray) -> Track:
        track = super()._new_track(row)
        self._take_embeddings([track], row[None])
        return track

    def _take_embeddings(self, tracks: list[Track], rows: np.ndarray) -> None:
        if self.embeddings is not None:
            blend_embeddings(tracks, detection_embeddings(self.embeddings, rows), self.SMOOTHING)


TRACKERS = {"bytetrack": ByteTracker, "botsort": BotSort, "ocsort": OcSort, "tracktrack": TrackTrack}


def tracker_class(config: TrackerConfig) -> type:
    """The class of the tracker a config names (its tracker_type)."""
    return TRACKERS[config.tracker_type]


def create_tracker(config: TrackerConfig, frame_rate: float = 30.0):
    """The tracker a config names: each has `update(detections, frame, recovered=None, features=None)` and
    `needs(config)`."""
    return tracker_class(config)(config, frame_rate)
