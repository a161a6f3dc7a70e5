"""test.py --ann-json --pred-json scores a COCO results file without torch or a model (start-up is most of its
time): the command imports neither."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _coco(tmp_path: Path) -> tuple[Path, Path]:
    images = [{"id": i, "file_name": f"{i}.jpg", "width": 100, "height": 100} for i in (1, 2)]
    boxes = {1: [10, 10, 30, 30], 2: [50, 40, 20, 30]}
    annotations = [
        {"id": i, "image_id": i, "category_id": 1, "bbox": b, "area": b[2] * b[3], "iscrowd": 0}
        for i, b in boxes.items()
    ]
    ann = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "thing"}]}
    # Image 1 found exactly, image 2 missed (a box elsewhere): AP50 0.5
    predictions = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30], "score": 0.9},
        {"image_id": 2, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.8},
    ]
    (tmp_path / "ann.json").write_text(json.dumps(ann))
    (tmp_path / "pred.json").write_text(json.dumps(predictions))
    return tmp_path / "ann.json", tmp_path / "pred.json"


def test_scoring_a_results_file_imports_no_torch(tmp_path):
    ann, pred = _coco(tmp_path)
    argv = ["--ann-json", str(ann), "--pred-json", str(pred), "--project", str(tmp_path)]
    code = (
        f"import sys, test; code = test.main({argv!r}); "
        "print('torch loaded:', 'torch' in sys.modules, 'models loaded:', 'models' in sys.modules); sys.exit(code)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "torch loaded: False models loaded: False" in out.stdout, out.stdout
    results = json.loads((tmp_path / "exp" / "results.json").read_text())
    assert abs(results["metrics"]["mAP50"] - 0.5) < 0.02, results["metrics"]
