"""The COCO metrics against pycocotools (the reference implementation), plus P/R, confusion matrix and bad input."""

import json

import numpy as np
import pytest

from utils.errors import MetricsError
from utils.eval import coco_protocol
from utils.eval.coco_io import COCO80_NAMES, COCO80_TO_91, evaluate_coco_json, load_coco_ground_truth, pycocotools_stats
from utils.eval.evaluator import CocoEvaluator
from utils.eval.matching import ConfusionMatrix
from utils.eval.metrics import fitness

pytest.importorskip("pycocotools")


def _grid(x: np.ndarray, step: float = 0.125) -> np.ndarray:
    """Snap to a grid exact in binary and in 3 decimals: JSON rounding is then a no-op and IoU ties are common."""
    return np.round(x / step) * step


def random_case(seed: int, n_images: int = 40, nc: int = 5) -> dict:
    """Random images with crowd regions, images without ground truth or detections, tied scores, a class without
    ground truth (nc-1), a class without detections (nc-2), and one image with more than 100 detections of a class.
    """
    rng = np.random.default_rng(seed)
    ids = rng.choice(np.arange(1, 10**6), n_images, replace=False)  # sparse ids, added in random order
    images = []
    for k, image_id in enumerate(ids):
        n_gt = 0 if k % 7 == 0 else int(rng.integers(1, 8))
        xy = rng.uniform(0, 400, (n_gt, 2))
        wh = rng.uniform(3, 160, (n_gt, 2))
        if k % 2:  # half the images on a grid: exact IoU ties at the thresholds
            xy, wh = _grid(xy), np.ceil(wh / 2.5) * 2.5
        gt_xyxy = np.concatenate((xy, xy + wh), 1)
        gt_cls = rng.integers(0, nc - 1, n_gt)
        crowd = rng.random(n_gt) < 0.12
        box_area = wh[:, 0] * wh[:, 1]
        area = np.where(rng.random(n_gt) < 0.5, box_area, box_area * rng.uniform(0.3, 1.0, n_gt))  # like masks

        n_det = 0 if k % 9 == 4 else int(rng.integers(1, 25))
        src = rng.integers(0, max(n_gt, 1), n_det)
        near = (rng.random(n_det) < 0.7) & (n_gt > 0)
        base = np.concatenate((xy, wh), 1)[src] if n_gt else np.zeros((n_det, 4))
        jitter = rng.normal(0, 0.12, (n_det, 4)) * np.concatenate((base[:, 2:], base[:, 2:]), 1)
        random_boxes = np.concatenate((rng.uniform(0, 400, (n_det, 2)), rng.uniform(3, 160, (n_det, 2))), 1)
        det_xywh = np.where(near[:, None], base + jitter, random_boxes)
        det_xywh[:, 2:] = np.maximum(det_xywh[:, 2:], 1.0)
        det_xywh = _grid(det_xywh)
        other = rng.choice([c for c in range(nc) if c != nc - 2], n_det)
        det_cls = np.where(near & (rng.random(n_det) < 0.85), gt_cls[src] if n_gt else other, other)
        det_cls = np.where(det_cls == nc - 2, nc - 1, det_cls)  # class nc-2 is never detected
        if k % 2 and n_gt:  # a detection whose IoU with its ground truth is exactly an IoU threshold
            t = rng.choice(np.arange(10)) * 0.05 + 0.5
            keep = gt_cls != nc - 2
            tie = np.concatenate((xy, wh * [t, 1]), 1)[keep]
            det_xywh, det_cls = np.concatenate((det_xywh, _grid(tie))), np.concatenate((det_cls, gt_cls[keep]))
        if k == 3:  # over 100 detections of one class in one image
            extra = 130
            e_xy = _grid(rng.uniform(0, 400, (extra, 2)))
            det_xywh = np.concatenate((det_xywh, np.concatenate((e_xy, _grid(rng.uniform(8, 90, (extra, 2)))), 1)))
            det_cls = np.concatenate((det_cls, np.zeros(extra, int)))
        scores = rng.integers(1, 33, len(det_cls)) / 32  # few distinct values: many ties, exact in 5 decimals
        det_xyxy = np.concatenate((det_xywh[:, :2], det_xywh[:, :2] + det_xywh[:, 2:]), 1)
        images.append(
            dict(
                id=int(image_id),
                gt_xyxy=gt_xyxy,
                gt_cls=gt_cls,
                crowd=crowd,
                area=area,
                det_xyxy=det_xyxy,
                det_xywh=det_xywh,
                scores=scores,
                det_cls=det_cls,
            )
        )
    return {"nc": nc, "images": images}


def fill(case: dict, use_areas: bool = True) -> CocoEvaluator:
    nc = case["nc"]
    ev = CocoEvaluator([f"class{c}" for c in range(nc)], category_ids=[c + 1 for c in range(nc)])
    for im in case["images"]:
        ev.add(
            im["id"],
            im["gt_xyxy"],
            im["gt_cls"],
            im["det_xyxy"],
            im["scores"],
            im["det_cls"],
            gt_areas=im["area"] if use_areas else None,
            gt_crowd=im["crowd"],
        )
    return ev


def reference_inputs(case: dict, use_areas: bool = True) -> tuple[dict, list]:
    """pycocotools' inputs, built straight from the raw case (not through the evaluator)."""
    images, annotations, predictions = [], [], []
    for im in case["images"]:
        images.append({"id": im["id"]})
        for box, c, cr, a in zip(im["gt_xyxy"], im["gt_cls"], im["crowd"], im["area"]):
            w, h = box[2] - box[0], box[3] - box[1]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": im["id"],
                    "category_id": int(c) + 1,
                    "bbox": [box[0], box[1], w, h],
                    "area": a if use_areas else w * h,
                    "iscrowd": int(cr),
                }
            )
        for box, c, s in zip(im["det_xywh"], im["det_cls"], im["scores"]):
            predictions.append({"image_id": im["id"], "category_id": int(c) + 1, "bbox": box.tolist(), "score": s})
    categories = [{"id": c + 1, "name": f"class{c}"} for c in range(case["nc"])]
    return {"images": images, "annotations": annotations, "categories": categories}, predictions


def pycocotools_eval(gt: dict, predictions: list):
    """pycocotools COCOeval after accumulate(), for its precision array and stats."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        e = COCOeval(coco_gt, coco_gt.loadRes([dict(p) for p in predictions]), "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    return e


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_twelve_numbers_equal_pycocotools(seed):
    case = random_case(seed)
    m = fill(case).evaluate()
    ref = pycocotools_eval(*reference_inputs(case))
    assert (m.stats > 0).all(), "the case should define every number"
    np.testing.assert_allclose(m.stats, ref.stats, rtol=0, atol=1e-6)
    # per-class AP from the same precision array pycocotools accumulated (area all, 100 detections)
    p = ref.eval["precision"][:, :, :, 0, -1]
    has_gt = (p > -1).all(axis=(0, 1))
    np.testing.assert_allclose(m.ap[has_gt], p.mean(axis=(0, 1))[has_gt], atol=1e-9)
    np.testing.assert_allclose(m.ap50[has_gt], p[0].mean(0)[has_gt], atol=1e-9)
    assert np.isnan(m.ap[~has_gt]).all() and not has_gt[-1] and has_gt[-2]
    assert m.ap[-2] == 0  # ground truth but never detected


def test_box_areas_when_no_areas_given():
    case = random_case(5, n_images=25)
    m = fill(case, use_areas=False).evaluate()
    ref = pycocotools_eval(*reference_inputs(case, use_areas=False))
    np.testing.assert_allclose(m.stats, ref.stats, rtol=0, atol=1e-6)


def test_public_faster_coco_eval_path_agrees(monkeypatch):
    case = random_case(7, n_images=30)
    fast = fill(case).evaluate()
    monkeypatch.setattr(coco_protocol, "_fast_core_available", lambda: False)
    slow = fill(case).evaluate()
    np.testing.assert_array_equal(fast.stats, slow.stats)
    np.testing.assert_array_equal(fast.pr_precision, slow.pr_precision)


def test_predictions_and_ground_truth_round_trip_through_json(tmp_path):
    """Unrounded inputs: the evaluator stores detections as the JSON does, so pycocotools on its files agrees."""
    rng = np.random.default_rng(11)
    ev = CocoEvaluator(["a", "b"], category_ids=[3, 7])
    for image_id in range(20):
        gt = rng.uniform(0, 200, (4, 2))
        gt = np.concatenate((gt, gt + rng.uniform(5, 80, (4, 2))), 1)
        det = gt[rng.integers(0, 4, 12)] + rng.normal(0, 4, (12, 4))
        ev.add(image_id, gt, rng.integers(0, 2, 4), det, rng.random(12), rng.integers(0, 2, 12), shape=(300, 400))
    gt_path, pred_path = tmp_path / "gt.json", tmp_path / "pred.json"
    gt_path.write_text(json.dumps(ev.ground_truth()))
    pred_path.write_text(json.dumps(ev.predictions()))
    assert {p["category_id"] for p in ev.predictions()} <= {3, 7}
    m = ev.evaluate()
    np.testing.assert_allclose(m.stats, pycocotools_stats(gt_path, pred_path), rtol=0, atol=1e-6)
    np.testing.assert_allclose(evaluate_coco_json(gt_path, pred_path).stats, m.stats, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_reference_predictions_on_coco128(shared):
    gt_path = shared / "datasets/coco128/annotations/instances_train2017.json"
    pred_path = shared / "reference/coco128_yolov5n_640_predictions.json"
    m = evaluate_coco_json(gt_path, pred_path)  # category ids 0-79 are recognised and mapped
    preds = json.loads(pred_path.read_text())
    for p in preds:
        p["category_id"] = COCO80_TO_91[p["category_id"]]
    ref = pycocotools_stats(gt_path, preds)
    np.testing.assert_allclose(m.stats, ref, rtol=0, atol=1e-6)
    assert abs(m.stats[0] - 0.3701) < 6e-5 and abs(m.stats[1] - 0.5759) < 6e-5
    assert m.images == 128 and m.instances.sum() == 929  # 939 annotations, 10 of them crowd regions
    assert 0.4 < m.mp < 0.8 and 0.4 < m.mr < 0.8  # YOLOv5 reports P 0.586, R 0.508 with its own matching


@pytest.mark.slow
def test_public_path_agrees_on_coco128(shared, monkeypatch):
    """faster-coco-eval's public COCOeval_faster (the fallback when its C++ entry points change) on real data,
    crowd regions included: the same arrays as the fast path, which calls those entry points directly."""
    gt_path = shared / "datasets/coco128/annotations/instances_train2017.json"
    pred_path = shared / "reference/coco128_yolov5n_640_predictions.json"
    if not coco_protocol._fast_core_available():
        pytest.skip("this faster-coco-eval has no C++ entry points for the fast path: only the public one runs")
    fast = evaluate_coco_json(gt_path, pred_path, confusion=True)
    monkeypatch.setattr(coco_protocol, "_fast_core_available", lambda: False)
    public = evaluate_coco_json(gt_path, pred_path, confusion=True)
    for field in ("stats", "ap", "ap50", "pr_precision", "precision", "recall", "confusion"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(public, field), err_msg=field)


def test_coco_tables_match_the_official_annotations(shared):
    gt = load_coco_ground_truth(shared / "datasets/coco128/annotations/instances_train2017.json")
    assert gt.category_ids == list(COCO80_TO_91)
    assert gt.names == list(COCO80_NAMES)
    boxes, cats, areas, crowd = gt.image(9)  # 000000000009.jpg
    assert len(boxes) == len(cats) == len(areas) == len(crowd) > 0 and set(cats) <= set(COCO80_TO_91)


def test_precision_recall_at_best_f1():
    ev = CocoEvaluator(["perfect", "half"])
    a, b, c, far = [0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50], [70, 70, 80, 80]
    ev.add(1, [a, b, c], [0, 1, 1], [a, b, far], [0.9, 0.9, 0.9], [0, 1, 1])
    m = ev.evaluate()
    np.testing.assert_allclose(m.precision, [1.0, 0.5])
    np.testing.assert_allclose(m.recall, [1.0, 0.5])
    assert m.mp == pytest.approx(0.75) and m.mr == pytest.approx(0.75) and m.best_conf <= 0.9


def test_crowd_regions_are_ignored_not_false_positives():
    ev = CocoEvaluator(["person"])
    crowd_region = [100, 100, 200, 200]
    ev.add(
        1,
        [[0, 0, 10, 10], crowd_region],
        [0, 0],
        [[0, 0, 10, 10], [110, 110, 150, 150]],
        [0.9, 0.8],
        [0, 0],
        gt_crowd=[False, True],
    )
    m = ev.evaluate(confusion=True)
    assert m.stats[0] == pytest.approx(1.0) and m.precision[0] == 1.0 and m.instances[0] == 1
    assert m.confusion.tolist() == [[1, 0], [0, 0]]  # neither the region nor the detection on it count


def test_confusion_matrix():
    cm = ConfusionMatrix(nc=2)
    a, b, c = [0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]
    labels = np.array([[0, *a], [1, *b], [1, *c]], float)
    detections = np.array(
        [
            [*a, 0.9, 0],  # correct
            [*b, 0.9, 0],  # class 1 predicted as 0
            [60, 60, 70, 70, 0.9, 1],  # nothing there: background predicted as 1
            [*c, 0.1, 1],  # below conf 0.25: not counted, so c is missed
        ]
    )
    det_image = [0, 0, 0, 0]
    cm.update([0, 0, 0], labels[:, 1:], labels[:, 0], det_image, detections[:, :4], detections[:, 4], detections[:, 5])
    expected = np.zeros((3, 3), int)
    expected[0, 0] = expected[0, 1] = expected[1, 2] = expected[2, 1] = 1
    np.testing.assert_array_equal(cm.matrix, expected)
    # a second image without detections: all missed; its ground truth does not meet image 0's detections
    cm.update([1, 1, 1], labels[:, 1:], labels[:, 0], [], np.zeros((0, 4)), [], [])
    assert cm.matrix[2].tolist() == [1, 3, 0]


def test_degenerate_inputs():
    ev = CocoEvaluator(["a", "b"])
    ev.add(1, [[0, 0, 10, 10]], [0], np.zeros((0, 4)), [], [])
    m = ev.evaluate(confusion=True)  # no detections at all (pycocotools refuses this one)
    assert m.stats[0] == 0 and m.map == 0 and m.mp == 0 and m.confusion[2, 0] == 1
    ev = CocoEvaluator(["a"])
    ev.add(1, np.zeros((0, 4)), [], [[0, 0, 10, 10]], [0.5], [0])
    m = ev.evaluate()  # no ground truth at all: undefined, reported as pycocotools does
    assert (m.stats == -1).all() and m.map50 == 0 and m.per_class_dict() == {}
    with pytest.raises(MetricsError, match="no images"):
        CocoEvaluator(["a"]).evaluate()
    with pytest.raises(ValueError, match="added twice"):
        ev.add(1, np.zeros((0, 4)), [], np.zeros((0, 4)), [], [])
    ev.add(2, [[0, 0, 1, 1]], [3], np.zeros((0, 4)), [], [])
    with pytest.raises(ValueError, match="class index 3 out of range 0..0"):
        ev.evaluate()


def test_bad_json_inputs(tmp_path):
    gt = {
        "images": [{"id": 1}, {"id": 2}],
        "categories": [{"id": 1, "name": "a"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100}],
    }
    gt_path = tmp_path / "gt.json"
    gt_path.write_text(json.dumps(gt))
    pred_path = tmp_path / "pred.json"
    pred_path.write_text(
        json.dumps(
            [
                {"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9},
                {"image_id": 77, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9},
            ]
        )
    )
    with pytest.raises(MetricsError, match="1 image id.*not in.*e.g. 77"):
        evaluate_coco_json(gt_path, pred_path)
    with pytest.raises(MetricsError, match="not found"):
        evaluate_coco_json(tmp_path / "missing.json", pred_path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(MetricsError, match="cannot read"):
        evaluate_coco_json(gt_path, tmp_path / "broken.json")
    (tmp_path / "dict.json").write_text("{}")
    with pytest.raises(MetricsError, match="list of detections"):
        evaluate_coco_json(gt_path, tmp_path / "dict.json")
    pred_path.write_text(json.dumps([{"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9}]))
    assert evaluate_coco_json(gt_path, pred_path).stats[0] == pytest.approx(1.0)


def test_fitness():
    ev = CocoEvaluator(["a"])
    ev.add(1, [[0, 0, 10, 10]], [0], [[0, 0, 10, 10]], [0.9], [0])
    assert fitness(ev.evaluate()) == pytest.approx(1.0)
    m = fill(random_case(4, n_images=20)).evaluate()
    assert 0 < m.map < m.map50 < 1 and fitness(m) == pytest.approx(0.1 * m.stats[1] + 0.9 * m.stats[0])


def test_charts(tmp_path):
    from utils.eval.charts import plot_evaluation

    m = fill(random_case(3, n_images=15)).evaluate(confusion=True)
    files = plot_evaluation(m, tmp_path / "run")
    assert sorted(f.name for f in files) == [
        "F1_curve.png",
        "PR_curve.png",
        "P_curve.png",
        "R_curve.png",
        "confusion_matrix.png",
    ]
    assert all(f.stat().st_size > 10_000 and f.read_bytes()[:4] == b"\x89PNG" for f in files)


def test_torch_inputs_match_numpy():
    torch = pytest.importorskip("torch")
    case = random_case(4, n_images=10)
    ev = CocoEvaluator([f"class{c}" for c in range(case["nc"])], category_ids=[c + 1 for c in range(case["nc"])])
    for im in case["images"]:  # what test.py hands over: float32 tensors, class indices as floats
        ev.add(
            im["id"],
            torch.tensor(im["gt_xyxy"]),
            torch.tensor(im["gt_cls"], dtype=torch.float32),
            torch.tensor(im["det_xyxy"], dtype=torch.float32),
            torch.tensor(im["scores"], dtype=torch.float32),
            torch.tensor(im["det_cls"], dtype=torch.float32),
            gt_areas=torch.tensor(im["area"]),
            gt_crowd=torch.tensor(im["crowd"]),
        )
    np.testing.assert_array_equal(ev.evaluate().stats, fill(case).evaluate().stats)
