"""How a command ends through utils.cli.run_cli: out of memory on any device is one ERROR line; SIGTERM unwinds the
command as Ctrl-C does (the same clean-up), with exit code 143."""

import errno
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from utils.cli import is_out_of_memory, run_cli
from utils.errors import DatasetError

ROOT = Path(__file__).resolve().parents[2]

# What running out of memory raises on each device and library (messages as they print them).
OUT_OF_MEMORY = {
    "CPU allocator": RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 1717986918400 bytes. Error code 12 (Cannot allocate memory)"
    ),
    "CUDA": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB.\nGPU 0 has a total capacity"),
    "MPS": RuntimeError("MPS backend out of memory (MPS allocated: 9.0 GB, other allocations: 1.2 GB, max allowed"),
    "Python": MemoryError(),
    "numpy": MemoryError("Unable to allocate 3.5 TiB for an array with shape (1000000, 1000000)"),
    "ENOMEM": OSError(errno.ENOMEM, "Cannot allocate memory"),
    "OpenVINO": RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp:223:\nstd::bad_alloc"),
    "ONNX Runtime": RuntimeError("Failed to allocate memory for requested buffer of size 4294967296"),
}


def _ending(error: BaseException, log) -> tuple[int, list[str]]:
    def command():
        raise error

    code = run_cli(command)
    return code, [m for m in log.messages if m.startswith("ERROR")]


@pytest.mark.parametrize("device", OUT_OF_MEMORY)
def test_out_of_memory_is_the_same_one_line_on_every_device(device, log):
    code, errors = _ending(OUT_OF_MEMORY[device], log)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith("ERROR: out of memory (") and "\n" not in errors[0] and "--batch-size" in errors[0]
    assert "enforce fail" not in errors[0]  # the CPU allocator's sentence that says what failed is kept


def test_the_real_cpu_allocator_failure_is_recognised(log):
    try:
        torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: refused by the allocator at once
    except RuntimeError as e:
        assert is_out_of_memory(e)
        code, errors = _ending(e, log)
        assert code == 1 and "DefaultCPUAllocator: can't allocate memory" in errors[0]
    else:
        pytest.skip("this machine allocated 1 PiB (overcommit)")


@pytest.mark.parametrize("error", [RuntimeError("shape mismatch"), ValueError("out of range"), KeyError("x")])
def test_other_exceptions_are_not_taken_for_out_of_memory(error):
    assert not is_out_of_memory(error)
    with pytest.raises(type(error)):  # a bug keeps its traceback
        run_cli(lambda: (_ for _ in ()).throw(error))


def test_disk_full_and_yolo_errors_keep_their_lines(log):
    assert _ending(OSError(errno.ENOSPC, "No space left on device"), log)[1][0].startswith("ERROR: the disk is full")
    assert (
        _ending(DatasetError("data.yaml: nc is 79\nbut 80 names"), log)[1][-1]
        == "ERROR: data.yaml: nc is 79 but 80 names"
    )


def test_sigterm_unwinds_like_ctrl_c_and_restores_the_handler(log):
    before = signal.getsignal(signal.SIGTERM)
    folder = {}

    def command():
        with tempfile.TemporaryDirectory(prefix=".w-export-") as scratch:  # as export.py's scratch folder
            folder["path"] = Path(scratch)
            os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler at the next bytecode
            for _ in range(1000):
                pass
        return 0

    code = run_cli(command)
    assert code == 128 + signal.SIGTERM and "Terminated (SIGTERM)" in log.messages
    assert not folder["path"].exists()
    assert signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_still_exits_130(log):
    code = run_cli(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert code == 130 and "Interrupted" in log.messages


def test_run_cli_outside_the_main_thread_leaves_signals_alone():
    before, codes = signal.getsignal(signal.SIGTERM), []
    worker = threading.Thread(target=lambda: codes.append(run_cli(lambda: signal.getsignal(signal.SIGTERM) and 0)))
    worker.start()
    worker.join()
    assert codes == [0] and signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow
def test_sigterm_from_another_process_removes_what_the_command_created(tmp_path):
    """A real process: SIGTERM while the command waits inside its scratch folder; the folder goes, exit 143."""
    script = textwrap.dedent(f"""
        import sys, tempfile, time
        from utils.cli import run_cli

        def main():
            with tempfile.TemporaryDirectory(prefix=".w-export-", dir={str(tmp_path)!r}):
                print("ready", flush=True)
                time.sleep(60)

        sys.exit(run_cli(main))
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    assert len(list(tmp_path.glob(".w-export-*"))) == 1
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 143 and "Terminated (SIGTERM)" in out and "Traceback" not in out, out
    assert not list(tmp_path.glob(".w-export-*"))


def test_an_ignored_sigterm_stays_ignored():
    earlier = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert run_cli(lambda: 0 if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN else 1) == 0
    finally:
        signal.signal(signal.SIGTERM, earlier)
