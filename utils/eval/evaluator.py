"""CocoEvaluator: collects ground truth and detections image by image and scores them with the COCO protocol;
its predictions and ground truth can be written as COCO JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from utils.eval.coco_protocol import as_numpy, evaluate_arrays
from utils.eval.matching import Boxes, box_set
from utils.eval.metrics import DetectionMetrics
from utils.eval.segm import PairIous, rle_json, same_class_ious

# Detections are stored as a COCO results JSON stores them (YOLOv5's rounding), so the in-memory numbers
# equal pycocotools' on the saved predictions file.
BOX_DECIMALS, SCORE_DECIMALS = 3, 5


class CocoEvaluator:
    """Collects ground truth and detections image by image, then scores them with the COCO protocol.

    Boxes are corner boxes (x1, y1, x2, y2) in original-image pixels; classes are indices into names.
    category_ids maps class indices to the ids written to COCO files (default: the indices themselves).
    """

    def __init__(self, names: Sequence[str], category_ids: Sequence[int] | None = None, keep_masks: bool = False):
        self.names = [str(n) for n in names]
        self.category_ids = list(range(len(self.names))) if category_ids is None else [int(c) for c in category_ids]
        if len(self.category_ids) != len(self.names):
            raise ValueError(f"{len(self.names)} class names but {len(self.category_ids)} category ids")
        self._images: dict[int, tuple[int, int] | None] = {}  # id -> (height, width) when known
        self._gt: dict[str, list[np.ndarray]] = {k: [] for k in ("image", "cls", "xyxy", "area", "crowd")}
        self._dt: dict[str, list[np.ndarray]] = {k: [] for k in ("image", "cls", "xyxy", "score")}
        # Masks ('segm'): the mask IoUs of same-class pairs; the RLEs and ground-truth segmentations themselves
        # only when they are to be written (keep_masks: predictions.json, ground_truth.json).
        self._n_gt = self._n_dt = 0
        self._mask_ious, self.keep_masks = PairIous(), keep_masks
        self._masked_images: set[int] = set()
        self._det_rles: dict[int, dict] = {}  # detection index -> RLE
        self._gt_segmentations: dict[int, object] = {}  # ground-truth index -> COCO segmentation

    def __len__(self) -> int:
        return len(self._images)

    @property
    def image_ids(self) -> list[int]:
        """Ids of the images added so far, sorted."""
        return sorted(self._images)

    def add(
        self,
        image_id: int,
        gt_boxes,
        gt_classes,
        det_boxes,
        det_scores,
        det_classes,
        gt_areas=None,
        gt_crowd=None,
        shape: tuple[int, int] | None = None,
    ) -> None:
        """Record one image: its ground truth (areas default to box areas, crowd to False) and its detections."""
        image_id = int(image_id)
        if image_id in self._images:
            raise ValueError(f"image id {image_id} was added twice")
        self._images[image_id] = None if shape is None else (int(shape[0]), int(shape[1]))
        gt_xyxy = as_numpy(gt_boxes).reshape(-1, 4)
        det_xyxy = as_numpy(det_boxes).reshape(-1, 4)
        n_gt, n_det = len(gt_xyxy), len(det_xyxy)
        gt, dt = self._gt, self._dt
        gt["image"].append(np.full(n_gt, image_id, np.int64))
        gt["cls"].append(as_numpy(gt_classes).reshape(n_gt))
        gt["xyxy"].append(gt_xyxy)
        gt["area"].append(np.full(n_gt, np.nan) if gt_areas is None else as_numpy(gt_areas).reshape(n_gt))
        gt["crowd"].append(np.zeros(n_gt, bool) if gt_crowd is None else as_numpy(gt_crowd).reshape(n_gt))
        dt["image"].append(np.full(n_det, image_id, np.int64))
        dt["cls"].append(as_numpy(det_classes).reshape(n_det))
        dt["xyxy"].append(det_xyxy)
        dt["score"].append(as_numpy(det_scores).reshape(n_det))
        self._n_gt, self._n_dt = self._n_gt + n_gt, self._n_dt + n_det

    def add_masks(self, gt_rles: list[dict], det_rles: dict, gt_segmentations: list | None = None) -> None:
        """The masks of the image added last: one COCO RLE per ground truth, in add()'s order, and det_rles mapping
        detection indices (add()'s order) to theirs: a detection left out has mask IoU 0 with every ground truth
        (utils.eval.segm.detections_that_can_match), and with keep_masks every detection must be given.
        gt_segmentations: the ground truth's COCO segmentations, for ground_truth()."""
        image_id = next(reversed(self._images))  # the last added
        gt_cls, det_cls, crowd = self._gt["cls"][-1], self._dt["cls"][-1], self._gt["crowd"][-1]
        if len(gt_rles) != len(gt_cls) or not set(det_rles) <= set(range(len(det_cls))):
            raise ValueError(
                f"image {image_id}: {len(gt_rles)} masks for {len(gt_cls)} ground truth, or unknown detections"
            )
        if self.keep_masks and len(det_rles) != len(det_cls):
            raise ValueError(f"image {image_id}: keep_masks needs the mask of every detection")
        d, g, iou = same_class_ious(det_rles, det_cls, gt_rles, gt_cls, crowd)
        gt0, dt0 = self._n_gt - len(gt_cls), self._n_dt - len(det_cls)
        self._mask_ious.add(d + dt0, g + gt0, iou)
        self._masked_images.add(image_id)
        if self.keep_masks:
            self._det_rles.update((dt0 + n, rle) for n, rle in det_rles.items())
            if gt_segmentations is not None:
                self._gt_segmentations.update(zip(range(gt0, self._n_gt), gt_segmentations))

    def _collect(self) -> tuple[np.ndarray, Boxes, Boxes]:
        """Sorted image ids and the flat ground truth and (JSON-rounded) detections."""
        ids = np.array(sorted(self._images), dtype=np.int64)

        def flat(parts: list[np.ndarray], dtype, width: int = 0) -> np.ndarray:
            empty = np.zeros((0, width) if width else 0, dtype)
            return np.concatenate([empty, *parts]).astype(dtype, copy=False)

        gt, dt = self._gt, self._dt
        gt_xyxy, dt_xyxy = flat(gt["xyxy"], np.float64, 4), flat(dt["xyxy"], np.float64, 4)
        gt_xywh = np.concatenate((gt_xyxy[:, :2], gt_xyxy[:, 2:] - gt_xyxy[:, :2]), 1)
        area = flat(gt["area"], np.float64)
        area = np.where(np.isnan(area), gt_xywh[:, 2] * gt_xywh[:, 3], area)  # box area where none was given
        dt_xywh = np.round(np.concatenate((dt_xyxy[:, :2], dt_xyxy[:, 2:] - dt_xyxy[:, :2]), 1), BOX_DECIMALS)
        gt_cls, dt_cls = flat(gt["cls"], np.int64), flat(dt["cls"], np.int64)
        for cls in (gt_cls, dt_cls):
            if cls.size and (cls.min() < 0 or cls.max() >= len(self.names)):
                raise ValueError(
                    f"class index {int(cls.min() if cls.min() < 0 else cls.max())} out of range "
                    f"0..{len(self.names) - 1}"
                )
        return (
            ids,
            box_set(flat(gt["image"], np.int64), gt_cls, gt_xywh, area, flat(gt["crowd"], bool)),
            box_set(
                flat(dt["image"], np.int64),
                dt_cls,
                dt_xywh,
                score=np.round(flat(dt["score"], np.float64), SCORE_DECIMALS),
            ),
        )

    def evaluate(self, confusion: bool = False) -> DetectionMetrics:
        """The 12 COCO numbers, per-class AP, YOLOv5-style P/R and, if asked, the confusion matrix."""
        ids, gt, dt = self._collect()
        gt.image, dt.image = np.searchsorted(ids, gt.image), np.searchsorted(ids, dt.image)
        return evaluate_arrays(len(ids), self.names, self.category_ids, gt, dt, confusion=confusion)

    def evaluate_masks(self) -> DetectionMetrics:
        """The same numbers for the masks (COCO's 'segm'): the pairs' mask IoUs in place of their box IoUs; areas as
        for the boxes (the ground truth's, the detections' boxes', as pycocotools takes them from a results file
        that has boxes). Every image must have had its masks added."""
        if len(self._masked_images) != len(self._images):
            raise ValueError(f"masks were added for {len(self._masked_images)} of {len(self._images)} images")
        ids, gt, dt = self._collect()
        gt.image, dt.image = np.searchsorted(ids, gt.image), np.searchsorted(ids, dt.image)
        pair_iou = self._mask_ious.lookup(len(gt))
        return evaluate_arrays(len(ids), self.names, self.category_ids, gt, dt, pair_iou=pair_iou)

    def predictions(self) -> list[dict]:
        """Detections in COCO results format (bbox x, y, w, h, and with kept masks their RLE segmentation), in the
        order they were added."""
        _, _, dt = self._collect()
        cat_ids = np.asarray(self.category_ids)[dt.cls].tolist()
        rows = [
            {"image_id": i, "category_id": c, "bbox": b, "score": s}
            for i, c, b, s in zip(dt.image.tolist(), cat_ids, dt.xywh.tolist(), dt.score.tolist())
        ]
        for n, rle in self._det_rles.items():
            rows[n]["segmentation"] = rle_json(rle)
        return rows

    def ground_truth(self) -> dict:
        """The ground truth as a COCO annotations dict (full-precision floats, so evaluation round-trips)."""
        _, gt, _ = self._collect()
        images = []
        for image_id, shape in self._images.items():
            images.append(
                {"id": image_id, "file_name": str(image_id)}
                if shape is None
                else {"id": image_id, "file_name": str(image_id), "height": shape[0], "width": shape[1]}
            )
        cat_ids = np.asarray(self.category_ids)[gt.cls].tolist()
        annotations = [
            {"id": n, "image_id": i, "category_id": c, "bbox": b, "area": a, "iscrowd": int(cr)}
            for n, (i, c, b, a, cr) in enumerate(
                zip(gt.image.tolist(), cat_ids, gt.xywh.tolist(), gt.area.tolist(), gt.crowd.tolist()), 1
            )
        ]
        for n, segmentation in self._gt_segmentations.items():
            annotations[n]["segmentation"] = segmentation
        categories = [{"id": c, "name": n} for c, n in zip(self.category_ids, self.names)]
        return {"images": images, "annotations": annotations, "categories": categories}
