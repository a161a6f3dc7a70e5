"""Every error the project raises for a bad input, in one place: a YoloError subclass per concern.

Each message is one line that says what is wrong and, where it helps, what to do; utils.cli.run_cli prints it
as ``ERROR: ...`` and exits 1, so no command ends in a traceback for a bad input.
"""


class YoloError(Exception):
    """A request that cannot be carried out (bad file, flag, dataset or device); the message is one line."""


# Files, configs and downloads


class UnsafeYamlError(YoloError):
    """A YAML file that is too large, nested too deep, uses aliases or cannot be parsed; one line."""


class RunFolderError(YoloError):
    """A run folder that cannot be created or is not ours to write into; one line."""


class DownloadError(YoloError):
    """A download that failed (offline, not found, too small); the message is one line."""


class DeviceError(YoloError):
    """A --device string that this machine cannot satisfy; the message is one line."""


# Data


class DatasetError(YoloError):
    """A dataset, data YAML or hyperparameter file that cannot be used; the message is one line."""


class ShapesError(YoloError):
    """The shapes dataset cannot be written where asked (the folder is not empty, or not writable); one line."""


class SourceError(YoloError):
    """A --source that gives nothing to run on (missing, empty, unsupported); the message is one line."""


# Models, checkpoints and exports


class ModelConfigError(YoloError, ValueError):
    """A model config that cannot describe a model, or one beyond the limits above; one line. A ValueError too,
    as callers catch configs that do not fit that way."""


class CheckpointError(YoloError):
    """A weights file that is missing, damaged, foreign or unsafe; the message is one line."""


class BackendError(YoloError):
    """An exported model that cannot run (missing file or package, not a YOLO export, wrong input); one line."""


class ExportError(YoloError):
    """An export that cannot be carried out (missing package, wrong device, unusable weights or options)."""


class QuantizationError(ExportError):
    """An --int8 export that cannot be calibrated (no --data, no images in its split, no nncf); one line."""


# Engines: training, evaluation, prediction


class TrainError(YoloError):
    """A training request that cannot be carried out; the message is one line."""


class EvolveError(TrainError):
    """An evolution that cannot go on (a damaged evolve.csv, nothing left to mutate); the message is one line."""


class ImageWeightsError(YoloError):
    """Labels or per-class mAPs that cannot weight the images; the message is one line."""


class TestError(YoloError):
    """A validation request that cannot be carried out; the message is one line."""


class BenchmarkError(YoloError):
    """A benchmark that cannot start (unknown format, no val split), or one step of a format that failed; one line."""


class MetricsError(YoloError):
    """Inputs the metrics cannot use (unreadable JSON, unknown image ids); the message is one line."""


class DetectError(YoloError):
    """An option detect cannot run with (out of range, a class the model lacks, no output folder); one line."""


class DetectorError(YoloError):
    """An input the Detector cannot run on (unreadable file, wrong array shape or dtype, empty list); one line."""


class TrackerError(YoloError):
    """A tracker that cannot be set up (unknown name or key, a YAML that is not a mapping, a value out of range)."""
