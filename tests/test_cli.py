"""The pasa-npu command line: plain-text help, --version, and bad input reported in one line (exit
status 2) before any work starts."""

from __future__ import annotations

import pytest

import pasa_npu
from pasa_npu import accuracy, cli


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
