"""One configured build of the top-level CMakeLists.txt per pytest process, shared by the test files
that drive C++ tests (test_cmake_build.py, test_tiling_grid.py).

The tree lives in a temporary directory (never the source tree or pip's build directory), is configured
once, and each target is built at most once. It is built without the Python module (``pip install``
builds that one) and at -O1, which compiles about twice as fast as the package's -O2 while keeping the
C++ tests quick.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tools_missing() -> str | None:
    """Why the C++ tests cannot run here (None when cmake and a C++ compiler are on PATH)."""
    if shutil.which("cmake") is None:
        return "cmake is not on PATH"
    if shutil.which("c++") is None and shutil.which("g++") is None:
        return "no C++ compiler (c++/g++) on PATH"
    return None


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@functools.lru_cache(maxsize=None)
def build_dir() -> Path:
    """Configure the top-level CMake in a fresh temporary directory; raise with CMake's log on failure."""
    tmp = Path(tempfile.mkdtemp(prefix="pasa_cmake_"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    cmd = ["cmake", "-S", str(ROOT), "-B", str(tmp), "-DCMAKE_BUILD_TYPE=None", "-DCMAKE_CXX_FLAGS=-O1",
           "-DPASA_BUILD_PYTHON=OFF", "-DPASA_ENABLE_CANN=OFF"]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    res = _run(cmd)
    if res.returncode != 0:
        raise RuntimeError(f"cmake configure failed ({' '.join(cmd)}):\n{res.stdout[-6000:]}")
    return tmp


@functools.lru_cache(maxsize=None)
def build(target: str = "all") -> Path:
    """Build ``target`` (``all``: every default target) in :func:`build_dir`; return the build directory."""
    tree = build_dir()
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    res = _run(["cmake", "--build", str(tree), "--target", target, "--parallel", jobs])
    if res.returncode != 0:
        raise RuntimeError(f"cmake --build --target {target} failed:\n{res.stdout[-8000:]}")
    return tree


def run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a command, stdout and stderr together as text."""
    return _run(cmd, cwd)
