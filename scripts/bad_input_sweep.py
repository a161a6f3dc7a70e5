"""Run train.py, test.py, detect.py, export.py and the Python API on bad inputs and check each ends cleanly.

Usage:
    python scripts/bad_input_sweep.py               # all cases, a markdown table on stdout
    python scripts/bad_input_sweep.py -k detect     # only cases whose name matches the regular expression 'detect'
    python scripts/bad_input_sweep.py -k '^([0-9]+|more) '  # only the issue-16 cases (named by the issue's item)

Each case is one command run in a subprocess (or several started together), from a copy of the working tree in a
temporary folder, so that the defaults (weights/, data/, runs/, ../datasets) resolve there and nothing is written
into the repository or ../shared. A case passes when:
- the output has no Python traceback, the exit code is below 128 and the command ended within its timeout (the
  whole process group is killed at the timeout);
- it ends as expected: "error" cases with exit 1 or 2 and one line starting "ERROR:", "ok" cases with exit 0,
  "clean" cases either way;
- no input changed: every file under the temporary folder (fixtures, datasets, weights, the copy of the code) and
  under ../shared is hashed with sha256 before and after the case (a file is re-hashed when its inode, size,
  mtime or ctime changed); a file changed, removed or created anywhere but in a runs*/ output folder or a path
  the case allows fails it. This is also the "nothing written outside the run folder" check: the commands run in
  an empty folder, which must stay empty apart from runs/. Our own label and image caches are not inputs;
- crafted ("hostile") inputs stay under 2 GB of peak resident memory and never reach an out-of-memory error
  (the bounds must refuse them before allocating).

Memory. The issue asks for `prlimit --as=2GiB`, but no command can start under that address-space limit: `import
torch` alone maps 3.3 GB of address space (the CUDA libraries of the wheel). The smallest limits under which normal
commands passed on a 2-core CPU machine (bisected in 128 MiB steps; they vary from run to run) were, in MiB:
detect.py 4112-5712, test.py 4192-4432, train.py 4672-5072, export.py --include openvino 4304, a Detector script
3968-4864. So every command runs under `prlimit --as` at 6 GiB (train.py 6.5 GiB; ADDRESS_LIMITS_MIB), which
every good case passes under and which makes a runaway allocation fail early instead of taking the machine's
memory; the peak resident memory of each is measured with `/usr/bin/time -f %M` and shown in the table, and a
hostile case passes only with a peak under 2 GB (HOSTILE_PEAK_BYTES) and no out-of-memory message. Without
/usr/bin/time or prlimit the cases run without them and the column shows '-'.

Needs ../shared (COCO128 images, yolov5n.pt); exits 1 if any case fails. The issue-16 cases (data safety,
hostile files, path swapping, URL cache, exports) are in scripts/sweep_cases_safety.py; issue 28's (hostile model
files, lying export metadata, out of memory, SIGTERM at several moments: "signal" cases, which pass with exit 143 or
0) in scripts/sweep_cases_hostile.py; the dataset, tracking and hostile-dataset (issue 35: 'hostile data <class>')
cases in sweep_cases_datasets.py, sweep_cases_tracking.py and sweep_cases_hostile_data.py, registered when those
files exist.
"""

import argparse
import importlib
import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweep_cases_core import detect_cases, export_cases, test_cases, train_cases
from sweep_cases_hostile import hostile_cases
from sweep_cases_safety import safety_cases
from sweep_common import (
    ADDRESS_LIMITS_MIB,
    COCO,
    HOSTILE_PEAK_BYTES,
    OUT_OF_MEMORY,
    PRLIMIT,
    ROOT,
    SHARED,
    TIME,
    WEIGHTS,
    Case,
    Outcome,
    Snapshots,
    Sweep,
    _checkpoints,
    _under,
    changed_inputs,
)

sys.path.insert(0, str(ROOT))


from utils.log import one_line  # noqa: E402


def copy_code(dst: Path) -> Path:
    """The working tree's tracked and untracked (not ignored) files in dst, plus weights/yolov5n.pt from ../shared."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=False
    )
    if listing.returncode == 0:
        for name in filter(None, listing.stdout.decode().split("\0")):
            if (ROOT / name).is_file():
                (dst / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dst / name)
    else:  # not a git checkout: everything but outputs and caches
        ignore = shutil.ignore_patterns(".git", "runs", "__pycache__", "*.pt", "*.onnx", "*_openvino_model")
        shutil.copytree(ROOT, dst, ignore=ignore)
    (dst / "weights").mkdir(exist_ok=True)
    shutil.copy(WEIGHTS, dst / "weights" / "yolov5n.pt")
    return dst


def _command(case: Case, sweep: Sweep, peak_file: Path) -> list[str]:
    """The case's command under prlimit --as and /usr/bin/time (when present)."""
    script = case.argv[0]
    cmd = [sys.executable, *case.argv] if script == "-c" else [sys.executable, str(sweep.code / script), *case.argv[1:]]
    if PRLIMIT:
        cmd = [PRLIMIT, f"--as={ADDRESS_LIMITS_MIB.get(Path(script).name, 6144) << 20}", *cmd]
    if TIME:
        cmd = [TIME, "-f", "%M", "-o", str(peak_file), *cmd]
    return cmd


def _start(case: Case, sweep: Sweep, tag: str) -> tuple[subprocess.Popen, Path, Path]:
    """Start one copy of the case in its own process group; output to a log file (no pipe can fill and stall)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(sweep.code)}
    log, peak = sweep.logs / f"{tag}.log", sweep.logs / f"{tag}.peak"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            _command(case, sweep, peak),
            cwd=sweep.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log, peak


def _command_pid(proc: subprocess.Popen) -> int:
    """The pid of the case's Python process: /usr/bin/time's child when it wraps the command (prlimit execs it)."""
    if not TIME:
        return proc.pid
    for _ in range(100):
        try:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.05)
    return proc.pid


def _terminate(proc: subprocess.Popen, after: float) -> None:
    """SIGTERM to the command's own process after some seconds, as `kill <pid>` or a job scheduler would send it."""
    try:
        proc.wait(timeout=after)
        return  # it ended before the signal was due
    except subprocess.TimeoutExpired:
        pass
    try:
        os.kill(_command_pid(proc), signal.SIGTERM)
    except ProcessLookupError:
        pass


def _wait(proc: subprocess.Popen, deadline: float, terminate_after: float | None = None) -> int:
    """The exit code, or 124 after killing the process group at the deadline; leftover children are ended too."""
    if terminate_after is not None:
        _terminate(proc, terminate_after)
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        code = 124
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of this case's own process (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    return code


def _peak_bytes(file: Path) -> int | None:
    """Peak resident memory from /usr/bin/time -f %M (KiB, its last line)."""
    try:
        return int(file.read_text().split()[-1]) * 1024
    except (OSError, ValueError, IndexError):
        return None


def _judge(case: Case, code: int, text: str) -> tuple[list[str], str]:
    """Problems with one process's ending, and the line to show (its ERROR line, else its last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    problems = []
    if "Traceback (most recent call last)" in text:
        problems.append("traceback")
    if code == 124:
        problems.append(f"no end within {case.timeout:.0f} s (killed)")
    elif case.expect == "signal":  # 143 from run_cli's "Terminated (SIGTERM)", or from the signal itself when it
        # came during the imports, before the command began (nothing to clean up: the inputs check still runs)
        if code not in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
            problems.append(f"expected exit 143 after SIGTERM (or 0 when the command was done), got {code}")
    elif code >= 128 or code < 0:
        problems.append(f"exit code {code}")
    errors = [line for line in lines if line.startswith("ERROR")]
    one_error = code in (1, 2) and len(errors) == 1
    if case.expect == "signal" and errors:
        problems.append(f"SIGTERM ended in {len(errors)} ERROR lines: {errors[0][:120]}")
    if case.expect == "error" and not one_error:
        problems.append(f"expected one ERROR line and exit 1/2, got {len(errors)} lines, exit {code}")
    if case.expect == "ok" and code != 0:
        problems.append(f"expected success, exit {code}")
    if case.expect == "clean" and code != 0 and not one_error:
        problems.append(f"expected success or one ERROR line, got {len(errors)} ERROR lines, exit {code}")
    if case.hostile and (oom := [w for w in OUT_OF_MEMORY if w.lower() in text.lower()]):
        problems.append(f"ran out of memory ('{oom[0]}'): not bounded before allocating")
    return problems, errors[0] if errors else lines[-1] if lines else ""


def run_case(case: Case, sweep: Sweep, tag: str) -> Outcome:
    """Run one case (its setup first, then every copy together) and judge it."""
    start = time.perf_counter()
    if case.setup is not None:
        try:
            case.setup()
        except Exception as e:  # a fixture of this script failed: the case cannot be judged
            return Outcome(case, -1, "", [f"setup failed: {type(e).__name__}: {one_line(e)[:300]}"])
    roots = [sweep.work, SHARED]
    before = sweep.snapshots.take(roots, sweep.is_output)
    started = [_start(case, sweep, f"{tag}.{i}") for i in range(case.copies)]
    deadline = time.monotonic() + case.timeout
    codes = [_wait(proc, deadline, case.terminate_after) for proc, _, _ in started]
    texts = [log.read_text(errors="replace") for _, log, _ in started]
    peaks = [p for p in (_peak_bytes(peak) for _, _, peak in started) if p is not None]
    outcome = Outcome(case, max(codes, key=abs), "", seconds=time.perf_counter() - start)
    outcome.peak_mb = max(peaks) / 1e6 if peaks else None
    for i, (code, text) in enumerate(zip(codes, texts)):
        problems, line = _judge(case, code, text)
        outcome.problems += [f"run {i + 1}: {p}" if case.copies > 1 else p for p in problems]
        outcome.last_line = outcome.last_line or line
    if case.check is not None and (why := case.check("\n".join(texts))):
        outcome.problems.append(why)
    if case.hostile and peaks and max(peaks) >= HOSTILE_PEAK_BYTES:
        outcome.problems.append(f"peak memory {max(peaks) / 1e9:.2f} GB >= {HOSTILE_PEAK_BYTES / 1e9:.0f} GB")
    after = sweep.snapshots.take(roots, sweep.is_output)

    def may_write(path: str) -> bool:
        return (sweep.is_output(path) or _under(path, case.allow)) and not _under(path, case.protect)

    if changes := changed_inputs(before, after, may_write):
        shown = "; ".join(c.replace(str(sweep.work), "<tmp>") for c in changes[:3])
        more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
        outcome.problems.append(f"inputs touched: {shown}{more}")
    return outcome


def _markdown(outcomes: list[Outcome]) -> str:
    rows = [
        "| case | exit | peak MB | last line (ERROR line for errors) | s | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        line = o.last_line.replace("|", "\\|")[:220]
        verdict = "pass" if not o.problems else "FAIL: " + "; ".join(o.problems).replace("|", "\\|")
        peak = f"{o.peak_mb:.0f}" if o.peak_mb is not None else "-"
        rows.append(f"| {o.case.name} | {o.code} | {peak} | {line} | {o.seconds:.1f} | {verdict} |")
    return "\n".join(rows)


# Case files other helpers add (module, function): registered when present, so the sweep runs without them.
OPTIONAL_CASES = (
    ("sweep_cases_datasets", "dataset_cases"),
    ("sweep_cases_tracking", "tracking_cases"),
    ("sweep_cases_hostile_data", "hostile_data_cases"),
    ("sweep_cases_issue35", "issue35_cases"),
    ("sweep_cases_edge", "edge_cases"),
    ("sweep_cases_seg_data", "seg_data_cases"),
)


def optional_cases(sweep: Sweep) -> list[Case]:
    """The cases of each OPTIONAL_CASES file that exists; its function gets the Sweep when it takes an argument."""
    cases = []
    for module_name, function_name in OPTIONAL_CASES:
        if not (Path(__file__).parent / f"{module_name}.py").is_file():
            continue
        function = getattr(importlib.import_module(module_name), function_name)
        cases += function(sweep) if inspect.signature(function).parameters else function()
    return cases


def all_cases(sweep: Sweep) -> list[Case]:
    """Every case of the sweep (building their shared fixtures)."""

    tmp = sweep.work
    ckpt = _checkpoints(tmp)
    cases = detect_cases(tmp, ckpt) + test_cases(tmp, ckpt) + train_cases(tmp) + export_cases(tmp, ckpt)
    return cases + safety_cases(sweep) + hostile_cases(sweep) + optional_cases(sweep)


def main(argv: list[str] | None = None) -> int:
    """Build the fixtures, run the cases, print the table; 1 when any case failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name matches this regular expression")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    opt = parser.parse_args(argv)
    if not (WEIGHTS.is_file() and COCO.is_dir()):
        print(f"ERROR: {SHARED} (COCO128, yolov5n.pt) is needed for the sweep")
        return 1
    base = Path(tempfile.mkdtemp(prefix="bad_inputs_"))
    work, logs, cwd = base / "work", base / "logs", base / "work" / "cwd"
    for folder in (logs, cwd):
        folder.mkdir(parents=True)
    sweep = Sweep(work, logs, copy_code(work / "code"), cwd)
    shared_before = Snapshots().take([SHARED], lambda _p: False)
    try:
        outcomes = []
        for i, case in enumerate(c for c in all_cases(sweep) if re.search(opt.k, c.name)):
            outcomes.append(run_case(case, sweep, f"{i:03d}"))
            print(f"{'pass' if not outcomes[-1].problems else 'FAIL'}  {case.name}", file=sys.stderr, flush=True)
        print(_markdown(outcomes))
        failed = [o for o in outcomes if o.problems]
        shared_changes = changed_inputs(shared_before, Snapshots().take([SHARED], lambda _p: False), lambda _p: False)
        print(f"\n{len(outcomes) - len(failed)} passed, {len(failed)} failed")
        if shared_changes:
            print(f"{SHARED} changed (full re-hash): {'; '.join(shared_changes[:5])}")
        return 1 if failed or shared_changes else 0
    finally:
        for cleanup in sweep.cleanups:
            cleanup()
        if opt.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
