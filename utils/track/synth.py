"""A synthetic tracking video with ground truth: the shapes dataset's objects moving over a textured background.

Objects enter and leave the view, pairs of them head towards each other so that their paths cross and one passes in
front of the other (occlusion), and the camera pans across a world wider than the frame, so every object's image
motion includes the camera's. Harder scenes add static occluders (pillars in front of everything, which hide an
object passing behind them for tens of frames) and camera shake (a quick jitter on top of the pan). The ground truth
is MOTChallenge's gt.txt (`frame,id,x,y,w,h,1,class,visibility`), with each box clipped to the frame and the
visibility measured on the rendered frame (the share of the object's pixels that are drawn and not covered). Same
options, same frames and same ground truth.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from utils.data.shapes import COLORS, _background, _polygon

MIN_BOX = 4  # a ground-truth box narrower or lower than this (clipped to the frame) is not listed


@dataclass(frozen=True)
class SceneOptions:
    """What the generated video looks like."""

    frames: int = 600
    width: int = 480
    height: int = 288
    objects_in_view: int = 9  # about how many objects are in view at once
    pan: float = 0.35  # the camera's pan range either side, as a share of the frame's width
    seed: int = 0
    occluders: int = 0  # static pillars in front of every object (long occlusions)
    shake: float = 0.0  # camera jitter (px, either way) on top of the pan


@dataclass(frozen=True)
class Track:
    """One object: its shape, size, colour, depth (a larger z is drawn on top) and linear path in world pixels."""

    track_id: int
    cls: int
    radius: float
    angle: float
    color: tuple[int, int, int]
    z: float
    start: int  # first frame (0-based) of its path
    end: int  # frame after its last
    x0: float
    y0: float
    vx: float
    vy: float
    wobble: float  # amplitude (px) of a slow sideways sway, so that paths are not perfectly straight

    def center(self, t: int) -> tuple[float, float]:
        dt = t - self.start
        sway = self.wobble * math.sin(dt / 17.0 + self.z * 6.0)
        speed = math.hypot(self.vx, self.vy) or 1.0
        return self.x0 + self.vx * dt - self.vy / speed * sway, self.y0 + self.vy * dt + self.vx / speed * sway


def camera_offset(options: SceneOptions, t: int) -> tuple[float, float]:
    """The view's top-left corner in world pixels at frame t: a slow pan left and right, a smaller one up and down,
    and with shake a jitter of two quick sways per axis (never below 0: the world is larger by 2 x shake)."""
    span = options.pan * options.width
    period = max(options.frames, 240)
    x = span * (1 - math.cos(2 * math.pi * t / period * 1.5)) if span else 0.0
    y = 0.25 * span * (1 - math.cos(2 * math.pi * t / period * 2.0)) if span else 0.0
    if options.shake:
        phase = np.random.default_rng([options.seed, 5]).uniform(0, 2 * math.pi, 4)
        x += options.shake * (1 + 0.6 * math.sin(0.9 * t + phase[0]) + 0.4 * math.sin(2.3 * t + phase[1]))
        y += options.shake * (1 + 0.6 * math.sin(1.1 * t + phase[2]) + 0.4 * math.sin(2.9 * t + phase[3]))
    return x, y


@dataclass(frozen=True)
class Occluder:
    """A static pillar in world pixels, drawn over every object: x1..x2 wide and the world's full height."""

    x1: int
    x2: int
    color: tuple[int, int, int]


def make_occluders(options: SceneOptions, world_side: int) -> list[Occluder]:
    """options.occluders pillars, 12-28% of the frame's width each (an object behind one is hidden for tens of
    frames), spread over the world the camera pans across; from their own random stream, so that a scene with and
    one without occluders have the same objects."""
    rng = np.random.default_rng([options.seed, 4])
    pillars = []
    for _ in range(options.occluders):
        width = int(rng.uniform(0.12, 0.28) * options.width)
        x1 = int(rng.integers(0, max(world_side - width, 1)))
        color = tuple(int(c) for c in rng.integers(30, 110, 3))
        pillars.append(Occluder(x1, x1 + width, color))
    return pillars


def _endpoints(rng: np.random.Generator, w: int, h: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """A start just outside one side of a w x h view and an end just outside the opposite one (view pixels)."""
    side = int(rng.integers(4))
    u, v = rng.uniform(0.15, 0.85, 2)
    if side == 0:  # from the left
        return np.array([-margin, u * h]), np.array([w + margin, v * h])
    if side == 1:  # from the right
        return np.array([w + margin, u * h]), np.array([-margin, v * h])
    if side == 2:  # from the top
        return np.array([u * w, -margin]), np.array([v * w, h + margin])
    return np.array([u * w, h + margin]), np.array([v * w, -margin])


def _make_track(rng, options: SceneOptions, track_id: int, start: int, a, b, speed: float) -> Track:
    """A track from view point a to view point b starting at frame `start` (world coordinates follow the camera)."""
    cam = np.array(camera_offset(options, start))
    a, b = a + cam, b + cam
    length = float(np.linalg.norm(b - a))
    duration = max(int(length / speed), 2)
    cls = int(rng.integers(len(COLORS)))
    color = tuple(int(c) for c in np.clip(np.array(COLORS[cls]) + rng.integers(-25, 26, 3), 0, 255))
    return Track(
        track_id=track_id,
        cls=cls,
        radius=float(rng.uniform(0.045, 0.085) * options.width),
        angle=math.radians(rng.uniform(-20, 20)),
        color=color,
        z=float(rng.uniform()),
        start=start,
        end=start + duration,
        x0=float(a[0]),
        y0=float(a[1]),
        vx=float((b - a)[0] / duration),
        vy=float((b - a)[1] / duration),
        wobble=float(rng.uniform(0, 8)),
    )


def make_tracks(options: SceneOptions) -> list[Track]:
    """Every object of the video. Objects come in pairs on mirrored paths that meet mid-view (a crossing where one
    covers the other); new pairs start at a steady rate so that about objects_in_view are in view at once."""
    rng = np.random.default_rng([options.seed, 27])
    w, h = options.width, options.height
    margin = 0.1 * w
    mean_speed = 0.006 * w  # px per frame: a crossing of the view takes ~170 frames
    crossing = (w + 2 * margin) / mean_speed
    gap = max(int(2 * crossing / max(options.objects_in_view, 1)), 1)
    tracks: list[Track] = []
    start = -int(crossing)  # objects already in view at frame 0 started before it
    while start < options.frames:
        a, b = _endpoints(rng, w, h, margin)
        mid = (a + b) / 2 + rng.normal(0, 0.04 * w, 2)
        speed = mean_speed * rng.uniform(0.7, 1.4)
        tracks.append(_make_track(rng, options, len(tracks) + 1, start, a, b, speed))
        # the partner runs the mirrored path through the same midpoint, reaching it at the same frame
        tracks.append(_make_track(rng, options, len(tracks) + 1, start, 2 * mid - b, 2 * mid - a, speed))
        start += int(gap * rng.uniform(0.6, 1.4))
    return [t for t in tracks if t.end > 0]


def _shape_mask(track: Track, cx: float, cy: float, shape: tuple[int, int]) -> np.ndarray:
    """The object's filled pixels (uint8 0/1) in a frame of the given (h, w) with its centre at (cx, cy)."""
    mask = np.zeros(shape, np.uint8)
    if track.cls == 0:
        cv2.circle(mask, (round(cx * 16), round(cy * 16)), round(track.radius * 16), 1, -1, cv2.LINE_8, shift=4)
    else:
        pts = _polygon(track.cls, cx, cy, track.radius, track.angle)
        cv2.fillPoly(mask, [np.round(pts * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    return mask


def _full_box(track: Track, cx: float, cy: float) -> tuple[float, float, float, float]:
    if track.cls == 0:
        r = track.radius
        return cx - r, cy - r, cx + r, cy + r
    pts = _polygon(track.cls, cx, cy, track.radius, track.angle)
    return (*pts.min(0), *pts.max(0))


class SceneRenderer:
    """Renders frame t of a scene and its ground-truth rows; frames can be drawn in any order."""

    def __init__(self, options: SceneOptions):
        self.options = options
        self.tracks = make_tracks(options)
        rng = np.random.default_rng([options.seed, 1])
        span = int(math.ceil(options.pan * options.width * 2 + options.shake * 2)) + 2
        side = max(options.width, options.height) + span
        self.world = _background(rng, side)  # a textured square the view pans over
        self.occluders = make_occluders(options, side)

    def frame(self, t: int) -> tuple[np.ndarray, list[tuple[int, int, float, float, float, float, float]]]:
        """Frame t (BGR uint8) and its ground truth: (track_id, cls, x, y, w, h, visibility) per object in view."""
        o = self.options
        cx0, cy0 = camera_offset(o, t)
        ix, iy = int(cx0), int(cy0)
        img = self.world[iy : iy + o.height, ix : ix + o.width].copy()
        noise = np.random.default_rng([o.seed, 2, t]).normal(0, 4, img.shape)  # sensor noise: no two frames alike
        img = np.clip(img + noise, 0, 255).astype(np.uint8)
        owner = np.zeros((o.height, o.width), np.int32)  # which object each pixel shows (0: background)
        drawn, boxes = {}, {}
        for track in sorted((tr for tr in self.tracks if tr.start <= t < tr.end), key=lambda tr: tr.z):
            wx, wy = track.center(t)
            cx, cy = wx - ix, wy - iy
            x1, y1, x2, y2 = _full_box(track, cx, cy)
            if x2 < 0 or y2 < 0 or x1 >= o.width or y1 >= o.height:
                continue
            mask = _shape_mask(track, cx, cy, owner.shape)
            img[mask.astype(bool)] = track.color
            owner[mask.astype(bool)] = track.track_id
            area = (
                math.pi * track.radius**2
                if track.cls == 0
                else cv2.contourArea(_polygon(track.cls, cx, cy, track.radius, track.angle).astype(np.float32))
            )
            drawn[track.track_id] = max(area, 1.0)
            boxes[track.track_id] = (track.cls, x1, y1, x2, y2)
        self._draw_occluders(img, owner, ix)
        # track ids need not be consecutive (make_tracks drops some), so count up to the largest
        visible = np.bincount(owner.ravel(), minlength=max((tr.track_id for tr in self.tracks), default=0) + 1)
        return img, self._rows(boxes, drawn, visible)

    def _draw_occluders(self, img: np.ndarray, owner: np.ndarray, ix: int) -> None:
        """The pillars over the objects (a darker stripe down each edge, so that they have corners to follow)."""
        for pillar in self.occluders:
            x1, x2 = max(pillar.x1 - ix, 0), min(pillar.x2 - ix, img.shape[1])
            if x1 >= x2:
                continue
            img[:, x1:x2] = pillar.color
            img[:, x1 : min(x1 + 3, x2)] = img[:, max(x2 - 3, x1) : x2] = [c // 2 for c in pillar.color]
            owner[:, x1:x2] = 0

    def _rows(self, boxes, drawn, visible) -> list[tuple[int, int, float, float, float, float, float]]:
        rows = []
        for track_id, (cls, x1, y1, x2, y2) in boxes.items():
            x1, y1 = max(x1, 0.0), max(y1, 0.0)
            x2, y2 = min(x2, float(self.options.width)), min(y2, float(self.options.height))
            if x2 - x1 < MIN_BOX or y2 - y1 < MIN_BOX:
                continue
            vis = min(float(visible[track_id]) / drawn[track_id], 1.0)
            rows.append((track_id, cls, x1, y1, x2 - x1, y2 - y1, vis))
        return rows

    def __iter__(self) -> Iterator[tuple[np.ndarray, list]]:
        for t in range(self.options.frames):
            yield self.frame(t)
