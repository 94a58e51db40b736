"""What the numbers were measured on: CPU, cores, RAM, library versions, onnx-reduce revision.

>>> text = machine_description()
>>> "CPU:" in text and "numpy" in text
True
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
from pathlib import Path

from ..spec import REGISTRY

_PACKAGES = ("numpy", "numba", "onnx", "onnxruntime", "torch", "jax", "jaxlib", "scipy",
             "ml_dtypes", "onnx-reduce")


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_bytes() -> int | None:
    """Total RAM (MemTotal of /proc/meminfo), or None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def versions() -> dict[str, str]:
    """Python and the installed versions of the libraries the benchmark compares."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def revision() -> str:
    """The git revision of the onnx-reduce source tree (``+ local changes`` when dirty)."""
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return head + (" + local changes" if dirty else "")


def fast_kernels() -> str:
    """Which compiled kernel modules of onnx-reduce exist (the rest runs the numpy reference)."""
    modules = dict.fromkeys(record.fast[0] for record in REGISTRY if record.fast)
    present = [name for name in modules
               if importlib.util.find_spec(f"onnx_reduce.kernels.fast.{name}") is not None]
    return ", ".join(f"kernels.fast.{n}" for n in present) if present else "none (reference only)"


def usable_cores() -> int:
    """The cores this process may run on (its affinity; where the OS has none, every logical
    core; 0 when even that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def machine_description() -> str:
    """A few lines naming the machine and software, for the top of a report."""
    cpus = os.cpu_count() or 0
    usable = usable_cores()
    ram = ram_bytes()
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "unknown"
    ver = versions()
    lines = [
        f"CPU: {cpu_model()}",
        f"Cores: {cpus} logical ({usable} usable by this process)",
        f"RAM: {ram / 2**30:.1f} GiB" if ram else "RAM: unknown",
        f"OS: {platform.platform()}",
        f"Load average (1/5/15 min) at start: {load}",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()),
        f"onnx-reduce revision: {revision()}; compiled kernels present: {fast_kernels()}",
    ]
    return "\n".join(lines)
