"""Issue 16, detect/test/Detector side: no run writes over its inputs or files it did not write, URL caches keyed
on the whole URL, thin arrays, 16-bit and float PIL images, devices and FIFOs, symlink loops, bare export names,
and the new user's details (absolute paths, --noplots, plurals, line widths, short metrics reprs)."""

import functools
import hashlib
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

import detect
from models.api.detector import Detector, to_images
from utils.errors import DetectError, DetectorError
from utils.eval.coco_io import COCO80_NAMES
from utils.eval.evaluator import CocoEvaluator
from utils.eval.validate import ValidationResult
from utils.infer.outputs import OutputOptions, Outputs
from utils.infer.predict import ImageResult, Prediction, detections_text
from utils.infer.sources import LoadImages, Source, check_source
from utils.plots import Annotator

ROOT = Path(__file__).resolve().parents[2]
RUN_MARKER = ".yolo-run"  # utils.files.RUN_MARKER, spelled out so this file also runs on commits before it
spec = importlib.util.spec_from_file_location("yolo_test", ROOT / "test.py")  # 'test' is a stdlib package
yolo_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yolo_test)


def _hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under folder, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _small_copy(shared: Path, name: str, folder: Path, width: int = 320) -> Path:
    """A copy of a shared sample image shrunk to width pixels (fast to detect on)."""
    image = cv2.imread(str(shared / "images" / name))
    h, w = image.shape[:2]
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / name
    cv2.imwrite(str(file), cv2.resize(image, (width, round(h * width / w))))
    return file


def _weights(shared: Path) -> str:
    return str(shared / "weights" / "yolov5n.pt")


def _errors(log) -> list[str]:
    return [m for m in log.messages if m.startswith("ERROR")]


# --- item 3: --exist-ok into the inputs --------------------------------------------------------------------------


def test_detect_exist_ok_into_the_source_folder_leaves_the_photos(shared, tmp_path, log):
    photos = tmp_path / "photos"
    for name in ("bus.jpg", "zidane.jpg"):
        _small_copy(shared, name, photos)
    before = _hashes(photos)
    argv = ["--weights", _weights(shared), "--source", str(photos), "--img", "320", "--save-txt"]
    assert detect.main([*argv, "--project", str(tmp_path), "--name", "photos", "--exist-ok"]) == 1
    assert _hashes(photos) == before  # no annotated copy over an original, no labels/ added
    (error,) = _errors(log)
    assert "was not created by a run" in error and "\n" not in error


def test_a_run_folder_given_as_the_source_is_not_written_over(shared, tmp_path, log):
    source = tmp_path / "in"
    _small_copy(shared, "bus.jpg", source)
    argv = ["--weights", _weights(shared), "--img", "320", "--project", str(tmp_path)]
    assert detect.main([*argv, "--source", str(source), "--name", "exp"]) == 0  # annotated bus.jpg in exp/
    exp = tmp_path / "exp"
    before = _hashes(exp)
    log.clear()
    assert detect.main([*argv, "--source", str(exp), "--name", "exp", "--exist-ok", "--save-txt"]) == 0
    assert {k: v for k, v in _hashes(exp).items() if not k.startswith("labels")} == before  # input not annotated
    assert (exp / "labels" / "bus.txt").is_file()  # the outputs that do not collide are written
    assert any(m == f"WARNING: not writing {exp / 'bus.jpg'}: it is one of the inputs" for m in log.messages)


def _prediction(path: str) -> Prediction:
    image = np.full((100, 200, 3), 60, np.uint8)
    boxes = np.asarray([[40, 20, 160, 80, 0.9, 1]], np.float32)
    result = ImageResult(path, 0, (100, 200), boxes, 1.0)
    return Prediction(result, image, False, None, 30.0, (1, 3, 64, 128), (0.0, 0.0, 0.0))


def test_outputs_never_replace_a_file_no_run_wrote(tmp_path, log):
    out = tmp_path / "mine"  # a user's folder, not a run folder (no marker)
    (out / "labels").mkdir(parents=True)
    (out / "x.jpg").write_bytes(b"my photo")
    (out / "labels" / "x.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    outputs = Outputs(out, ["cat", "dog"], OutputOptions(save_img=True, save_txt=True))
    assert outputs.write(_prediction(str(tmp_path / "elsewhere" / "x.jpg")))
    assert (out / "x.jpg").read_bytes() == b"my photo"
    assert (out / "labels" / "x.txt").read_text() == "0 0.5 0.5 0.1 0.1\n"
    assert outputs.saved_line().endswith(", 0 label files in " + str(out / "labels"))
    assert sum("was not written by a run" in m for m in log.messages) == 2


def test_outputs_never_write_through_a_symbolic_link(tmp_path):
    run = tmp_path / "exp"  # a run folder: earlier outputs may be replaced, links may not
    run.mkdir()
    (run / RUN_MARKER).write_text("")
    precious = tmp_path / "precious.jpg"
    precious.write_bytes(b"keep")
    (run / "x.jpg").symlink_to(precious)
    outputs = Outputs(run, ["cat", "dog"], OutputOptions(save_img=True))
    outputs.write(_prediction(str(tmp_path / "x.jpg")))
    assert precious.read_bytes() == b"keep"


def _flat_dataset(shared: Path, root: Path, n: int = 3) -> Path:
    """root/images and root/labels (a flat dataset: no split folders) with n COCO128 images; its data YAML."""
    coco = shared / "datasets" / "coco128"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for image in sorted((coco / "images" / "train2017").glob("*.jpg"))[:n]:
        shutil.copy(image, root / "images")
        shutil.copy(coco / "labels" / "train2017" / f"{image.stem}.txt", root / "labels")
    yaml = root.parent / f"{root.name}.yaml"
    names = list(COCO80_NAMES)
    yaml.write_text(f"path: {root}\ntrain: images\nval: images\nnc: 80\nnames: {names}\n")
    return yaml


def _test_argv(shared: Path, yaml: Path) -> list[str]:
    weights = _weights(shared)
    return ["--data", str(yaml), "--weights", weights, "--img", "128", "--batch-size", "4", "--workers", "0"]


def test_test_save_txt_exist_ok_into_a_flat_dataset_keeps_its_labels(shared, tmp_path, log):
    root = tmp_path / "flat"
    yaml = _flat_dataset(shared, root)
    before = _hashes(root)
    argv = [*_test_argv(shared, yaml), "--save-txt", "--exist-ok", "--no-plots"]
    assert yolo_test.main([*argv, "--project", str(tmp_path), "--name", "flat"]) == 1
    assert _hashes(root) == before  # the ground truth is untouched, no results.json added
    (error,) = _errors(log)
    assert "was not created by a run" in error


def test_test_refuses_a_run_folder_that_holds_the_dataset(shared, tmp_path, log):
    root = tmp_path / "flat"
    yaml = _flat_dataset(shared, root)
    (root / RUN_MARKER).write_text("")  # e.g. a detect.py run folder reused as a pseudo-labelled dataset
    before = _hashes(root)
    argv = [*_test_argv(shared, yaml), "--save-txt", "--exist-ok", "--no-plots"]
    assert yolo_test.main([*argv, "--project", str(tmp_path), "--name", "flat"]) == 1
    assert _hashes(root) == before
    (error,) = _errors(log)
    assert "holds files of the dataset" in error


def test_test_run_folder_is_reserved_and_printed_absolute(shared, tmp_path, monkeypatch, log):
    root = tmp_path / "flat"
    yaml = _flat_dataset(shared, root, n=2)
    monkeypatch.chdir(tmp_path)
    argv = [*_test_argv(shared, yaml), "--save-txt", "--no-plots", "--project", "runs/test"]
    assert yolo_test.main(argv) == 0
    assert yolo_test.main(argv) == 0
    first, second = Path.cwd() / "runs/test/exp", Path.cwd() / "runs/test/exp2"
    assert (first / RUN_MARKER).is_file() and (second / RUN_MARKER).is_file()  # made by reserve_run_dir
    saved = [m for m in log.messages if m.startswith("Results saved to")]
    assert saved[-1] == f"Results saved to {second}, 2 label files in {second / 'labels'}"


def test_detect_exist_ok_rerun_keeps_only_this_runs_labels(shared, tmp_path, log):
    images = tmp_path / "images"
    for name in ("bus.jpg", "zidane.jpg"):
        _small_copy(shared, name, images)
    argv = ["--weights", _weights(shared), "--img", "320", "--project", str(tmp_path), "--save-txt", "--nosave"]
    assert detect.main([*argv, "--source", str(images)]) == 0
    labels = tmp_path / "exp" / "labels"
    assert sorted(p.name for p in labels.iterdir()) == ["bus.txt", "zidane.txt"]
    log.clear()
    assert detect.main([*argv, "--source", str(images / "bus.jpg"), "--exist-ok", "--classes", "5"]) == 0
    assert sorted(p.name for p in labels.iterdir()) == ["bus.txt"]  # zidane.txt was the earlier run's
    rows = np.loadtxt(labels / "bus.txt", ndmin=2)
    assert rows.shape == (1, 5) and rows[0, 0] == 5  # written fresh: the bus only, not appended
    assert log.messages[-1].endswith(f", 1 label file in {labels}")
    assert any(m == f"Removed 2 label files of an earlier run from {labels}" for m in log.messages)


# --- item 8: URL cache keyed on the whole URL ----------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def image_server(tmp_path):
    """An HTTP server on localhost serving tmp_path/www; yields its base URL. The downloads it caused are removed."""
    www = tmp_path / "www"
    www.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=www))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield www, base
    server.shutdown()
    server.server_close()


def _downloads() -> set[Path]:
    """The files in the URL download cache now."""
    return {p for p in (Path(tempfile.gettempdir()) / "yolo_downloads").rglob("*") if p.is_file()}


def test_urls_with_the_same_file_name_are_cached_apart(image_server):
    www, base = image_server
    name = f"img_{uuid.uuid4().hex[:8]}.png"  # never cached by an earlier test run
    red, blue = np.zeros((40, 60, 3), np.uint8), np.zeros((40, 60, 3), np.uint8)
    red[..., 2], blue[..., 0] = 255, 255
    for folder, image in (("a", red), ("b", blue)):
        (www / folder).mkdir()
        cv2.imwrite(str(www / folder / name), image)
    before = _downloads()
    try:
        (first,) = check_source(f"{base}/a/{name}").images
        (second,) = check_source(f"{base}/b/{name}").images
        assert first != second and Path(second).name == name  # outputs are still named after the file
        assert (cv2.imread(first) == red).all() and (cv2.imread(second) == blue).all()
        ((_, api_image),) = to_images(f"{base}/b/{name}")  # the Detector shares the cache
        assert (api_image == blue).all()
        cv2.imwrite(str(www / "b" / name), red)  # the same path with another query string is another URL
        ((_, query_image),) = to_images(f"{base}/b/{name}?v=2")
        assert (query_image == red).all()
    finally:
        for file in _downloads() - before:
            file.unlink()
            if file.parent.name != "yolo_downloads" and not any(file.parent.iterdir()):
                file.parent.rmdir()


# --- item 9: thin arrays -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def detector(shared):
    return Detector(str(shared / "weights" / "yolov5n.pt"), device="cpu", img_size=320)


@pytest.mark.parametrize("shape", [(1, 5000, 3), (5000, 1, 3), (2, 3000, 3)])
def test_detector_on_a_thin_array_is_one_line(detector, shape):
    with pytest.raises(DetectorError, match="too thin to resize to img_size 320x320") as info:
        detector(np.zeros(shape, np.uint8))
    assert "\n" not in str(info.value)


def test_detector_on_tiny_arrays_runs_or_says_why(detector):
    for shape in [(2, 1, 3), (1, 1, 3), (1, 2, 3)]:
        try:
            (result,) = detector(np.zeros(shape, np.uint8))
        except DetectorError as e:  # allowed, as one line; a cv2.error is not
            assert "\n" not in str(e)
        else:
            assert result.orig_shape == shape[:2]


def test_results_save_never_replaces_its_input_or_a_users_file(detector, shared, tmp_path):
    photos = tmp_path / "photos"
    source = _small_copy(shared, "bus.jpg", photos)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "bus.jpg").write_bytes(b"my other bus")
    before = _hashes(tmp_path)
    (result,) = detector(str(source))
    with pytest.raises(DetectError, match="bus.jpg: it is one of the inputs"):
        result.save(photos)  # the input's own folder
    with pytest.raises(DetectError, match="bus.jpg: it exists and was not written by a run"):
        result.save(mine)
    assert _hashes(tmp_path) == before
    out = tmp_path / "out"
    first = result.save(out)  # a new folder becomes a run folder: saving again replaces our own file
    assert result.save(out) == first and (out / RUN_MARKER).is_file()
    (again,) = detector(str(first))  # the annotated copy as the input: never drawn over itself
    with pytest.raises(DetectError, match="it is one of the inputs"):
        again.save(out)


# --- item 10: PIL 16-bit and float images, devices and FIFOs, symlink loops --------------------------------------


def test_detector_scales_16_bit_and_float_pil_images(detector, shared):
    grey = np.asarray(Image.open(shared / "images" / "bus.jpg").convert("L"))
    (reference,) = detector(Image.fromarray(grey))
    assert len(reference) >= 3  # persons and the bus, in grey
    wide = {
        "I;16": Image.fromarray(grey.astype(np.uint16) * 257),
        "I": Image.fromarray(grey.astype(np.int32) * 257),
        "F": Image.fromarray(grey.astype(np.float32) / 255),
    }
    for mode, image in wide.items():
        assert image.mode == mode
        (result,) = detector(image)
        assert len(result) == len(reference), mode
        torch.testing.assert_close(result.boxes, reference.boxes, atol=1.0, rtol=0)


def _in_thread(function, fifo: Path, seconds: float = 20.0):
    """function() in a thread; if it is still blocked on the FIFO after seconds, unblock it and fail."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except Exception as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # gives the blocked reader an end of file
        thread.join(5)
        pytest.fail(f"blocked reading the FIFO {fifo}")
    return outcome


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_detector_refuses_a_fifo_before_reading(tmp_path):
    fifo = tmp_path / "camera.jpg"
    os.mkfifo(fifo)
    outcome = _in_thread(lambda: to_images(str(fifo)), fifo)
    assert isinstance(outcome.get("error"), DetectorError)
    assert str(outcome["error"]) == f"cannot read image {fifo}: not a regular file (a device, FIFO or socket)"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux (/dev/zero, /proc)")
def test_detector_refuses_dev_zero_without_growing_memory():
    code = (  # address space capped at 1 GiB above what the imports take: an unbounded read fails fast
        "import resource, sys\n"
        "from models.api.detector import to_images\n"
        "from utils.errors import YoloError\n"
        "kib = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1])\n"
        "resource.setrlimit(resource.RLIMIT_AS, ((kib << 10) + (1 << 30),) * 2)\n"
        "try:\n    to_images('/dev/zero')\n"
        "except YoloError as e:\n    print('ERROR:', e)\n    sys.exit(1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.strip() == "ERROR: cannot read image /dev/zero: not a regular file (a device, FIFO or socket)"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_loader_skips_a_fifo_that_replaced_a_listed_image(tmp_path, log):
    fifo = tmp_path / "x.jpg"
    os.mkfifo(fifo)  # as if x.jpg was replaced by a FIFO after the source was listed
    loader = LoadImages(Source("list", images=[str(fifo)]), 64)
    outcome = _in_thread(lambda: list(loader), fifo)
    assert outcome.get("value") == [] and loader.skipped == [str(fifo)]
    assert f"WARNING: skipping {fifo}: not a regular file (a device, FIFO or socket)" in log.messages


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_list_entry_that_is_a_fifo_is_skipped_and_named_so(tmp_path, log):
    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), np.zeros((16, 16, 3), np.uint8))
    os.mkfifo(tmp_path / "f.jpg")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{image}\n{tmp_path / 'f.jpg'}\n")
    assert check_source(listing).images == [str(image)]
    assert f"WARNING: skipping {tmp_path / 'f.jpg'}: not a regular file (a device, FIFO or socket)" in log.messages


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks to folders need privileges on Windows")
def test_symlink_loop_under_a_recursive_glob_reads_each_image_once(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    cv2.imwrite(str(images / "a.jpg"), np.zeros((16, 16, 3), np.uint8))
    (images / "loop").symlink_to(images, target_is_directory=True)
    assert check_source(f"{images}/**/*.jpg").images == [str(images / "a.jpg")]


# --- item 7 (exports part): bare export names resolve in weights/ ------------------------------------------------


@pytest.fixture(scope="module")
def exports_in_weights(tmp_path_factory, shared):
    """yolov5n exported to ONNX and OpenVINO at 128 px, copied into the repository's weights/ under unique names."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("openvino")
    from models.export.exporter import ExportOptions, export

    folder = tmp_path_factory.mktemp("exports")
    weights = folder / "yolov5n.pt"
    shutil.copy(shared / "weights/yolov5n.pt", weights)
    export(weights, ["onnx", "openvino"], ExportOptions(imgsz=(128, 128)), torch.device("cpu"))
    stem = f"issue16_{uuid.uuid4().hex[:8]}"
    weights_dir = ROOT / "weights"
    made_dir = not weights_dir.exists()
    weights_dir.mkdir(exist_ok=True)
    onnx, openvino = weights_dir / f"{stem}.onnx", weights_dir / f"{stem}_openvino_model"
    shutil.copy(folder / "yolov5n.onnx", onnx)
    shutil.copytree(folder / "yolov5n_openvino_model", openvino)
    yield onnx, openvino
    onnx.unlink(missing_ok=True)
    shutil.rmtree(openvino, ignore_errors=True)
    if made_dir and not any(weights_dir.iterdir()):
        weights_dir.rmdir()


@pytest.mark.slow
def test_bare_export_names_are_found_in_weights(exports_in_weights, shared, tmp_path, monkeypatch, log):
    onnx, openvino = exports_in_weights
    monkeypatch.chdir(tmp_path)  # the bare names are not in the current folder
    source = _small_copy(shared, "bus.jpg", tmp_path / "in")
    argv = ["--source", str(source), "--img", "128", "--project", str(tmp_path / "runs"), "--nosave"]
    assert detect.main(["--weights", onnx.name, *argv]) == 0
    assert any(m.startswith(f"weights: using {onnx}") for m in log.messages)
    yaml = _flat_dataset(shared, tmp_path / "flat", n=2)
    test_argv = ["--data", str(yaml), "--weights", openvino.name, "--img", "128", "--workers", "0", "--no-plots"]
    assert yolo_test.main([*test_argv, "--project", str(tmp_path / "runs")]) == 0
    assert "OpenVINO" in log.text
    log.clear()
    missing = tmp_path / "some" / "dir" / onnx.name  # a folder part: never swapped for weights/<name>
    assert detect.main(["--weights", str(missing), *argv]) == 1
    assert _errors(log) == [f"ERROR: weights file not found: {missing}"]


# --- item 13: details a new user meets ---------------------------------------------------------------------------


@pytest.mark.slow
def test_test_py_takes_noplots_as_train_py_does_and_describes_augment_as_the_readme():
    assert yolo_test.parse_opt(["--noplots"]).plots is False
    assert yolo_test.parse_opt(["--no-plots"]).plots is False
    assert yolo_test.parse_opt([]).plots is True
    done = subprocess.run([sys.executable, "test.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    text = " ".join(done.stdout.split())
    assert "test-time augmentation: the image, 0.83x flipped and 0.67x views, merged before NMS" in text


def test_class_names_are_pluralised_sensibly():
    names = ["cross", "bus", "skis", "box", "person", "sandwich", "butterfly", "toy", "scissors", "glass"]
    boxes = np.zeros((0, 6), np.float32)
    for cls, n in enumerate([4, 2, 2, 3, 2, 2, 2, 2, 2, 1]):
        boxes = np.concatenate([boxes, np.tile([[0, 0, 1, 1, 0.9, cls]], (n, 1)).astype(np.float32)])
    assert detections_text(boxes, names) == (
        "4 crosses, 2 buses, 2 skis, 3 boxes, 2 persons, 2 sandwiches, 2 butterflies, 2 toys, 2 scissors, 1 glass, "
    )


@pytest.mark.slow
def test_line_width_scales_with_the_image_unless_given(shared, tmp_path):
    assert [Annotator(np.zeros(s, np.uint8)).lw for s in [(256, 256, 3), (1080, 810, 3), (1920, 1920, 3)]] == [2, 3, 6]
    image = cv2.resize(cv2.imread(str(shared / "images" / "bus.jpg")), (256, 256))
    source = tmp_path / "in" / "bus.png"  # lossless, so pixels compare exactly
    source.parent.mkdir()
    cv2.imwrite(str(source), image)
    common = ["--weights", _weights(shared), "--source", str(source), "--img", "256", "--project", str(tmp_path)]
    runs = {"auto": [], "two": ["--line-thickness", "2"], "three": ["--line-thickness", "3"]}
    for name, extra in runs.items():
        assert detect.main([*common, "--name", name, *extra]) == 0
    drawn = {name: cv2.imread(str(tmp_path / name / "bus.png")) for name in runs}
    assert (drawn["auto"] == drawn["two"]).all()  # 256 px: 2 px lines and a font to match, as YOLOv5 draws
    assert not (drawn["auto"] == drawn["three"]).all()  # an explicit --line-thickness wins
    (result,) = Detector(_weights(shared), device="cpu", img_size=256)(str(source))
    assert (result.plot() == result.plot(line_width=2)).all() and not (result.plot() == result.plot(3)).all()


def test_metrics_and_validation_result_reprs_are_short():
    evaluator = CocoEvaluator(list(COCO80_NAMES))
    gt = torch.tensor([[10.0, 10.0, 50.0, 50.0], [60.0, 60.0, 90.0, 90.0]])
    det = torch.tensor([[11.0, 10.0, 50.0, 52.0]])
    evaluator.add(0, gt, torch.tensor([0, 2]), det, torch.tensor([0.9]), torch.tensor([0]), shape=(100, 100))
    metrics = evaluator.evaluate()
    text = repr(metrics)
    assert "\n" not in text and len(text) < 400, text
    assert text.startswith("DetectionMetrics(80 classes (2 with labels), 1 images, 2 instances: P ")
    assert f"mAP50-95 {metrics.stats[0]:.4f} mAP50 {metrics.stats[1]:.4f}" in text and "ARl" in text
    assert metrics.p_curve.shape == (80, 1000)  # the arrays stay attributes
    result = ValidationResult(metrics, (0.01, 0.02, 0.03), (1.0, 20.0, 2.0))
    assert repr(result) == f"ValidationResult({text}, losses (0.0100, 0.0200, 0.0300), 1.0/20.0/2.0 ms per image)"
