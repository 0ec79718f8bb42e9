"""The pasa-npu command line: plain-text help, --version, and bad input reported in one line (exit
status 2) before any work starts."""

from __future__ import annotations

import pytest

import pasa_npu
from pasa_npu import accuracy, cli
from pasa_npu.precision import ALLOCATIONS


def _one_error_line(capsys, *words: str) -> str:
    """Check that stderr is one "pasa-npu: error: ..." line holding ``words``; return stdout."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pasa-npu: error: "), captured.err
    assert "Traceback" not in captured.err
    for word in words:
        assert word in lines[0]
    return captured.out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"pasa-npu {pasa_npu.__version__}\n"


@pytest.mark.parametrize("command", [[], ["accuracy"], ["beta"], ["scan"]])
def test_help_is_plain_text(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(command + ["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: pasa-npu")
    # no reStructuredText markup from docstrings: ``literal``, :func:`x`, :mod:`x`
    assert "``" not in text and ":func:" not in text and ":mod:" not in text and "`" not in text
    # every command explains itself beyond its usage line
    body = text.split("\n\n")[1]
    assert len(body.split()) >= 8, text


def _no_model_loading(monkeypatch):
    transformers = pytest.importorskip("transformers")

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", refuse)


def test_scan_missing_model_dir(tmp_path, monkeypatch, capsys):
    _no_model_loading(monkeypatch)
    out = tmp_path / "out"
    assert cli.main(["scan", str(tmp_path / "missing"), "--prompt", "x", "--out", str(out)]) == 2
    _one_error_line(capsys, "model_dir", str(tmp_path / "missing"))
    assert not out.exists()


@pytest.mark.parametrize("value", ["2", "1", "-0.1", "nan"])
def test_scan_beta_outside_the_unit_interval(value, tmp_path, monkeypatch, capsys):
    _no_model_loading(monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    out = tmp_path / "out"
    assert cli.main(["scan", str(tmp_path), "--prompt", "x", "--beta", value, "--out", str(out)]) == 2
    _one_error_line(capsys, "--beta", "[0, 1)")
    assert not out.exists()


def test_scan_empty_prompt_and_out_that_is_a_file(tmp_path, monkeypatch, capsys):
    _no_model_loading(monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    assert cli.main(["scan", str(tmp_path), "--prompt", "  "]) == 2
    _one_error_line(capsys, "--prompt")
    (tmp_path / "file").write_text("")
    assert cli.main(["scan", str(tmp_path), "--prompt", "x", "--out", str(tmp_path / "file")]) == 2
    _one_error_line(capsys, "--out", str(tmp_path / "file"))


def test_scan_folder_without_a_model(tmp_path, monkeypatch, capsys):
    # a folder without config.json is not a transformers model: said before anything is loaded
    _no_model_loading(monkeypatch)
    (tmp_path / "model").mkdir()
    out = tmp_path / "out"
    assert cli.main(["scan", str(tmp_path / "model"), "--prompt", "x", "--out", str(out)]) == 2
    _one_error_line(capsys, "model_dir", "config.json")
    assert not out.exists()


def test_scan_model_folder_transformers_cannot_load(tmp_path, monkeypatch, capsys):
    # transformers' own multi-line complaint is reported as one line, and no output folder is made
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    out = tmp_path / "out"
    assert cli.main(["scan", str(tmp_path / "model"), "--prompt", "x", "--out", str(out)]) == 2
    _one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("command", ["accuracy", "scan"])
@pytest.mark.parametrize("out", ["", "under_a_file"])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(command, out, tmp_path, monkeypatch, capsys):
    _no_model_loading(monkeypatch)
    monkeypatch.setattr(accuracy, "run_study", lambda **kw: pytest.fail("the study ran"))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "file").write_text("")
    out = str(tmp_path / "file" / "sub") if out == "under_a_file" else out
    argv = ["accuracy"] if command == "accuracy" else ["scan", str(tmp_path / "model"), "--prompt", "x"]
    assert cli.main(argv + ["--out", out]) == 2
    _one_error_line(capsys, "--out")


@pytest.mark.parametrize("missing, argv, words", [
    ("matplotlib", ["accuracy"], ("matplotlib", "pasa-npu[study]", "--no-plots")),
    ("tqdm", ["accuracy", "--no-plots"], ("tqdm", "pasa-npu[study]", "--no-progress")),
    ("matplotlib", ["scan", "MODEL", "--prompt", "x"], ("matplotlib", "pasa-npu[study]")),
])
def test_a_missing_optional_dependency_is_named_with_its_extra(missing, argv, words, tmp_path, monkeypatch, capsys):
    import importlib.util

    _no_model_loading(monkeypatch)
    monkeypatch.setattr(accuracy, "run_study", lambda **kw: pytest.fail("the study ran"))
    (tmp_path / "config.json").write_text("{}")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else find_spec(name, *a))
    argv = [str(tmp_path) if a == "MODEL" else a for a in argv]
    assert cli.main(argv + ["--out", str(tmp_path / "out")]) == 2
    _one_error_line(capsys, *words)


def test_beta_scale_outside_the_range(capsys):
    # n = 2^19 in float16: the unscaled M's off-diagonal β/n is a subnormal of a few bits; nothing is
    # printed first
    assert cli.main(["beta", "--block-kv", str(2**19)]) == 2
    assert _one_error_line(capsys, "scale must be in", "block_kv n=524288") == ""


def test_accuracy_out_that_is_a_file(tmp_path, monkeypatch, capsys):
    def refuse(**kwargs):
        raise AssertionError("the study ran before the arguments were checked")

    monkeypatch.setattr(accuracy, "run_study", refuse)
    (tmp_path / "file").write_text("")
    assert cli.main(["accuracy", "--out", str(tmp_path / "file")]) == 2
    _one_error_line(capsys, "--out")


def _no_study(monkeypatch):
    monkeypatch.setattr(accuracy, "run_study", lambda **kw: pytest.fail("the study ran before its arguments' check"))


@pytest.mark.parametrize("argv, words", [
    (["--hard-only", "--hard-seeds", "0"], ("--hard-seeds 0", "--hard-only")),
    (["--precisions", "fp32", "fp32_frame", "fp32"], ("--precisions", "fp32 more than once")),
])
def test_accuracy_arguments_that_leave_nothing_or_count_twice_are_refused(argv, words, tmp_path, monkeypatch, capsys):
    _no_study(monkeypatch)
    assert cli.main(["accuracy", "--out", str(tmp_path / "out")] + argv) == 2
    _one_error_line(capsys, *words)
    assert not (tmp_path / "out").exists()


def test_accuracy_out_the_file_system_refuses_is_refused_before_the_study(monkeypatch, capsys):
    # /proc lets root pass every permission check (os.access says writable) but makes no folder in it
    import os

    if not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux's /proc, a folder whose file system refuses new entries")
    _no_study(monkeypatch)
    assert cli.main(["accuracy", "--out", "/proc/pasa_npu_out/sub"]) == 2
    _one_error_line(capsys, "--out", "/proc/pasa_npu_out/sub")


def test_accuracy_out_folder_checked_by_writing_is_left_as_it_was(tmp_path, monkeypatch, capsys):
    # the check makes the folders it lacks and a file in them, then removes them: a failed study leaves nothing
    seen = []
    monkeypatch.setattr(accuracy, "run_study", lambda **kw: seen.append((tmp_path / "a").exists()) or [])
    monkeypatch.setattr(accuracy, "write_outputs", lambda *a, **kw: pytest.fail("nothing to write"))
    with pytest.raises(pytest.fail.Exception):
        cli.main(["accuracy", "--out", str(tmp_path / "a" / "b"), "--no-plots", "--no-progress"])
    assert seen == [False] and list(tmp_path.iterdir()) == []


def test_scan_block_kv_out_of_range_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    _no_model_loading(monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        cli.main(["scan", str(tmp_path), "--prompt", "x", "--block-kv", "100000", "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    _one_error_line(capsys, "--block-kv", "at most 1024")


@pytest.mark.parametrize("config", ["{not json", "{}"])
def test_scan_bad_config_is_reported_as_the_config_before_the_tokenizer(config, tmp_path, monkeypatch, capsys):
    pytest.importorskip("pasa_npu.integrations.transformers", exc_type=ImportError)
    _no_model_loading(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "config.json").write_text(config)
    assert cli.main(["scan", str(tmp_path), "--prompt", "x", "--out", str(tmp_path / "out")]) == 2
    _one_error_line(capsys, "model_dir", str(tmp_path / "config.json"))
    assert not (tmp_path / "out").exists()


def test_scan_with_a_transformers_release_the_integration_does_not_take(tmp_path, monkeypatch, capsys):
    import sys

    transformers = pytest.importorskip("transformers")
    _no_model_loading(monkeypatch)
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    monkeypatch.delitem(sys.modules, "pasa_npu.integrations.transformers", raising=False)
    (tmp_path / "config.json").write_text("{}")
    assert cli.main(["scan", str(tmp_path), "--prompt", "x", "--out", str(tmp_path / "out")]) == 2
    _one_error_line(capsys, "transformers >=5.23,<5.25", "found 5.17.0", "pasa-npu[transformers]")


def test_accuracy_help_describes_the_hard_sweep(capsys):
    with pytest.raises(SystemExit):
        cli.main(["accuracy", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "hard sweep" in text and "resonance" in text and "--hard-seeds" in text and "--hard-only" in text
    # every allocation it can compare, with the line that says what it is
    for a in ALLOCATIONS.values():
        assert f"{a.name}, {' '.join(a.description.split())}" in text, a.name


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["accuracy", "--seed", "-1"])
    assert e.value.code == 2
    _one_error_line(capsys, "--seed", "non-negative")
