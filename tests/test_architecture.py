"""The codebase's shape: packages in layers, thin command lines, modules of a few hundred lines, short functions, no
import cycles among our modules."""

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLIS = ("train.py", "test.py", "detect.py")
MAX_FUNCTION_LINES = 60
MAX_CLI_LINES = 150
MAX_MODULE_LINES = 460
# The library's packages, lowest first: each imports only from itself and the packages before it (docs/architecture.md).
# utils holds the shared helpers; the model-independent engines sit below models, the ones that load models above.
LAYERS = (
    "utils",
    "utils.data",
    "utils.track",
    "utils.infer",
    "models.nn",
    "models.weights",
    "models.export",
    "models.api",
    "models",
    "utils.eval",
    "utils.train",
)


def _project_files() -> list[Path]:
    """Every Python file of the project outside tests/."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    files = [ROOT / f for f in tracked] if tracked else list(ROOT.rglob("*.py"))
    return sorted(f for f in files if f.is_file() and "tests" not in f.relative_to(ROOT).parts)


def _module_name(file: Path) -> str:
    parts = list(file.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(file: Path, name: str, modules: set[str]) -> set[str]:
    """The project modules a file imports, lazily or not. Importing models.nn.yolo from outside the models package
    also runs models/__init__, so that counts as an import of the package too."""
    found = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    parents = {m.rsplit(".", 1)[0] for m in found if "." in m and not name.startswith(m.rsplit(".", 1)[0] + ".")}
    return (found | parents) & modules


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in graph as a list of modules, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_cycle_among_project_modules():
    files = {_module_name(f): f for f in _project_files()}
    graph = {name: _imports(file, name, set(files)) - {name} for name, file in files.items()}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def _package(module: str) -> str:
    """The package a module belongs to: its folder, as a dotted name ('utils.data.config' -> 'utils.data'); a
    package's own __init__ belongs to that package ('models.nn' -> 'models.nn')."""
    parts = module.split(".")
    if (ROOT / Path(*parts) / "__init__.py").is_file():
        return module
    folder = ".".join(parts[:-1])
    return folder if (ROOT / Path(*parts[:-1]) / "__init__.py").is_file() and folder else parts[0]


def test_packages_import_only_lower_layers():
    files = {_module_name(f): f for f in _project_files()}
    library = {name: file for name, file in files.items() if _package(name) in LAYERS}
    assert {_package(name) for name in library} == set(LAYERS), "a package is missing from LAYERS or the tree"
    upward = []
    for name, file in library.items():
        level = LAYERS.index(_package(name))
        for target in _imports(file, name, set(files)):
            if _package(target) in LAYERS and LAYERS.index(_package(target)) > level:
                upward.append(f"{name} imports {target}")
    assert not upward, f"imports against the layers {LAYERS}: {upward}"


def test_layer_check_finds_an_upward_import():
    assert _package("utils.train.trainer") == "utils.train" and _package("utils.log") == "utils"
    assert LAYERS.index(_package("models.nn.yolo")) < LAYERS.index(_package("utils.train.trainer"))
    assert _package("models.nn") == "models.nn" and _package("models") == "models"


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("cli", CLIS)
def test_command_lines_are_thin(cli):
    lines = len((ROOT / cli).read_text(encoding="utf-8").splitlines())
    assert lines < MAX_CLI_LINES, f"{cli} has {lines} lines; its logic belongs in an engine module"


def test_no_long_functions():
    long = []
    for file in _project_files():
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{file.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_modules_are_a_few_hundred_lines():
    long = [
        f"{f.relative_to(ROOT)} ({n})"
        for f in _project_files()
        if (n := len(f.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


# A model family is told apart in one place: its declaration (models/nn/family.py), and the head modules that
# define the heads (models/nn/head.py, models/nn/segment.py). Every other engine reads model.family; none of these
# may appear there. utils/downloads.py names the release assets that can be downloaded (by file name): which files
# exist, not what a family does.
FAMILY_DECLARATIONS = ("models/nn/family.py", "models/nn/head.py", "models/nn/segment.py", "utils/downloads.py")
FAMILY_HEADS = {"Detect", "AnchorFreeDetect"}  # isinstance(..., Detect): a test by class
FAMILY_ATTRIBUTES = {"anchor_free", "is_anchor_free", "has_one2one", "pixel_boxes"}  # by attribute or predicate
FAMILY_KEYS = {"dfl", "anchors", "end2end", "reg_max"}  # '"dfl" in hyp', '"anchors" not in cfg': by hyp/config key
FAMILY_NAMES = ("yolov5", "yolov8", "yolo11", "yolo26", r"yolo(v8|11|26)", r"yolov5")  # a file name compared or matched

# A task likewise: its declaration (models/nn/task.py) and the head modules. Every other engine reads model.task
# (task.masks, task.metrics, task.txt_rows, ...).
TASK_DECLARATIONS = ("models/nn/task.py", "models/nn/head.py", "models/nn/segment.py")
TASK_HEADS = {"Segment", "AnchorFreeSegment", "AnchorFreeSegment26", "Proto", "MultiScaleProto", "MaskOutputs"}
TASK_ATTRIBUTES = {"nm", "npr", "cv4", "one2one_cv4"}  # a segment head's parts, by attribute
TASK_KEYS = {"task", "proto", "protos", "coefficients", "masks"}  # '"task" in ckpt', hasattr(out, "protos"): by key
TASK_NAMES = ("detect", "segment", "Segment", "Segment26")  # a task or head name compared; file names with "-seg"


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _read_from(node: ast.AST, owner_name: str) -> bool:
    """family.pixel_boxes, model.family.end2end (or task.masks): what the declaration says, read where it should be."""
    if not isinstance(node, ast.Attribute):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == owner_name) or (
        isinstance(owner, ast.Attribute) and owner.attr == owner_name
    )


def _family_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(FAMILY_NAMES)


def _task_string(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in TASK_NAMES or "-seg" in node.value)
    )


def _declaration_tests(source: str, heads, attributes, keys, is_name, owner: str, looked_up=None) -> list[str]:
    """Where a module tells declared things apart itself: by head class, head attribute, key or name string
    (getattr and hasattr of looked_up: the attributes and keys unless given)."""
    looked_up = attributes | keys if looked_up is None else looked_up
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            if len(node.args) == 2 and _names_in(node.args[1]) & heads:
                found.append(f"{where}: isinstance(..., {ast.unparse(node.args[1])})")
        if isinstance(node, (ast.Attribute, ast.Name, ast.FunctionDef)) and not _read_from(node, owner):
            name = (
                node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else node.name
            )
            if name in attributes or name.startswith("is_anchor_free"):
                found.append(f"{where}: {name}")
        if isinstance(node, ast.Call) and any(
            isinstance(a, ast.Constant) and a.value in looked_up for a in node.args[1:2]
        ):
            if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                found.append(f"{where}: {ast.unparse(node)}")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            keyed = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                isinstance(s, ast.Constant) and s.value in keys for s in sides
            )
            named = [e for s in sides for e in (s.elts if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])]
            if keyed or any(is_name(s) for s in named):
                found.append(f"{where}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and any(is_name(a) for a in node.args):
            func = ast.unparse(node.func)
            if func.endswith(("compile", "match", "fullmatch", "search", "startswith", "endswith")):
                found.append(f"{where}: {ast.unparse(node)}")
    return found


def _family_tests(source: str) -> list[str]:
    """Where a module tests for a model family itself: by head class, head attribute, hyp/config key or file name."""
    return _declaration_tests(source, FAMILY_HEADS, FAMILY_ATTRIBUTES, FAMILY_KEYS, _family_string, "family")


def _task_tests(source: str) -> list[str]:
    """Where a module tests for a task itself: by head class, a segment head's parts, a key, a task or file name."""
    looked_up = TASK_ATTRIBUTES | TASK_KEYS - {"task"}  # getattr(model, "task", None) reads the declaration
    return _declaration_tests(source, TASK_HEADS, TASK_ATTRIBUTES, TASK_KEYS, _task_string, "task", looked_up)


def _engine_files() -> list[Path]:
    """The library and the command lines (scripts/ and benchmarks/ are tools, not engines)."""
    return [f for f in _project_files() if f.relative_to(ROOT).parts[0] not in ("scripts", "benchmarks")]


@pytest.mark.parametrize(
    ("declared", "declarations", "tests"),
    [("family", FAMILY_DECLARATIONS, _family_tests), ("task", TASK_DECLARATIONS, _task_tests)],
)
def test_only_the_declarations_tell_families_and_tasks_apart(declared, declarations, tests):
    found = []
    for file in _engine_files():
        rel = file.relative_to(ROOT).as_posix()
        if rel not in declarations:
            found += [f"{rel} {hit}" for hit in tests(file.read_text(encoding="utf-8"))]
    assert not found, f"{declared} tests outside {declarations} (read model.{declared} instead): {found}"


@pytest.mark.parametrize(
    "planted",
    [
        "if isinstance(model.model[-1], AnchorFreeDetect):\n    pass",
        "anchor_free = getattr(head, 'anchor_free', False)",
        "if 'dfl' in hyp:\n    pass",
        "free = 'anchors' not in cfg",
        "v8 = re.fullmatch(r'yolo(v8|11|26)[nsmlx]\\.pt', name)",
        "if name[:6] != 'yolov5':\n    pass",
        "e2e = getattr(model, 'end2end', False)",
    ],
)
def test_the_family_check_finds_a_planted_test(planted):
    assert _family_tests(planted), planted
    assert not _family_tests("iou = model.family.val_iou\nif model.family.anchors or family.pixel_boxes:\n    pass")


@pytest.mark.parametrize(
    "planted",
    [
        "if isinstance(model.model[-1], Segment):\n    pass",
        "if isinstance(outputs, MaskOutputs):\n    pass",
        "masks = hasattr(outputs, 'protos')",
        "n = model.model[-1].nm",
        "if 'task' in ckpt:\n    pass",
        "if ckpt.get('task') == 'segment':\n    pass",
        "seg = cfg['head'][-1][2] in ('Segment', 'Segment26')",
        "seg = weights.stem.endswith('-seg')",
    ],
)
def test_the_task_check_finds_a_planted_test(planted):
    assert _task_tests(planted), planted
    assert not _task_tests("if model.task.masks and 'segm' in task.metrics:\n    rows = model.task.txt_rows")
