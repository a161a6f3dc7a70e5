"""ExecuTorch INT8 (models/export/executorch_format.py): which nodes stay in float, on a small exported graph, and a
yolov5n INT8 program calibrated on COCO128 images that is smaller than float and still finds the .pt's objects. The
export lowers to XNNPACK twice (a minute or more), so it is a slow test; it skips without executorch or ../shared."""

import glob
import shutil

import pytest
import torch
from torch import nn
from torchvision.ops import box_iou

from models.export.executorch_format import ExecuTorchBackend, _float_node_names, export_executorch
from models.export.exporter import ExportOptions, prepare
from models.export.quantize import CalibrationImages
from tests.models.export.edge_helpers import needs
from utils.boxes import non_max_suppression

SIZE = 256  # large enough for COCO128's objects to be found at all; small enough to calibrate in seconds


class _Chain(nn.Module):
    """conv -> SiLU -> conv -> SiLU -> conv -> sigmoid: a first convolution, a middle one and a head."""

    def __init__(self):
        super().__init__()
        self.first, self.middle, self.last = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3), nn.Conv2d(4, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.silu(self.middle(nn.functional.silu(self.first(x))))
        return self.last(x).sigmoid()


def test_the_first_convolution_and_everything_after_the_last_stay_float():
    graph = torch.export.export(_Chain().eval(), (torch.rand(1, 3, 16, 16),)).module()
    convs = [n.name for n in graph.graph.nodes if n.target == torch.ops.aten.conv2d.default]
    sigmoid = [n.name for n in graph.graph.nodes if n.target == torch.ops.aten.sigmoid.default]
    kept = _float_node_names(graph)
    assert len(convs) == 3 and convs[0] in kept and convs[2] in kept and sigmoid[0] in kept
    assert convs[1] not in kept  # the one convolution that feeds another is quantized


@pytest.mark.slow
def test_int8_program_is_smaller_and_finds_the_pts_objects(tmp_path, shared):
    needs("executorch", "torchao")
    shutil.copy(shared / "weights/yolov5n.pt", tmp_path / "yolov5n.pt")
    options = ExportOptions(imgsz=(SIZE, SIZE), int8=True)
    job = prepare(tmp_path / "yolov5n.pt", options, torch.device("cpu"))
    files = sorted(glob.glob(str(shared / "datasets/coco128/images/train2017/*.jpg")))
    job.calibration = CalibrationImages(files[::16], options.imgsz, 32, auto=True)  # 8 images
    job.metadata["calibration_images"] = len(job.calibration)
    folder = export_executorch(job, tmp_path / "yolov5n_int8_executorch_model")
    backend = ExecuTorchBackend(folder, torch.device("cpu"))
    assert backend.precision == "int8" and backend.calibration_images == 8 and backend.fixed_shape is None
    params = sum(p.numel() for p in job.model.parameters())
    assert (folder / "model.pte").stat().st_size < 2 * params  # float32 would be 4 bytes a weight
    found, total = 0, 0
    for image in CalibrationImages(files[1:64:8], options.imgsz, 32, auto=True):  # not calibrated on
        x = torch.from_numpy(image)
        with torch.no_grad():
            expected = non_max_suppression(job.model(x), 0.25, 0.45)[0]
            got = non_max_suppression(backend.run(x), 0.25, 0.45)[0]
        total += len(expected)
        if len(expected) and len(got):
            iou = box_iou(expected[:, :4], got[:, :4])
            iou[expected[:, 5:6] != got[:, 5][None]] = 0
            found += int((iou.max(1).values >= 0.7).sum())
    assert total >= 10 and found >= 0.8 * total, f"{found} of {total} .pt detections found"
