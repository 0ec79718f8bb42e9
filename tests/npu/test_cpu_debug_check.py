"""scripts/cpu_debug_check.sh without the CANN toolkit (all this CI has): distinct exit codes, clear
messages, nothing built. The paths with a toolkit need one and are not run here."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cpu_debug_check.sh"


def run(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env={"PATH": "/usr/bin:/bin", **env}, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_no_toolkit(tmp_path):
    res = run("--build-dir", str(tmp_path / "b"), env={}, cwd=tmp_path)
    assert res.returncode == 30
    assert "no CANN toolkit: ASCEND_HOME_PATH is unset" in res.stderr and "set_env.sh" in res.stderr
    assert not (tmp_path / "b").exists()


def test_toolkit_path_that_is_not_a_directory(tmp_path):
    res = run(env={"ASCEND_HOME_PATH": str(tmp_path / "nowhere")}, cwd=tmp_path)
    assert res.returncode == 30 and "is not a directory" in res.stderr


def test_toolkit_without_the_cpu_debug_library(tmp_path):
    (tmp_path / "cann").mkdir()
    res = run("--build-dir", str(tmp_path / "b"), env={"ASCEND_HOME_PATH": str(tmp_path / "cann")}, cwd=tmp_path)
    assert res.returncode == 31 and "tools/tikicpulib" in res.stderr
    assert not (tmp_path / "b").exists()


def test_help_and_usage(tmp_path):
    res = run("--help", env={}, cwd=tmp_path)
    assert res.returncode == 0 and "CPU-debug" in res.stdout
    for code in ("30", "31", "32", "33", "34"):
        assert code in res.stdout
    assert run("--frobnicate", env={}, cwd=tmp_path).returncode == 2


def _fake_toolkit(tmp_path: Path, cmake_rc: int, python_rc: int, cxx_rc: int = 0) -> dict:
    """A toolkit tree with the CPU-debug library and its headers' directories, and fake cmake / python / C++
    compiler (the header check's) that log and exit as told."""
    cann = tmp_path / "cann"
    for d in ("tools/tikicpulib/lib/include", "asc/include", "include"):
        (cann / d).mkdir(parents=True)
    (cann / "asc" / "include" / "kernel_operator.h").write_text("")
    info = cann / f"{platform.machine()}-linux" / "ascend_toolkit_install.info"  # the version op_host/ is checked at
    info.parent.mkdir()
    info.write_text("version=9.0.0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log.txt"
    for name, rc in (("cmake", cmake_rc), ("fakepython", python_rc), ("fakecxx", cxx_rc)):
        exe = bin_dir / name
        target = tmp_path / "cxx.txt" if name == "fakecxx" else log
        exe.write_text(f'#!/bin/sh\necho "{name} $*" >> "{target}"\nexit {rc}\n')
        exe.chmod(0o755)
    return {"ASCEND_HOME_PATH": str(cann), "PATH": f"{bin_dir}:/usr/bin:/bin", "CXX": "fakecxx"}


def test_the_header_check_runs_first_against_the_toolkit_and_stops_a_failing_build(tmp_path):
    env = _fake_toolkit(tmp_path, cmake_rc=0, python_rc=0, cxx_rc=1)
    res = run("--python", "fakepython", "--build-dir", str(tmp_path / "b"), env=env, cwd=tmp_path)
    assert res.returncode == 34 and "does not compile against the toolkit's headers" in res.stderr
    compiled = (tmp_path / "cxx.txt").read_text()
    assert f"-isystem{tmp_path}/cann/tools/tikicpulib/lib/include" in compiled  # the toolkit's own tikicpulib
    assert not (tmp_path / "log.txt").exists()  # nothing built


def test_the_kernel_gets_the_checks_include_list_and_flags(tmp_path):
    env = _fake_toolkit(tmp_path, cmake_rc=0, python_rc=0)
    res = run("--python", "fakepython", "--build-dir", str(tmp_path / "b"), env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    configure = (tmp_path / "log.txt").read_text().splitlines()[0]
    flags = configure.split("-DPASA_KERNEL_FLAGS=", 1)[1].split(";")
    for flag in ("-DASCENDC_CPU_DEBUG=1", "-D__NPU_ARCH__=2201", "-std=c++17",
                 f"-isystem{tmp_path}/cann/tools/tikicpulib/lib/include", f"-isystem{tmp_path}/cann/include",
                 f"-isystem{tmp_path}/cann/asc/include", f"-isystem{tmp_path}/cann/asc"):
        assert flag in flags, (flag, flags)


def test_build_failure_has_its_own_code(tmp_path):
    env = _fake_toolkit(tmp_path, cmake_rc=1, python_rc=0)
    res = run("--python", "fakepython", env=env, cwd=tmp_path)
    assert res.returncode == 32 and "cmake configure failed" in res.stderr
    assert (tmp_path / "log.txt").read_text().startswith(f"cmake -S {ROOT}/scripts/cpu_debug")


def test_mismatch_has_its_own_code_and_the_cases_get_the_built_kernel(tmp_path):
    env = _fake_toolkit(tmp_path, cmake_rc=0, python_rc=1)
    res = run("--python", "fakepython", "--build-dir", str(tmp_path / "b"), env=env, cwd=tmp_path)
    assert res.returncode == 33 and "does not match" in res.stderr
    ran = (tmp_path / "log.txt").read_text().splitlines()
    assert "-DSOC_VERSION=Ascend910B1" in ran[0] and ran[1].startswith(f"cmake --build {tmp_path / 'b'}")
    assert ran[2] == f"fakepython {ROOT}/scripts/cpu_debug/compare.py {tmp_path / 'b'}/pasa_cpu_debug {tmp_path / 'b'}/cases"
