"""`tuner completion bash|zsh`: the script shtab generates from tuner's own parser, exercised
in a real bash the way bash's programmable completion calls it (COMP_WORDS, COMP_CWORD)."""

from __future__ import annotations

import subprocess

import pytest

from tests import harness


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory):
    p = harness.tuner('completion', 'bash', timeout=60)
    assert p.returncode == 0, p.stderr
    path = tmp_path_factory.mktemp("completion") / "tuner.bash"
    path.write_text(p.stdout)
    return path


def _complete(script, *words: str) -> list[str]:
    """COMPREPLY for the command line `words` with the cursor at the end of the last word."""
    line = " ".join(words)
    quoted = " ".join(f"'{w}'" for w in words)
    code = (f"source '{script}'; complete -p tuner >/dev/null || exit 3\n"
            f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; COMP_POINT={len(line)}\n"
            "_shtab_tuner; printf '%s\\n' \"${COMPREPLY[@]}\"")
    p = subprocess.run(["bash", "--norc", "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [w.strip() for w in p.stdout.splitlines() if w.strip()]


def test_bash_completes_commands(bash_script):
    offered = _complete(bash_script, "tuner", "comp")
    assert "compile" in offered and "completion" in offered and "run" not in offered, offered


def test_bash_completes_settings_flags(bash_script):
    assert _complete(bash_script, "tuner", "compile", "--fsdp_v") == ["--fsdp_version"]
    assert "--callback" in _complete(bash_script, "tuner", "run", "build", "--call")


def test_zsh_script_and_unknown_shell():
    p = harness.tuner('completion', 'zsh', timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("#compdef tuner") and "--fsdp_version" in p.stdout, p.stderr
    p = harness.tuner('completion', 'fish', timeout=60)
    assert p.returncode == 2 and "invalid choice" in p.stderr and "Traceback" not in p.stderr
