"""The shapes a Backend runs its inputs at (models/export/runtime.py): a dynamic INT8 export rounds one image's sides
up to a quarter of its size, a static export takes any input up to its shape; both pad the input centred in letterbox
grey and give the boxes back in the input's own coordinates.

The runtime here is the real yolov5n in PyTorch behind the Backend interface, so the padded run can be compared with
the model on the larger letterbox itself."""

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from models.export.backends import describe_backend
from models.export.runtime import Backend
from models.weights.checkpoint import load_model
from utils.boxes import non_max_suppression
from utils.data.augment import letterbox
from utils.errors import BackendError
from utils.eval.coco_io import COCO80_NAMES
from utils.images import read_image_checked


class TorchRuntime(Backend):
    """yolov5n as an export with the given metadata; records the input shapes its runtime was given."""

    def __init__(self, model, dynamic: bool, precision: str, imgsz: int, batch: int = 1):
        meta = {
            "names": list(COCO80_NAMES),
            "stride": [8.0, 16.0, 32.0],
            "dynamic": dynamic,
            "imgsz": [imgsz, imgsz],
            "batch": batch,
            "precision": precision,
            "calibration_images": 8 if precision == "int8" else None,
            "family": "yolov5",
        }
        super().__init__(Path("stand-in"), meta, torch.device("cpu"))
        self.model, self.shapes = model, []

    def run(self, x: torch.Tensor) -> torch.Tensor:
        self.shapes.append(tuple(x.shape))
        return self.model(x)[0]


@pytest.fixture(scope="module")
def yolov5n(shared):
    return load_model(shared / "weights/yolov5n.pt", "cpu")


def _letterboxed(shared: Path, name: str, shape, auto: bool) -> torch.Tensor:
    image, _ = read_image_checked(str(shared / "images" / name))
    boxed = letterbox(image, shape, stride=32, auto=auto)[0]
    return torch.from_numpy(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))).float()[None] / 255


def _boxes(pred: torch.Tensor) -> torch.Tensor:
    return non_max_suppression(pred, 0.25, 0.45)[0]


def test_int8_dynamic_export_runs_one_image_at_a_quarter_step_and_gives_its_boxes_back(yolov5n, shared):
    backend = TorchRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    assert backend.shape_step == 160 and "one image padded to multiples of 160" in describe_backend(backend)
    assert TorchRuntime(yolov5n, dynamic=True, precision="int8", imgsz=128).shape_step is None  # 32: the stride
    x = _letterboxed(shared, "zidane.jpg", 640, auto=True)  # 1280x720: a 384x640 rectangular letterbox
    assert x.shape[2:] == (384, 640)
    with torch.no_grad():
        got = _boxes(backend(x)[0])
        # the same picture letterboxed to 480x640 is what the runtime saw: 48 rows of grey above it
        expected = _boxes(yolov5n(_letterboxed(shared, "zidane.jpg", (480, 640), auto=False))[0])
    assert backend.shapes == [(1, 3, 480, 640)]
    assert len(expected) > 0 and got.shape == expected.shape
    torch.testing.assert_close(got[:, :4] + torch.tensor([0.0, 48, 0, 48]), expected[:, :4], atol=0.5, rtol=0)


def test_batches_and_float_exports_keep_their_shapes(yolov5n, shared):
    int8 = TorchRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    fp32 = TorchRuntime(yolov5n, dynamic=True, precision="fp32", imgsz=640)
    assert fp32.shape_step is None
    x = _letterboxed(shared, "zidane.jpg", 640, auto=True)
    with torch.no_grad():
        int8(torch.cat([x, x]))  # a batch shares its first-inference cost: test.py's batches keep their shapes
        fp32(x)
    assert int8.shapes == [(2, 3, 384, 640)] and fp32.shapes == [(1, 3, 384, 640)]


def test_static_export_takes_any_smaller_input_and_refuses_a_larger_one(yolov5n, shared):
    backend = TorchRuntime(yolov5n, dynamic=False, precision="fp32", imgsz=640)
    x = _letterboxed(shared, "zidane.jpg", 640, auto=True)
    with torch.no_grad():
        got = _boxes(backend(x)[0])
        expected = _boxes(yolov5n(_letterboxed(shared, "zidane.jpg", 640, auto=False))[0])
    assert backend.shapes == [(1, 3, 640, 640)]
    torch.testing.assert_close(got[:, :4] + torch.tensor([0.0, 128, 0, 128]), expected[:, :4], atol=0.5, rtol=0)
    with pytest.raises(BackendError, match="static 640x640 export but got a 672x640 input"):
        backend(torch.zeros(1, 3, 672, 640))


class SharedBufferRuntime(TorchRuntime):
    """As OpenVINO's run_shared: each run's predictions in one buffer of the runtime's own, which its next run
    overwrites."""

    def run_shared(self, x: torch.Tensor) -> torch.Tensor:
        out = self.run(x)
        if getattr(self, "buffer", None) is None or self.buffer.shape != out.shape:
            self.buffer = torch.empty_like(out)
        self.buffer.copy_(out)
        return self.buffer


def test_a_batch_run_one_image_at_a_time_gives_each_image_its_own_predictions(yolov5n, shared):
    x = torch.cat([_letterboxed(shared, name, (384, 640), auto=False) for name in ("zidane.jpg", "bus.jpg")])
    whole = TorchRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    split = SharedBufferRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    split.images_per_run = 1  # as OpenVINO's dynamic INT8 exports run test.py's batches
    with torch.no_grad():
        expected, got = whole(x)[0], split(x)[0]
    assert whole.shapes == [(2, 3, 384, 640)] and split.shapes == [(1, 3, 384, 640)] * 2
    assert got.data_ptr() != split.buffer.data_ptr()  # copied out of the runtime's buffer before its next run
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-4)
    assert not torch.equal(got[0], got[1])


class PerThreadBufferRuntime(TorchRuntime):
    """As OpenVINO's run_shared with its streams: one buffer per thread (its infer request's), which that thread's
    next run overwrites; records the threads it ran on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.local, self.threads = threading.local(), set()

    def run_shared(self, x: torch.Tensor) -> torch.Tensor:
        self.threads.add(threading.current_thread().name)
        out = self.run(x)
        buffer = getattr(self.local, "buffer", None)
        if buffer is None or buffer.shape != out.shape:
            buffer = self.local.buffer = torch.empty_like(out)
        return buffer.copy_(out)


def test_a_batch_run_side_by_side_gives_each_image_its_own_predictions(yolov5n, shared):
    names = ("zidane.jpg", "bus.jpg", "zidane.jpg", "bus.jpg", "bus.jpg")
    x = torch.cat([_letterboxed(shared, name, (384, 640), auto=False) for name in names])
    x[2:] = x[2:].flip(-1)  # five different images
    whole = TorchRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    split = PerThreadBufferRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    split.images_per_run, split.parallel_runs = 1, 2  # as OpenVINO's dynamic INT8 exports on two threads
    with torch.inference_mode():  # as test.py runs it: the batch's tensors are made in the caller's mode
        expected, got = whole(x)[0], split(x)[0]
    assert split.shapes == [(1, 3, 384, 640)] * 5 and all(t.startswith("backend") for t in split.threads)
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-4)
    assert len({tuple(g[:3, 4].tolist()) for g in got}) == 4  # the last two: the same flipped bus


def test_an_input_started_ahead_is_collected_by_forward(yolov5n, shared):
    x = _letterboxed(shared, "bus.jpg", 640, auto=True)
    backend = TorchRuntime(yolov5n, dynamic=True, precision="int8", imgsz=640)
    with torch.no_grad():
        expected = backend(x)[0]
        backend.parallel_runs = 2
        backend.start(x)
        assert list(backend.started) == [id(x)]
        got = backend(x)[0]
    assert backend.started == {} and len(backend.shapes) == 2  # run once when started, not again when collected
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
