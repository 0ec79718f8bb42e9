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
