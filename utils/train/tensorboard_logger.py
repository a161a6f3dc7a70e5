"""TensorBoard event files for a training run: scalars per epoch, the model graph, batch mosaics and final plots.

tensorboard is optional: without it, open_tensorboard() says so once and returns None, and training goes on.
The Trainer's hooks for it are in utils.train.callbacks.TensorBoard; this module knows nothing of the Trainer, so that
utils.train.callbacks imports it without an import cycle.
"""

import contextlib
import functools
import io
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from PIL import Image
from torch import nn

from utils.log import LOGGER
from utils.torch_utils import de_parallel

if TYPE_CHECKING:  # tensorboard is optional: its types only name the annotations
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

IMAGE_SUFFIXES = (".png", ".jpg")


@functools.cache
def summary_writer_class():
    """torch's SummaryWriter, or None (with a notice, once per process) when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # optional, and slow to import: loaded only when used
    except ImportError:
        LOGGER.info("TensorBoard: not installed, so no event files are written (pip install 'tensorboard>=2.14')")
        return None
    return SummaryWriter


def encoded_image(file: Path, tag: str) -> "Summary | None":
    """A PNG or JPEG file as a TensorBoard image summary of its bytes as they are (TensorBoard shows both formats,
    so nothing is decoded or re-encoded); None when the file is missing or not a PNG or JPEG image."""
    from tensorboard.compat.proto.summary_pb2 import Summary  # optional: called once tensorboard is found

    try:
        data = Path(file).read_bytes()
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            if image.format not in ("PNG", "JPEG"):
                return None
            (width, height), channels = image.size, len(image.getbands())
    except (OSError, ValueError):  # unreadable, or not an image (PIL.UnidentifiedImageError is an OSError)
        return None
    picture = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=data)
    return Summary(value=[Summary.Value(tag=tag, image=picture)])


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class TensorBoardRun:
    """A run folder's TensorBoard writer: scalars, the model graph and images; logging never stops training."""

    def __init__(self, writer: "SummaryWriter"):
        self.writer = writer
        self.image_tags: set[str] = set()  # each image is logged once

    def scalars(self, values: dict[str, float], step: int) -> None:
        """One scalar per tag at step; flushed so a killed run keeps its curves."""
        for tag, value in values.items():
            self.writer.add_scalar(tag, float(value), step)
        self.writer.flush()

    def graph(self, model: nn.Module, imgsz: int | list[int], device: torch.device) -> None:
        """The model's graph, traced in eval mode on a zero image; each module's train/eval mode is restored after.
        A model that cannot be traced is a one-line warning."""
        model = de_parallel(model)
        modes = {module: module.training for module in model.modules()}
        height, width = (imgsz, imgsz) if isinstance(imgsz, int) else imgsz
        image = torch.zeros((1, 3, height, width), device=device)
        model.eval()  # a trace in train mode would move the BatchNorm statistics
        try:
            # Quiet: the tracer warns about Python control flow, and add_graph prints its failures on stdout.
            with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                self.writer.add_graph(model, image, use_strict_trace=False)
        except Exception as e:  # a graph is a nicety: never a reason to stop
            LOGGER.warning(f"WARNING: TensorBoard graph not logged: {_first_line(e)}")
        finally:
            for module, training in modes.items():
                module.training = training

    def image(self, tag: str, file: Path, step: int = 0) -> bool:
        """An image file under tag, unless that tag was logged already or the file cannot be read; True if logged."""
        if tag in self.image_tags:
            return False
        summary = encoded_image(file, tag)
        if summary is None:
            return False
        # SummaryWriter.add_image takes pixels (it would decode and re-encode each plot); its file writer takes the
        # summary of the bytes as they are.
        self.writer.file_writer.add_summary(summary, step)
        self.image_tags.add(tag)
        return True

    def images_in(self, folder: Path, step: int = 0) -> list[str]:
        """Every .png and .jpg directly in folder, tagged by file stem; the tags logged."""
        files = sorted(f for f in Path(folder).iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
        return [f.stem for f in files if self.image(f.stem, f, step)]

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def open_tensorboard(save_dir: Path) -> TensorBoardRun | None:
    """A TensorBoardRun writing into save_dir (a resumed run adds a new event file there), with the hint to start
    TensorBoard on the project folder; None when tensorboard is not installed."""
    writer_class = summary_writer_class()
    if writer_class is None:
        return None
    save_dir = Path(save_dir)
    LOGGER.info(f"TensorBoard: Start with 'tensorboard --logdir {save_dir.parent}', view at http://localhost:6006/")
    return TensorBoardRun(writer_class(log_dir=str(save_dir)))
