"""The repository needs nothing beside it: every input the suite reads is inside the checkout.

* No file of the tests, scripts, benchmarks or packages names a folder outside the repository
  (`../shared`, where the project's own notes and peer configs lived once).
* A clone into an empty directory collects the whole suite and passes the tests that used to
  read `../shared` (the peer configs and the seed excerpt, now under tests/data/).

How the clone's tests import the clone's code, cheaply: the suite's virtual environment is
reused, but its `tuner` is an editable install whose finder maps `tuner.compiler`,
`tuner.runtime`, ... to *this* checkout's folders. Running pytest inside the clone is not
enough: `import tuner` would find the clone's `tuner/` (the current directory comes first on
sys.path) while `tuner.compiler` fell through to the editable finder, i.e. to this checkout,
a silent mix. So the clone's run gets a `sitecustomize.py` (on PYTHONPATH, outside the clone)
that puts, first on `sys.meta_path`, a finder mapping the same names to the clone's folders
(read from the clone's own pyproject.toml `package-dir`). Every subprocess the tests start
(`python -m tuner ...`, ranks) inherits PYTHONPATH and so imports the clone too; the test
checks where `tuner.compiler` and `tests.conftest` come from before trusting the run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.packages import PACKAGE_FOLDERS

SEARCHED = ["tests", "scripts", "bench", *PACKAGE_FOLDERS, "examples", ".ci"]
SUFFIXES = {".py", ".sh", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ""}
#: a path to the notes folder beside the checkout, however it is spelled
OUTSIDE = re.compile(r"\.\./shared\b|/work/shared\b|[\"']shared[\"']\s*/|/\s*[\"']shared[\"']|parent\s*/\s*[\"']shared")


def _files() -> list[Path]:
    out = [REPO / "pyproject.toml"]
    for top in SEARCHED:
        for path in (REPO / top).rglob("*"):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts \
                    and path != Path(__file__).resolve() and (REPO / "tests" / "data") not in path.parents:
                out.append(path)
    return out


def test_nothing_reads_beside_the_checkout():
    offenders = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "copy the input into tests/data/ (with its provenance) instead:\n" + "\n".join(offenders)


def test_no_test_installs_system_packages():
    """scripts/test.sh installs them up front (scripts/system-packages.sh); a test only skips."""
    runs_apt = re.compile(r"[\"'](?:sudo|apt|apt-get|dpkg)[\"']\s*,|(?:system|check_call|check_output|run|Popen)\(\s*[\"']apt")
    offenders = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _files() if p.suffix == ".py" and "tests" in p.parts
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if runs_apt.search(line)]
    assert not offenders, "\n".join(offenders)


def test_the_copied_inputs_carry_their_provenance():
    sources = (REPO / "tests/data/peer-configs/SOURCES.md").read_text(encoding="utf-8")
    copied = sorted(p.relative_to(REPO / "tests/data/peer-configs").as_posix()
                    for p in (REPO / "tests/data/peer-configs").rglob("*") if p.is_file() and p.name != "SOURCES.md")
    assert len(copied) >= 79
    assert [p for p in copied if f"`{p}`" not in sources] == []
    seeds = (REPO / "tests/data/seeds/PROVENANCE.md").read_text(encoding="utf-8")
    for path in (REPO / "tests/data/seeds").glob("*"):
        if path.name != "PROVENANCE.md":
            assert f"`{path.name}`" in seeds and "commit" in seeds


SITECUSTOMIZE = '''\
"""Import `tuner` and its mapped parts from the clone {root!r} (tests/test_self_contained.py)."""
import sys
import tomllib
from importlib.util import spec_from_file_location
from pathlib import Path

_ROOT = Path({root!r})
_MAP = {{name: _ROOT / folder for name, folder in
        tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}}


class _CloneFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        folder = _MAP.get(fullname)
        if folder is None:
            return None
        return spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


sys.meta_path.insert(0, _CloneFinder)
'''


def _clone_env(tmp_path: Path, clone: Path) -> dict[str, str]:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE.format(root=str(clone)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, "PYTHONPATH": str(hook)}


def _pytest(args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_clone_with_nothing_beside_it(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"git cannot read this checkout: {head.stderr.strip()}")
    empty = tmp_path / "empty"
    clone = empty / "tuner"
    # the committed tree (a linked worktree's clone would otherwise check out the main branch)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(clone)], check=True, timeout=120)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", head.stdout.strip()], check=True, timeout=120)
    assert [p.name for p in empty.iterdir()] == ["tuner"]
    env = _clone_env(tmp_path, clone)

    where = subprocess.run([sys.executable, "-c", "import tuner, tuner.compiler, tuner.runtime, tests.conftest as c; "
                            "print(tuner.__file__); print(tuner.compiler.__file__); print(tuner.runtime.__file__); "
                            "print(c.__file__)"], cwd=clone, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(Path(line).resolve().is_relative_to(clone) for line in where.stdout.split()), where.stdout

    # One pytest in the clone: it collects the whole suite (an import error anywhere fails it,
    # and the hook below lists every test it found) and runs the tests that read ../shared
    # before (the parametrised peer-config cases are the same code on other files: their
    # collection proves the files are found).
    (tmp_path / "hook" / "collected_list.py").write_text(COLLECTED_LIST)
    listed = tmp_path / "collected.txt"
    ran = _pytest(["-q", "-p", "collected_list", "tests", "-k", CLONE_RUN],
                  clone, {**env, "COLLECTED_LIST": str(listed)}, timeout=1200)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    collected = listed.read_text().splitlines()
    assert len(collected) > 1000, f"the clone's suite was not collected whole: {len(collected)} tests"
    peer = [line for line in collected if line.startswith("tests/compiler/test_peer_configs.py::")]
    assert len(peer) >= 79, "the peer configs were not found in the clone"
    passed = re.search(r"(\d+) passed", ran.stdout)
    assert passed and int(passed.group(1)) >= 8, ran.stdout[-2000:]
    assert "error" not in ran.stdout.splitlines()[-1], ran.stdout[-3000:]


#: The tests that read ../shared before, by file and name (pytest's -k matches both).
CLONE_RUN = ("(test_contracts or test_import_cli or test_import_formats or test_peer_configs) and "
             "(seed_flag or test_import_cli or fsdp_v1_config or forbidden_keys or changed_choice or axolotl)")

#: A plugin for the clone's pytest: every test collected, before -k deselects, one per line.
COLLECTED_LIST = '''\
import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    with open(os.environ["COLLECTED_LIST"], "w", encoding="utf-8") as out:
        out.writelines(item.nodeid + "\\n" for item in items)
'''
