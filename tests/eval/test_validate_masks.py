"""evaluate() on a segment model: its masks scored with the COCO protocol's segm numbers, equal to pycocotools' own
COCOeval on the predictions.json it writes (ground truth: the COCO instances JSON, polygons and crowd RLEs)."""

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from models import load_model
from models.nn.segment import MaskOutputs
from models.nn.task import SEGMENT
from utils.data.loader import create_dataloader
from utils.eval.coco_io import COCO80_NAMES, COCO80_TO_91
from utils.eval.validate import ValidationOptions, evaluate

NAMES = list(COCO80_NAMES)


class BrightPixelsSegmenter(torch.nn.Module):
    """yolov5n's real detections with a segment task's outputs: one prototype, the image's mean brightness at a
    quarter of the input size less 0.4, and a coefficient of 1 for every prediction; each detection's mask is so the
    bright pixels of its box (real, varied masks from real boxes, without training a segment model)."""

    def __init__(self, detector: torch.nn.Module):
        super().__init__()
        self.detector = detector
        self.names, self.stride, self.family, self.task = detector.names, detector.stride, detector.family, SEGMENT

    def forward(self, x: torch.Tensor):
        predictions, maps = self.detector(x)
        protos = F.avg_pool2d(x.float().mean(1, keepdim=True), 4) - 0.4
        coefficients = torch.ones((*predictions.shape[:2], 1), dtype=predictions.dtype, device=predictions.device)
        return MaskOutputs(predictions, maps, coefficients, protos)


@pytest.fixture(scope="module")
def split(shared, tmp_path_factory) -> Path:
    """32 coco128 images, 3 of them with crowd regions (ids 149, 257, 315)."""
    files = sorted((shared / "datasets/coco128/images/train2017").glob("*.jpg"))[28:60]
    path = tmp_path_factory.mktemp("split") / "some.txt"
    path.write_text("".join(f"{f}\n" for f in files))
    return path


def _pycocotools(ann_json: Path, predictions: Path, iou_type: str, image_ids: list[int]) -> np.ndarray:
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann_json))
        evaluator = COCOeval(gt, gt.loadRes(str(predictions)), iou_type)
        evaluator.params.imgIds = image_ids
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.asarray(evaluator.stats)


def test_mask_metrics_equal_pycocotools_segm_against_the_coco_json(shared, split, tmp_path):
    ann_json = shared / "datasets/coco128/annotations/instances_train2017.json"
    loader = create_dataloader(str(split), 256, 8, 32, rect=True, pad=0.5, workers=0, nc=80)[0]
    model = BrightPixelsSegmenter(load_model(shared / "weights/yolov5n.pt"))
    options = ValidationOptions(ann_json=ann_json, save_json=True, save_dir=tmp_path)
    result = evaluate(model, loader, NAMES, options=options)
    boxes, masks = result.metrics, result.mask_metrics
    assert masks is not None and 0.005 < masks.map < boxes.map  # the bright pixels are a poor, not a null, mask
    assert masks.instances.sum() == boxes.instances.sum() > 150

    predictions = json.loads((tmp_path / "predictions.json").read_text())
    sizes = {im["id"]: [im["height"], im["width"]] for im in json.loads(ann_json.read_text())["images"]}
    assert all(p["segmentation"]["size"] == sizes[p["image_id"]] for p in predictions)
    image_ids = sorted({int(Path(f).stem) for f in loader.dataset.im_files})
    assert {149, 257, 315} <= set(image_ids)  # crowd regions, scored as COCO does
    segm = _pycocotools(ann_json, tmp_path / "predictions.json", "segm", image_ids)
    bbox = _pycocotools(ann_json, tmp_path / "predictions.json", "bbox", image_ids)
    assert np.abs(masks.stats - segm).max() <= 1e-4 and np.abs(boxes.stats - bbox).max() <= 1e-4
    assert np.array_equal(result.mask_pycocotools, segm) and np.array_equal(result.pycocotools, bbox)
    box_fitness = 0.1 * boxes.map50 + 0.9 * boxes.map
    assert result.fitness == pytest.approx(box_fitness + 0.1 * masks.map50 + 0.9 * masks.map)


@pytest.fixture(scope="module")
def polygon_split(shared, split, tmp_path_factory) -> Path:
    """The same images with YOLO segment labels written from the JSON: each non-crowd object's largest polygon."""
    root = tmp_path_factory.mktemp("polygons")
    (root / "images").mkdir()
    (root / "labels").mkdir()
    data = json.loads((shared / "datasets/coco128/annotations/instances_train2017.json").read_text())
    images = {im["id"]: im for im in data["images"]}
    class_of = {c: i for i, c in enumerate(COCO80_TO_91)}
    rows: dict[int, list[str]] = {}
    for a in data["annotations"]:
        if a["iscrowd"]:
            continue
        im = images[a["image_id"]]
        polygon = np.asarray(max(a["segmentation"], key=len)).reshape(-1, 2) / (im["width"], im["height"])
        rows.setdefault(a["image_id"], []).append(" ".join(map(str, [class_of[a["category_id"]], *polygon.ravel()])))
    for f in split.read_text().split():
        (root / "images" / Path(f).name).symlink_to(f)
        (root / "labels" / f"{Path(f).stem}.txt").write_text("".join(r + "\n" for r in rows.get(int(Path(f).stem), [])))
    return root / "images"


def test_mask_metrics_equal_pycocotools_segm_against_the_polygon_labels(shared, polygon_split, tmp_path):
    """Ground truth from the labels' polygons (dataset.segments): rasterised as pycocotools rasterises the
    ground_truth.json evaluate() writes, so its COCOeval segm on the two files gives the same numbers."""
    loader = create_dataloader(
        str(polygon_split), 256, 8, 32, rect=True, pad=0.5, workers=0, nc=80, label_rows="polygon"
    )[0]
    model = BrightPixelsSegmenter(load_model(shared / "weights/yolov5n.pt"))
    result = evaluate(model, loader, NAMES, options=ValidationOptions(save_json=True, save_dir=tmp_path))
    masks = result.mask_metrics
    assert masks is not None and 0.005 < masks.map < result.metrics.map and masks.instances.sum() > 150
    gt = json.loads((tmp_path / "ground_truth.json").read_text())
    assert all(len(a["segmentation"][0]) >= 6 for a in gt["annotations"])  # the polygons, not the boxes
    image_ids = [im["id"] for im in gt["images"]]
    segm = _pycocotools(tmp_path / "ground_truth.json", tmp_path / "predictions.json", "segm", image_ids)
    bbox = _pycocotools(tmp_path / "ground_truth.json", tmp_path / "predictions.json", "bbox", image_ids)
    assert np.abs(masks.stats - segm).max() <= 1e-4 and np.abs(result.metrics.stats - bbox).max() <= 1e-4
