"""Model configs as data: a --cfg YAML (or a checkpoint's 'yaml') checked, planned and priced before any layer exists.

A config is data from outside: it is checked, planned and priced (parameters, and the stride probe's work and
memory) here, before models/nn/yolo.py builds a layer, so a hostile one ends in a one-line ModelConfigError instead of
taking all memory or hanging.
"""

import math
import re
import reprlib
from copy import deepcopy
from pathlib import Path
from typing import NamedTuple

from torch import nn

from models.nn.blocks import (
    C2PSA,
    C2f,
    C3k,
    C3k2,
    DWConv,
    c2f_cost,
    c2psa_cost,
    c3k2_cost,
    c3k_cost,
    dwconv_cost,
)
from models.nn.common import C3, SPPF, Bottleneck, Concat, Conv, bottleneck_cost, c3_cost, conv_cost, sppf_cost
from models.nn.family import Family, family_of_config
from models.nn.head import AnchorFreeDetect, Detect, anchor_free_cost, detect_cost
from models.nn.segment import SEGMENT_COSTS, AnchorFreeSegment, AnchorFreeSegment26, Segment
from models.nn.task import TASKS, task_of_config
from utils.errors import ModelConfigError
from utils.files import resolve_bare_name
from utils.log import one_line
from utils.safe_yaml import read_yaml

CFG_DIR = Path(__file__).resolve().parents[1]  # the model YAMLs stay in models/, where users look for them

# Layer names a model YAML may use; looked up here instead of eval() so a YAML cannot run code.
LAYERS = {
    "Conv": Conv,
    "Bottleneck": Bottleneck,
    "C3": C3,
    "SPPF": SPPF,
    "Concat": Concat,
    "nn.Upsample": nn.Upsample,
    "nn.BatchNorm2d": nn.BatchNorm2d,
    "Detect": Detect,
    "AnchorFreeDetect": AnchorFreeDetect,  # what a 'Detect' layer without anchors builds (YOLOv8, YOLO11, YOLO26)
    "Segment": Segment,  # what each family's 'Segment' entry builds is its declaration (Family.segment_head)
    "Segment26": AnchorFreeSegment26,  # Ultralytics' name for YOLO26's
    "AnchorFreeSegment": AnchorFreeSegment,
    "AnchorFreeSegment26": AnchorFreeSegment26,
    "DWConv": DWConv,
    "C2f": C2f,
    "C3k": C3k,
    "C3k2": C3k2,
    "C2PSA": C2PSA,
}
BLOCK_COSTS = {
    "Conv": conv_cost,
    "Bottleneck": bottleneck_cost,
    "C3": c3_cost,
    "SPPF": sppf_cost,
    "DWConv": dwconv_cost,
    "C2f": c2f_cost,
    "C3k": c3k_cost,
    "C3k2": c3k2_cost,
    "C2PSA": c2psa_cost,
}
HEAD_COSTS = {"Detect": detect_cost, "AnchorFreeDetect": anchor_free_cost, **SEGMENT_COSTS}
REPEATED_INSIDE = ("C3", "C2f", "C3k", "C3k2", "C2PSA")  # blocks that take the repeats as their third argument
MAX_REG_MAX = 64  # DFL bins per box side (YOLOv8 and YOLO11 use 16, YOLO26 1)
MAX_MASKS = 1024  # mask coefficients (prototypes) per object: every released segment model uses 32
HEAD_ENTRIES = tuple(name for task in TASKS.values() for name in task.yaml_heads)  # what a YAML's last layer may be
# 'yolo11s.yaml' is yolo11.yaml at scale s, 'yolo11s-seg.yaml' yolo11-seg.yaml (a task's), as Ultralytics names them
SCALED_NAME = re.compile(r"(yolov?\d+)([nslmx])(-[a-z]+)?(\.ya?ml)")

# Limits on a config, far above any real YOLOv5 model. The largest, yolov5x6, has 141M parameters, 34 layers, at
# most 12 repeats per layer after depth_multiple 1.33 and width_multiple 1.25, 3 anchors per level; yolov5x's
# 256 px stride probe takes 16.4G multiply-adds and 20M activations (layer and block outputs).
MAX_CLASSES = 100_000  # LVIS has 1203 classes, ImageNet-21k 21841 labels; the head of a 100000-class yolov5n: 135M
MAX_MULTIPLE = 4.0  # depth_multiple and width_multiple lie in (0, 4]
MAX_LAYERS = 512
MAX_BLOCKS = 2048  # repeated blocks over all layers, after depth_multiple
MAX_CHANNELS = 1 << 20  # output channels a layer's config may ask for (before width_multiple)
MAX_ANCHORS = 64  # anchors per level
MAX_PARAMETERS = 200_000_000  # 800 MB in float32
PROBE_SIZE = 256  # the dry run that finds the strides runs on one image of this size
MAX_PROBE_MACS = 100_000_000_000  # a few seconds of one CPU core
MAX_PROBE_ELEMENTS = 100_000_000  # 400 MB of float32 activations

_short = reprlib.Repr()  # configs from checkpoints can be huge or deeply nested: messages show a bounded repr
_short.maxlevel, _short.maxlist, _short.maxdict, _short.maxstring, _short.maxother = 3, 8, 8, 60, 60


def short_repr(value) -> str:
    """repr() cut to a few dozen characters and three levels, for messages about data from files."""
    return _short.repr(value)


def make_divisible(x: float, divisor: int = 8) -> int:
    """Smallest multiple of divisor that is >= x."""
    return int(math.ceil(x / divisor) * divisor)


def load_cfg(cfg: str | Path | dict) -> dict:
    """A model config: a dict (copied), a YAML path, or a bare name such as 'yolov5s.yaml' found in models/.

    FileNotFoundError when missing (a path with a folder part is never swapped for a file in models/);
    ModelConfigError (one line) when it is not a bounded YAML mapping (aliases refused, size and depth capped)."""
    if isinstance(cfg, dict):
        try:
            return deepcopy(cfg)
        except RecursionError:  # a dict built in code; those from files are bounded in depth when read
            raise ModelConfigError("the model config is nested too deeply") from None
    path, scale = resolve_bare_name(cfg, CFG_DIR, "cfg"), None
    if path is None and (named := SCALED_NAME.fullmatch(Path(cfg).name)):  # yolo11s.yaml: yolo11.yaml, scale s
        path, scale = (
            resolve_bare_name(Path(cfg).with_name(named[1] + (named[3] or "") + named[4]), CFG_DIR, "cfg"),
            named[2],
        )
    if path is None:
        raise FileNotFoundError(f"model config not found: {cfg}")
    if path.is_dir():
        raise ModelConfigError("it is a folder, not a model YAML file")
    try:
        data = read_yaml(path, ModelConfigError)
    except ModelConfigError as e:  # callers name the file ("unusable model config <path>: ..."): say why only
        reason = str(e).removeprefix(f"{path} ").replace("could not be read as YAML", "not readable as YAML", 1)
        raise ModelConfigError(reason) from None
    if not isinstance(data, dict):
        raise ModelConfigError("it must hold a YAML mapping with nc, anchors, backbone and head")
    if scale and isinstance(data.get("scales"), dict):
        data["scale"] = scale
    return data


def model_scaling(cfg: dict) -> tuple[float, float, float, str]:
    """(depth multiple, width multiple, channel cap, scale letter): from the 'scales' entry that 'scale' names
    (Ultralytics' layout; the first scale when none is named), else depth_multiple and width_multiple (YOLOv5's)."""
    scales = cfg.get("scales")
    if scales is None:
        return cfg.get("depth_multiple", 1.0), cfg.get("width_multiple", 1.0), math.inf, ""
    if not isinstance(scales, dict) or not scales or len(scales) > 64:
        raise ModelConfigError(
            f"'scales' must map scale names to [depth, width, max_channels], got {_short.repr(scales)}"
        )
    scale = cfg.get("scale") or next(iter(scales))
    if not isinstance(scale, str) or scale not in scales:
        raise ModelConfigError(
            f"scale {_short.repr(scale)} is not one of the config's scales ({', '.join(map(str, scales))})"
        )
    entry = scales[scale]
    numbers = isinstance(entry, list) and len(entry) == 3 and all(_finite_number(v) and v is not None for v in entry)
    if not numbers or not all(0 < v <= MAX_MULTIPLE for v in entry[:2]) or not _whole(entry[2], 1):
        raise ModelConfigError(
            f"scale {scale!r} must be [depth, width, max_channels] (multiples in (0, {MAX_MULTIPLE:g}], a whole "
            f"channel cap >= 1), got {_short.repr(entry)}"
        )
    return float(entry[0]), float(entry[1]), entry[2], scale


def _check_cfg(cfg: dict) -> list:
    """The layer list of a model config; ModelConfigError naming the first entry that cannot describe a model."""
    nc = cfg.get("nc")
    if not _whole(nc, 1):
        raise ModelConfigError(f"'nc' must be a whole number >= 1, got {_short.repr(nc)}")
    if nc > MAX_CLASSES:
        raise ModelConfigError(f"'nc' is {nc}: more than {MAX_CLASSES} classes")
    for key in ("depth_multiple", "width_multiple"):
        v = cfg.get(key, 1.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ModelConfigError(f"'{key}' must be a positive number, got {_short.repr(v)}")
        if v > MAX_MULTIPLE:  # yolov5x uses 1.33 and 1.25
            raise ModelConfigError(f"'{key}' is {v:g}: at most {MAX_MULTIPLE:g} (yolov5x uses 1.33 and 1.25)")
    if family_of_config(cfg).anchors:
        _check_anchors(cfg.get("anchors"))
    _check_head_options(cfg)
    backbone, head = cfg.get("backbone"), cfg.get("head")
    if not isinstance(backbone, list) or not isinstance(head, list) or not backbone + head:
        raise ModelConfigError("'backbone' and 'head' must be lists of layers [from, repeats, module, args]")
    layers = backbone + head
    if len(layers) > MAX_LAYERS:
        raise ModelConfigError(f"the config has {len(layers)} layers, more than {MAX_LAYERS}")
    for i, layer in enumerate(layers):
        _check_layer(i, layer, last=i == len(layers) - 1)
    return layers


def _check_head_options(cfg: dict) -> None:
    """ModelConfigError unless the anchor-free head's options, where given, are in range."""
    reg_max, end2end = cfg.get("reg_max", 16), cfg.get("end2end", False)
    if not _whole(reg_max, 1) or reg_max > MAX_REG_MAX:
        raise ModelConfigError(f"'reg_max' must be a whole number in 1..{MAX_REG_MAX}, got {_short.repr(reg_max)}")
    if not isinstance(end2end, bool):
        raise ModelConfigError(f"'end2end' must be true or false, got {_short.repr(end2end)}")


def _check_anchors(anchors) -> None:
    """ModelConfigError unless anchors are per-level lists of w, h pairs (the same count each) or a count per level."""
    per_level = (
        isinstance(anchors, list)
        and anchors
        and all(
            isinstance(a, list)
            and a
            and len(a) % 2 == 0
            and len(a) == len(anchors[0])
            and len(a) <= 2 * MAX_ANCHORS
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf for v in a)
            for a in anchors
        )
    )
    if not per_level and not (_whole(anchors, 1) and anchors <= MAX_ANCHORS):
        raise ModelConfigError(
            "'anchors' must be a list of levels, each with the same even number of positive sizes "
            f"(w1, h1, w2, h2, ...; at most {MAX_ANCHORS} anchors), or a count per level; got {_short.repr(anchors)}"
        )


def _finite_number(v) -> bool:
    """Whether v is None, a bool, an int or a finite float: what a block's constructor arguments may be."""
    return v is None or isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))


def _whole(v, low: int) -> bool:
    """Whether v is an int (not a bool) >= low."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _check_layer(i: int, layer, last: bool) -> None:
    """ModelConfigError when layer i is not [from, repeats, module, args] with inputs from earlier layers."""
    if not isinstance(layer, list) or len(layer) != 4:
        raise ModelConfigError(f"layer {i} must be a list [from, repeats, module, args], got {_short.repr(layer)}")
    f, n, name, args = layer
    froms = [f] if isinstance(f, int) else f if isinstance(f, list) and f else None
    if froms is None or any(isinstance(x, bool) or not isinstance(x, int) for x in froms):
        raise ModelConfigError(f"layer {i}: 'from' must be a layer index or a list of them, got {_short.repr(f)}")
    # Inputs come from earlier layers only: 0..i-1, or counted back from this one (-1 is the previous layer).
    bad = [x for x in froms if not (x == -1 or -i <= x < i)]
    if bad:
        valid = f"-1, 0..{i - 1} or -{i}..-1" if i else "-1 (the input image)"
        raise ModelConfigError(f"layer {i}: input {bad[0]} is not an earlier layer (valid: {valid})")
    if not _whole(n, 1):
        raise ModelConfigError(f"layer {i}: repeats must be a whole number >= 1, got {_short.repr(n)}")
    if n > MAX_BLOCKS:
        raise ModelConfigError(f"layer {i}: {n} repeats, more than {MAX_BLOCKS}")
    if not isinstance(name, str) or name not in LAYERS:
        raise ModelConfigError(f"unknown layer type {_short.repr(name)} in model config (layer {i})")
    if not isinstance(args, list):
        raise ModelConfigError(f"layer {i} ({name}): args must be a list, got {_short.repr(args)}")
    if (name in HEAD_ENTRIES) != last:
        raise ModelConfigError(f"the last layer, and only it, must be Detect or Segment (layer {i} is {name})")


class LayerPlan(NamedTuple):
    """One layer of a config, resolved: n modules of type `name` built from `args`, fed from layer(s) `f`."""

    i: int
    f: int | list[int]
    n: int
    name: str
    args: list
    c2: int  # output channels


def plan_layers(cfg: dict, ch: int = 3, family: Family | None = None) -> list[LayerPlan]:
    """Every layer's module type, repeats and constructor arguments (channels resolved), nothing built yet;
    ModelConfigError naming the first layer that cannot describe a model. The YAML's Detect entry builds the
    family's head (the config's own family when none is given)."""
    cfg_layers = _check_cfg(cfg)
    gd, gw, max_channels, scale = model_scaling(cfg)
    family, task = family or family_of_config(cfg), task_of_config(cfg)
    nc, anchor_based = cfg["nc"], family.anchors
    anchors = cfg.get("anchors")
    na = len(anchors[0]) // 2 if isinstance(anchors, list) else anchors
    # A layer as wide as the head's output keeps its width (YOLOv5: na * (nc + 5); Ultralytics: nc)
    kept_width = na * (nc + 5) if anchor_based else nc
    channels, plans, blocks = [ch], [], 0
    for i, (f, n, name, args) in enumerate(cfg_layers):
        if (name in ("Concat", *HEAD_ENTRIES)) != isinstance(f, list):
            need = "a list of layer indices" if name in ("Concat", *HEAD_ENTRIES) else "one layer index"
            raise ModelConfigError(f"layer {i} ({name}): 'from' must be {need}, got {_short.repr(f)}")
        # Official YAMLs write 'None', 'nc' and 'anchors' as bare words that YOLOv5 evaluates.
        args = [{"nc": nc, "anchors": anchors, "None": None}.get(a, a) if isinstance(a, str) else a for a in args]
        n = max(round(n * gd), 1) if n > 1 else n
        blocks += n
        if blocks > MAX_BLOCKS:
            raise ModelConfigError(
                f"the config repeats more than {MAX_BLOCKS} blocks in all (layer {i} has {n} after "
                f"depth_multiple {gd:g}); check 'depth_multiple' and the repeats"
            )
        inputs = [channels[x] for x in ([f] if isinstance(f, int) else f)]
        if name in HEAD_ENTRIES:  # the head the family builds for the task, from the YAML's args
            args, c2 = _head_args(i, cfg, args, plans, family, task.masks, (gw, max_channels), inputs), inputs[0]
            name = task.head(family)
        else:
            args, c2, n = _layer_args(i, name, args, n, inputs)
        if name in BLOCK_COSTS and c2 != kept_width:
            c2 = make_divisible(min(c2, max_channels) * gw, 8)
            args[1] = c2
        if name == "C3k2" and scale in ("m", "l", "x"):  # Ultralytics' larger scales use C3k inner blocks
            args = [*args, *[False] * (4 - len(args))]
            args[3] = True
        plans.append(LayerPlan(i, f, n, name, args, c2))
        if i == 0:
            channels = []
        channels.append(c2)
    return plans


def _head_args(i, cfg: dict, args: list, plans: list[LayerPlan], family: Family, masks: bool, scaling, inputs) -> list:
    """The head's constructor args from its YAML args: YOLOv5's [nc, anchors] (a segment head's [nc, anchors, nm,
    npr]) as [nc, anchor levels] (then nm, npr); an anchor-free head's [nc] (segment: [nc, nm, npr]) as [nc,
    reg_max, end2end, legacy] (then nm, npr); then the input channels. The prototypes' width npr scales as a
    layer's channels do (scaling: width multiple, channel cap)."""
    gw, cap = scaling
    kept = 2 if family.anchors else 1
    if masks:
        if len(args) != kept + 2 or not all(_whole(a, 1) for a in args[kept:]) or args[kept] > MAX_MASKS:
            raise ModelConfigError(
                f"layer {i} (Segment): the mask arguments after {'[nc, anchors]' if family.anchors else '[nc]'} "
                f"must be [masks, prototype channels] (masks <= {MAX_MASKS}), got {_short.repr(args[kept:])}"
            )
        if args[kept + 1] > MAX_CHANNELS:
            raise ModelConfigError(
                f"layer {i} (Segment): {args[kept + 1]} prototype channels, more than {MAX_CHANNELS}"
            )
        masks_args = [args[kept], make_divisible(min(args[kept + 1], cap) * gw, 8)]
        args = args[:kept]
    else:
        masks_args = []
    if family.anchors:
        _check_detect_args(i, args, len(inputs))
        levels = args[1] if isinstance(args[1], list) else [list(range(args[1] * 2))] * len(inputs)
        return [args[0], levels, *masks_args, inputs]
    return [*_anchor_free_args(i, cfg, args, plans, family.end2end), *masks_args, inputs]


def _anchor_free_args(i: int, cfg: dict, args: list, plans: list[LayerPlan], end2end: bool) -> list:
    """[nc, reg_max, end2end, legacy] of an anchor-free Detect layer whose YAML args are [nc]. The class branch
    is YOLOv8's (legacy) unless the model uses C3k2 blocks, as Ultralytics decides it."""
    if len(args) != 1 or not _whole(args[0], 1) or args[0] > MAX_CLASSES:
        raise ModelConfigError(
            f"layer {i} (Detect): an anchor-free head takes [nc] (nc <= {MAX_CLASSES}; a config without 'anchors' "
            f"is anchor-free), got {_short.repr(args)}"
        )
    legacy = not any(plan.name == "C3k2" for plan in plans)
    return [args[0], cfg.get("reg_max", 16), end2end, legacy]


def _layer_args(i: int, name: str, args: list, n: int, inputs: list[int]) -> tuple[list, int, int]:
    """Constructor args, output channels and module count of layer i, given its input channels."""
    if name in BLOCK_COSTS:
        if not args or not _whole(args[0], 1):
            raise ModelConfigError(
                f"layer {i} ({name}): output channels (first arg) must be a whole number >= 1, "
                f"got {_short.repr(args[0]) if args else 'none'}"
            )
        if args[0] > MAX_CHANNELS:
            raise ModelConfigError(
                f"layer {i} ({name}): {_short.repr(args[0])} output channels, more than {MAX_CHANNELS}"
            )
        args = [inputs[0], args[0], *args[1:]]
        if name in REPEATED_INSIDE:  # these repeat their inner blocks: one module with n as an argument
            return [*args[:2], n, *args[2:]], args[1], 1
        return args, args[1], n
    if name == "nn.BatchNorm2d":
        return [inputs[0]], inputs[0], n
    if name == "Concat":
        return args, sum(inputs), n
    return args, inputs[0], n


def _check_detect_args(i: int, args: list, n_inputs: int) -> None:
    """ModelConfigError unless Detect's args are [nc, anchors] with one anchor level per input."""
    if len(args) != 2 or not _whole(args[0], 1) or args[0] > MAX_CLASSES:
        raise ModelConfigError(
            f"layer {i} (Detect): args must be [nc, anchors] (nc <= {MAX_CLASSES}), got {_short.repr(args)}"
        )
    _check_anchors(args[1])
    if isinstance(args[1], list) and len(args[1]) != n_inputs:
        raise ModelConfigError(f"layer {i} (Detect): {len(args[1])} anchor levels for {n_inputs} inputs")


def _layer_cost(plan: LayerPlan, sizes: list[int]) -> tuple[int, int, int, int]:
    """(parameters, multiply-adds, output elements, output size) of one planned layer on inputs of these sizes."""
    name, args, c2 = plan.name, plan.args, plan.c2
    numbers = args if name in BLOCK_COSTS else args[:2] if name == "nn.Upsample" else []
    if any(not _finite_number(a) for a in numbers):  # a string times a channel count would be a huge string
        raise TypeError("its sizes must be finite numbers")
    if name in HEAD_COSTS:
        return (*HEAD_COSTS[name](sizes, *args), 0)
    if name == "nn.Upsample":
        size = args[0] if args and args[0] is not None else math.floor(sizes[0] * args[1])
        return 0, 0, c2 * size * size, size
    if name in BLOCK_COSTS:
        params = macs = elements = 0
        size = sizes[0]
        for _ in range(plan.n):  # a repeated layer: the same module n times in a row
            p, m, e, size = BLOCK_COSTS[name](size, *args)
            params, macs, elements = params + p, macs + m, elements + e
        return params, macs, elements, size
    params = 2 * c2 * plan.n if name == "nn.BatchNorm2d" else 0
    return params, 0, c2 * max(sizes) ** 2, max(sizes)


def model_cost(plans: list[LayerPlan], ch: int = 3, size: int = PROBE_SIZE) -> tuple[int, int, int]:
    """(parameters, multiply-adds, activation elements) of the planned model on one size x size image, from the
    plan alone; ModelConfigError for a layer whose arguments cannot be priced (they could not be built either)."""
    params, macs, elements = 0, 0, ch * size * size
    outputs: list[int] = []
    for plan in plans:
        froms = [plan.f] if isinstance(plan.f, int) else plan.f
        sizes = [size if not outputs else outputs[-1] if x == -1 else outputs[x] for x in froms]
        try:
            p, m, e, out = _layer_cost(plan, sizes)
        except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError) as e:
            raise ModelConfigError(
                f"layer {plan.i} ({plan.name}) cannot be built from args {_short.repr(plan.args)}: {one_line(e)}"
            ) from None
        params, macs, elements = params + p, macs + m, elements + e
        outputs.append(out)
    return params, macs, elements


def check_model_cost(plans: list[LayerPlan], ch: int = 3) -> int:
    """The planned model's parameter count; ModelConfigError when it, or the stride probe's multiply-adds or
    activations, exceed the limits (checked before anything is allocated)."""
    params, macs, elements = model_cost(plans, ch)
    if params > MAX_PARAMETERS:
        raise ModelConfigError(
            f"the config describes a model of {params / 1e6:.0f}M parameters, more than the "
            f"{MAX_PARAMETERS / 1e6:.0f}M this code builds (yolov5x6 has 141M); check 'width_multiple', the channel "
            "counts and 'nc'"
        )
    if macs > MAX_PROBE_MACS or elements > MAX_PROBE_ELEMENTS:
        raise ModelConfigError(
            f"the config describes a model that needs {macs / 1e9:.0f}G multiply-adds and {elements / 1e6:.0f}M "
            f"activations for one {PROBE_SIZE} px image, more than the limits ({MAX_PROBE_MACS / 1e9:.0f}G, "
            f"{MAX_PROBE_ELEMENTS / 1e6:.0f}M); check kernel sizes, paddings, upsampling and channel counts"
        )
    return params


def config_parameters(cfg: dict, ch: int = 3, family: Family | None = None) -> int:
    """The parameter count of the model a config describes (as a model of family), computed without building it
    (ModelConfigError if the config cannot describe a model)."""
    return model_cost(plan_layers(cfg, ch, family), ch)[0]
