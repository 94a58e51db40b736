"""Output files: a write killed outright leaves a temporary file that the next write to the same
destination removes; a write ended by SIGTERM or SIGINT removes its own. Driven through real
processes of the command line, killed mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from onnx_reduce.cli import app
from onnx_reduce.cli.files import remove_stale_temporaries

#: The command line in a child process whose ``np.save`` writes part of the file, says so, and
#: waits to be killed.
_STALLED_WRITER = textwrap.dedent("""
    import signal, sys, time
    import numpy as np

    # Ctrl-C as in a terminal: a child that inherits SIGINT ignored (a shell's background job,
    # or a test run that left it so) keeps it ignored, and CI timed out waiting for it. Nor
    # does a terminal block them (a mask is inherited too: the TERM case timed out once).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])

    def stalled_save(file, *args, **kwargs):  # the open temporary (cli.tensors.save_npy)
        file.write(b"half a file")
        file.flush()
        print("writing", flush=True)
        for _ in range(1200):  # a signal taken by another thread is handled within 0.1 s
            time.sleep(0.1)

    np.save = stalled_save
    from onnx_reduce.cli.app import main
    sys.argv = ["onnx-reduce", *sys.argv[1:]]
    main()
""")


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp.npy"))


def _start_stalled_write(x: Path, out: Path) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", _STALLED_WRITER, "eval", "sum", str(x), "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = child.stdout.readline()  # blocks until the temporary file is half written
    assert line == "writing\n", child.stderr.read()
    assert len(_temporaries(out.parent)) == 1
    return child


@pytest.fixture
def x(tmp_path: Path) -> Path:
    np.save(tmp_path / "x.npy", np.array([1.0, 2.0, 4.0]))
    return tmp_path / "x.npy"


def test_a_killed_write_is_cleaned_up_by_the_next(tmp_path: Path, x: Path) -> None:
    out = tmp_path / "y.npy"
    child = _start_stalled_write(x, out)
    child.kill()  # SIGKILL: no handler runs
    child.communicate(timeout=60)
    assert len(_temporaries(tmp_path)) == 1
    result = CliRunner().invoke(app, ["eval", "sum", str(x), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert _temporaries(tmp_path) == []
    assert np.load(out).tolist() == [7.0]


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signalled_write_removes_its_temporary(tmp_path: Path, x: Path, number: int) -> None:
    out = tmp_path / "y.npy"
    child = _start_stalled_write(x, out)
    child.send_signal(number)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode != 0
    assert "Traceback" not in stderr
    assert _temporaries(tmp_path) == []
    assert not out.exists()


def test_temporaries_of_live_processes_are_left_alone(tmp_path: Path) -> None:
    alive = tmp_path / f".y.{os.getppid()}.abcd1234.tmp.npy"
    gone = tmp_path / ".y.999999999.abcd1234.tmp.npy"  # beyond Linux's pid_max
    other = tmp_path / ".y2.999999999.abcd1234.tmp.npy"  # another destination's
    for path in (alive, gone, other):
        path.write_bytes(b"")
    assert remove_stale_temporaries(tmp_path / "y.npy") == [gone]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name])
