"""BoT-SORT without ReID: ByteTrack's association, with every track moved by the camera's motion before matching,
so that a pan does not push the predicted boxes off their objects."""

import numpy as np

from utils.track.byte_tracker import ByteTracker
from utils.track.config import TrackerConfig
from utils.track.gmc import CameraMotion
from utils.track.oc_sort import OcSort
from utils.track.track_track import TrackTrack
from utils.track.tracks import Track, warp_all


class BotSort(ByteTracker):
    ASPECT = False  # (cx, cy, w, h): the camera-motion affine acts on width and height as on any (x, y) pair

    def __init__(self, config: TrackerConfig, frame_rate: float = 30.0):
        self.camera = CameraMotion(config.gmc_method)
        super().__init__(config, frame_rate)

    def reset(self) -> None:
        super().reset()
        self.camera.reset()

    def _compensate(self, tracks: list[Track], frame: np.ndarray | None, detections: np.ndarray) -> None:
        warp_all(tracks, self.camera.estimate(frame, detections))


def create_tracker(config: TrackerConfig, frame_rate: float = 30.0):
    """The tracker a config names (its tracker_type): each has `update(detections, frame, recovered=None)`."""
    kinds = {"bytetrack": ByteTracker, "botsort": BotSort, "ocsort": OcSort, "tracktrack": TrackTrack}
    return kinds[config.tracker_type](config, frame_rate)
