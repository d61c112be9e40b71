"""The generated API reference is current, and every public name carries the docstring it is built from."""

from __future__ import annotations

import doctest
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import iotable
import iotable.brevitas
import iotable.nn

DOCS = Path(__file__).resolve().parent.parent / "docs"

# Plain values cannot carry a docstring; docs/gen_api.py documents them from the ``#:`` comment above them.
CONSTANTS = {"DEFAULT_MAX_ROWS", "DEFAULT_MEMORY_BUDGET", "ELEMENTWISE", "__version__"}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "gen_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def public_names() -> list[tuple[str, object]]:
    return [
        (f"{module.__name__}.{name}", getattr(module, name))
        for module in (iotable, iotable.nn, iotable.brevitas)
        for name in module.__all__
        if name not in CONSTANTS
    ]


def test_api_md_is_up_to_date() -> None:
    """docs/api.md is exactly what docs/gen_api.py renders from the current docstrings."""
    generator = load_generator()
    current = (DOCS / "api.md").read_text(encoding="utf-8")
    assert current == generator.render(), "docs/api.md is out of date; run `python docs/gen_api.py` and commit it"


def test_check_flag_reports_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gen_api.py --check`` exits 1 on a stale api.md and 0 once the generator has rewritten it."""
    generator = load_generator()
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n\nstale\n", encoding="utf-8")
    monkeypatch.setattr(generator, "API_MD", stale)
    assert generator.main(["--check"]) == 1
    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0


def test_check_runs_from_the_command_line() -> None:
    """``python docs/gen_api.py --check`` passes in a fresh interpreter, as CI and contributors run it."""
    result = subprocess.run(
        [sys.executable, str(DOCS / "gen_api.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_api_md_lists_every_public_name() -> None:
    """Every name in ``iotable.__all__``, ``iotable.nn.__all__`` and ``iotable.brevitas.__all__`` has its own heading in docs/api.md."""
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    for module in (iotable, iotable.nn, iotable.brevitas):
        for name in module.__all__:
            assert f"#### `{module.__name__}.{name}`" in text, name


@pytest.mark.parametrize("qualname, obj", public_names(), ids=[q for q, _ in public_names()])
def test_public_name_has_a_docstring(qualname: str, obj: object) -> None:
    """Each public function, class and module has a docstring of its own (not one inherited from a base)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert isinstance(doc, str) and doc.strip(), f"{qualname} has no docstring"


def test_public_methods_have_docstrings() -> None:
    """Each public method and property a public class defines has a docstring, its own or the one it overrides."""
    missing = []
    for qualname, obj in public_names():
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        for name, value in vars(obj).items():
            if name.startswith("_"):
                continue
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            if inspect.isfunction(value) or isinstance(value, property):
                if not (inspect.getdoc(getattr(obj, name)) or "").strip():
                    missing.append(f"{qualname}.{name}")
    assert not missing, f"public members without a docstring: {missing}"


# Pages whose ``pycon`` snippets run as one doctest session each, with the number of snippets a page must
# exceed, so that a page whose snippets went missing (or whose fences no longer match) fails, not passes empty.
SNIPPET_PAGES = {"walkthrough.md": 10, "graph.md": 15, "models.md": 6}


@pytest.mark.parametrize("page", sorted(SNIPPET_PAGES))
def test_page_snippets_run(page: str) -> None:
    """Every ``pycon`` snippet of a docs page, run in order in one session, prints what the page shows."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```pycon\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) > SNIPPET_PAGES[page]
    source = "\n".join(blocks)
    test = doctest.DocTestParser().get_doctest(source, {}, page, str(DOCS / page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def readme_examples() -> list[str]:
    text = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first Python example (one layer) runs and prints the seed rows it promises."""
    blocks = readme_examples()
    assert len(blocks) == 3
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Conv1d: layout NCW, 3 unit(s), 192 row(s)" in out
    assert "[[6.0], [3.0], [9.0]]" in out


def test_readme_whole_model_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's whole-model example runs, flags its host head, estimates its LUTs and verifies bit for bit, as its comments say."""
    blocks = readme_examples()
    assert len(blocks) == 3
    exec(compile(blocks[1], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0].split()
        == "kind name shape units fan_in bits rows buffer stride dead estimate registers".split()
    )
    assert "host nodes (run with torch, not tabulated)" in out and "LogicNets estimate: " in out
    assert "torch.Size([32, 10])" in out
    assert "32/32 samples agree bit for bit" in out


def test_readme_bundle_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's save / load example, continuing the whole-model one, round-trips the network."""
    blocks = readme_examples()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[1], "README.md", "exec"), namespace)
    exec(compile(blocks[2], "README.md", "exec"), namespace)
    assert (tmp_path / "model.bundle" / "manifest.json").is_file()


ROOT = DOCS.parent
_DOTTED = re.compile(r"\biotable(?:\.[A-Za-z_]\w*)+")


def _resolves(dotted: str) -> bool:
    """Whether ``iotable.a.b.c`` names something: the longest importable module, then attributes (or
    annotated class attributes) below it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            annotated = name in getattr(obj, "__annotations__", {})
            if not hasattr(obj, name) and not annotated:
                return False
            obj = getattr(obj, name, None)
        return True
    return False


def stale_names(paths: list[Path]) -> list[str]:
    """``file:line: name`` for every dotted ``iotable.…`` name in ``paths`` that names nothing."""
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.name}:{number}: {m}" for m in _DOTTED.findall(line) if not _resolves(m.rstrip("."))]
    return found


def test_every_name_the_docs_mention_exists() -> None:
    """Each dotted ``iotable.…`` name in a docstring, a comment, the README or a docs page names a module or
    attribute that exists (docs/api.md is generated; the changelog keeps the names of its time)."""
    pages = [p for p in DOCS.glob("*.md") if p.name != "api.md"]
    assert stale_names([*(ROOT / "src" / "iotable").rglob("*.py"), *pages, ROOT / "README.md"]) == []


def test_a_stale_name_is_found(tmp_path: Path) -> None:
    """A name that moved away is reported; one that exists is not."""
    page = tmp_path / "page.md"
    page.write_text("`iotable.graph.Graph` and `iotable.interpret.GraphInterpreter`\n", encoding="utf-8")
    assert stale_names([page]) == ["page.md:1: iotable.interpret.GraphInterpreter"]
