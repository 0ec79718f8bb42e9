"""scripts/cpu_debug_check.sh without the CANN toolkit (all this CI has): distinct exit codes, clear
messages, nothing built. The paths with a toolkit need one and are not run here."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
    for code in ("30", "31", "32", "33"):
        assert code in res.stdout
    assert run("--frobnicate", env={}, cwd=tmp_path).returncode == 2


def _fake_toolkit(tmp_path: Path, cmake_rc: int, python_rc: int) -> dict:
    """A toolkit tree with the CPU-debug library and fake cmake / python that log and exit as told."""
    (tmp_path / "cann" / "tools" / "tikicpulib").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log.txt"
    for name, rc in (("cmake", cmake_rc), ("fakepython", python_rc)):
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit {rc}\n')
        exe.chmod(0o755)
    return {"ASCEND_HOME_PATH": str(tmp_path / "cann"), "PATH": f"{bin_dir}:/usr/bin:/bin"}


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
