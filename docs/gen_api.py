"""Generate ``docs/api.md``, the API reference, from the docstrings of iotable's public names.

Every name in the ``__all__`` of ``iotable`` and of its public modules (``iotable.nn``, ``iotable.brevitas``,
``iotable.hdl``, ``iotable.synth``, ``iotable.sweep``, ``iotable.errors``, ``iotable.bits``, ``iotable.pla``,
``iotable.onnxout``, ``iotable.graph.nodes``) gets its signature and docstring; classes also get their own public
methods, properties and attributes; error classes also get their group. The names that live in other modules (see the
package docstring) follow under their home module. Constants, which have no docstring, are described by the
``#:`` comment above their definition.

Usage::

    python docs/gen_api.py          # write docs/api.md
    python docs/gen_api.py --check  # exit 1 if docs/api.md is out of date
"""

from __future__ import annotations

import argparse
import difflib
import enum
import inspect
import re
import sys
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import iotable
import iotable.bits
import iotable.brevitas
import iotable.errors
import iotable.graph
import iotable.hdl
import iotable.lutcount
import iotable.lutnet
import iotable.nn
import iotable.onnxout
import iotable.pla
import iotable.sweep
import iotable.synth

#: The public modules, in the order the reference lists them.
PUBLIC_MODULES = (
    iotable,
    iotable.nn,
    iotable.brevitas,
    iotable.hdl,
    iotable.synth,
    iotable.sweep,
    iotable.errors,
    iotable.bits,
    iotable.pla,
    iotable.onnxout,
    iotable.graph,
    iotable.lutnet,
    iotable.lutcount,
)

#: Public names that live in a module of their own, not in a public module's ``__all__``: each home module and
#: its names, documented under the module's full path.
OTHER_NAMES = {
    "iotable.domain": ("code_dtype",),
    "iotable.front.spec": ("ELEMENTWISE", "has_spec"),
    "iotable.front.trace": ("LeafTracer",),
    "iotable.graph.diagram": ("Diagram",),
    "iotable.layout": ("PaddingMode",),
    "iotable.network.precompute": ("LayerTables", "precompute_layer", "precompute_model"),
    "iotable.synth.estimate": ("LayerEstimate",),
    "iotable.tabulate.enumerate": ("DEFAULT_MEMORY_BUDGET", "enumerate_tables"),
    "iotable.units": ("DEFAULT_MAX_ROWS", "Geometry", "Unit"),
}

API_MD = Path(__file__).resolve().parent / "api.md"

# Google-style section headers turned into Markdown; items are ``name: text`` lines under them.
_ITEM_SECTIONS = {"Args": "Arguments", "Arguments": "Arguments", "Raises": "Raises", "Attributes": "Attributes"}
_TEXT_SECTIONS = {"Returns": "Returns", "Yields": "Yields", "Note": "Note", "Notes": "Notes"}
_CODE_SECTIONS = {"Example": "Example", "Examples": "Examples"}
_SECTION = re.compile(r"^(\w+):\s*$")
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`(~?)([^`]+)`")
_MAX_LINE = 100


# -- docstrings -----------------------------------------------------------------------------------------------


def _inline(text: str) -> str:
    """RST inline markup to Markdown: ``x`` and :role:`x` become `x` (``~a.b`` keeps the last part)."""
    text = _ROLE.sub(lambda m: "`" + (m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)) + "`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text)


def _own_doc(obj: Any) -> str:
    """The object's own docstring, cleaned; never one inherited from a base class."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def _markdown(doc: str) -> str:
    """A Google-style docstring as Markdown: prose, item lists, and fenced examples."""
    out: list[str] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        header = _SECTION.match(line)
        if header is None or header.group(1) not in {**_ITEM_SECTIONS, **_TEXT_SECTIONS, **_CODE_SECTIONS}:
            out.append(_inline(line))
            i += 1
            continue
        name = header.group(1)
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        block = inspect.cleandoc("\n".join(body)).splitlines()
        if out and out[-1]:
            out.append("")
        if name in _CODE_SECTIONS:
            out += [f"**{_CODE_SECTIONS[name]}**", "", "```pycon", *block, "```"]
        elif name in _TEXT_SECTIONS:
            out += [f"**{_TEXT_SECTIONS[name]}:** " + _inline(" ".join(b.strip() for b in block))]
        else:
            out += [f"**{_ITEM_SECTIONS[name]}:**", ""]
            for entry in block:
                if entry.startswith(" ") and out[-1].startswith("- "):
                    out[-1] += " " + _inline(entry.strip())
                elif entry.strip():
                    key, _, text = entry.partition(":")
                    out.append(f"- `{key.strip()}`: {_inline(text.strip())}")
        out.append("")
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


# -- signatures -----------------------------------------------------------------------------------------------


class _Raw:
    """An annotation printed as written (annotations are strings under ``from __future__ import annotations``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _annotation(annotation: Any) -> Any:
    if annotation is inspect.Parameter.empty:
        return annotation
    return _Raw(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))


def _repr(value: Any) -> str:
    """``repr`` with double-quoted strings, as the project's formatter writes them."""
    if isinstance(value, str) and '"' not in value:
        return '"' + repr(value)[1:-1] + '"'
    return repr(value)


def _default(value: Any) -> Any:
    if value is inspect.Parameter.empty:
        return value
    return _Raw(_public_path(value) if inspect.isclass(value) else _repr(value))


def _signature(name: str, obj: Any, *, method: bool = False) -> str | None:
    """``name(params) -> return``, one parameter a line when it would be long; ``None`` if unavailable.

    ``method`` drops the first parameter (``self``); a class's signature has no return annotation.
    """
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    values = list(sig.parameters.values())[1 if method else 0 :]
    params = [p.replace(annotation=_annotation(p.annotation), default=_default(p.default)) for p in values]
    returns = inspect.Signature.empty if inspect.isclass(obj) else _annotation(sig.return_annotation)
    sig = sig.replace(parameters=params, return_annotation=returns)
    one_line = f"{name}{sig}"
    if len(one_line) <= _MAX_LINE:
        return one_line
    parts = [str(p) for p in sig.parameters.values()]
    kinds = [p.kind for p in sig.parameters.values()]
    rendered: list[str] = []
    for k, (part, kind) in enumerate(zip(parts, kinds, strict=True)):
        previous = kinds[k - 1] if k else None
        if kind is inspect.Parameter.KEYWORD_ONLY and previous not in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            rendered.append("*")
        rendered.append(part)
        if kind is inspect.Parameter.POSITIONAL_ONLY and (k + 1 == len(kinds) or kinds[k + 1] is not kind):
            rendered.append("/")
    tail = ")" if sig.return_annotation is inspect.Signature.empty else f") -> {sig.return_annotation!r}"
    return "\n".join([f"{name}(", *(f"    {r}," for r in rendered), tail])


def _code(text: str) -> str:
    return f"```python\n{text}\n```"


# -- entries --------------------------------------------------------------------------------------------------


def _constant_comment(name: str, modules: list[ModuleType]) -> str:
    """The ``#:`` comment block above ``name = ...`` in one of ``modules`` (empty when there is none)."""
    for module in modules:
        try:
            lines = inspect.getsource(module).splitlines()
        except (OSError, TypeError):
            continue
        for k, line in enumerate(lines):
            if re.match(rf"^{re.escape(name)}\s*(:[^=]*)?=", line):
                comment: list[str] = []
                j = k - 1
                while j >= 0 and lines[j].startswith("#:"):
                    comment.insert(0, lines[j][2:].strip())
                    j -= 1
                return " ".join(comment)
    return ""


def _public_path(cls: type) -> str:
    """The shortest import path of a class: ``torch.nn.ReLU`` rather than ``torch.nn.modules.activation.ReLU``."""
    parts = cls.__module__.split(".")
    for k in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:k]))
        if module is not None and getattr(module, cls.__qualname__, None) is cls:
            return f"{module.__name__}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _value(value: Any) -> str:
    if isinstance(value, tuple) and value and all(inspect.isclass(v) for v in value):
        return "(\n" + "".join(f"    {_public_path(v)},\n" for v in value) + ")"
    return _repr(value)


def _member_kind(value: Any) -> str | None:
    if isinstance(value, (property, cached_property)):
        return "property"
    if isinstance(value, classmethod):
        return "classmethod"
    if isinstance(value, staticmethod):
        return "staticmethod"
    if inspect.isfunction(value):
        return "method"
    if inspect.ismemberdescriptor(value):
        return "attribute"
    if hasattr(type(value), "__get__") and _own_doc(type(value)):
        return "descriptor"
    return None


def _member_doc(value: Any) -> str:
    if isinstance(value, (classmethod, staticmethod)):
        return _own_doc(value.__func__)
    if isinstance(value, cached_property):
        return _own_doc(value.func)
    if _member_kind(value) == "descriptor":
        return _own_doc(type(value))
    if inspect.ismemberdescriptor(value):
        return ""
    return _own_doc(value)


def _members(cls: type) -> list[str]:
    """Sections for a class's own public members, in definition order."""
    if issubclass(cls, BaseException):
        return []
    skip = {"forward", "extra_repr"} if _is_torch_module(cls) else set()
    sections = []
    for name, value in cls.__dict__.items():
        kind = _member_kind(value)
        if name.startswith("_") or name in skip or kind is None:
            continue
        qualname = f"{cls.__name__}.{name}"
        doc = _member_doc(value)
        heading = f"##### `{qualname}`" + ("" if kind == "method" else f" *({kind})*")
        parts = [heading]
        if kind in ("method", "classmethod", "staticmethod", "descriptor"):
            sig = _signature(qualname, getattr(cls, name), method=kind == "method")
            if sig is not None:
                parts.append(_code(sig))
        elif kind == "property":
            fget = value.fget if isinstance(value, property) else value.func
            returns = inspect.signature(fget).return_annotation
            if returns is not inspect.Signature.empty:
                parts.append(_code(f"{qualname}: {_annotation(returns)!r}"))
        if doc:
            parts.append(_markdown(doc))
        elif kind == "method" and (base := _overridden(cls, name)) is not None:
            parts.append(f"Overrides `{_public_path(base)}.{name}`.")
        sections.append("\n\n".join(parts))
    return sections


def _overridden(cls: type, name: str) -> type | None:
    """The nearest base class that also defines ``name``, if any."""
    return next((base for base in cls.__mro__[1:] if name in vars(base)), None)


def _is_torch_module(cls: type) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == "torch.nn.modules.module.Module" for c in cls.__mro__)


def _class_entry(qualname: str, cls: type) -> list[str]:
    parts = [f"#### `{qualname}`"]
    if issubclass(cls, BaseException):
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        parts.append(_code(f"class {cls.__name__}({bases})"))
        groups = [g.__name__ for g in iotable.errors.GROUPS if issubclass(cls, g) and g is not cls]
        if groups:
            parts.append(f"Group: `iotable.errors.{groups[0]}`.")
    elif issubclass(cls, enum.Enum):
        parts.append(_code("\n".join(f"{qualname}.{m.name} = {_repr(m.value)}" for m in cls)))
    else:
        sig = _signature(qualname, cls)
        if sig is not None:
            parts.append(_code(sig))
    doc = _own_doc(cls)
    if doc:
        parts.append(_markdown(doc))
    return ["\n\n".join(parts), *_members(cls)]


def _entry(prefix: str, name: str, obj: Any, modules: list[ModuleType]) -> list[str]:
    qualname = f"{prefix}.{name}"
    if inspect.ismodule(obj):
        body = _markdown(_own_doc(obj))
        anchor = obj.__name__.replace(".", "")
        return [f"#### `{qualname}`\n\nThe module `{obj.__name__}` (see [below](#{anchor})).\n\n{body}"]
    if inspect.isclass(obj):
        return _class_entry(qualname, obj)
    if callable(obj):
        sig = _signature(qualname, obj)
        parts = [f"#### `{qualname}`", *([_code(sig)] if sig else []), _markdown(_own_doc(obj))]
        return ["\n\n".join(p for p in parts if p)]
    comment = _constant_comment(name, modules)
    parts = [f"#### `{qualname}`", _code(f"{qualname} = {_value(obj)}"), _inline(comment)]
    return ["\n\n".join(p for p in parts if p)]


def _kind(obj: Any) -> str:
    if inspect.ismodule(obj):
        return "Modules"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return "Errors"
    if inspect.isclass(obj):
        return "Classes"
    if callable(obj):
        return "Functions"
    return "Constants"


_KIND_ORDER = ("Functions", "Classes", "Errors", "Constants", "Modules")


def _module_section(module: ModuleType) -> list[str]:
    modules = [m for key, m in sorted(sys.modules.items()) if key.startswith("iotable") and m is not None]
    by_kind: dict[str, list[str]] = {}
    for name in module.__all__:
        obj = getattr(module, name)
        by_kind.setdefault(_kind(obj), []).extend(_entry(module.__name__, name, obj, modules))
    out = [f"## `{module.__name__}`", _markdown(_own_doc(module))]
    for kind in _KIND_ORDER:
        if kind in by_kind:
            out.append(f"### {kind}")
            out.extend(by_kind[kind])
    return out


# Modules in pipeline order; any other module that defines a public name follows, sorted by name.
_PIPELINE = [
    "iotable.domain",
    "iotable.spec",
    "iotable.plan",
    "iotable.tabulate.probe",
    "iotable.enumerate",
    "iotable.table",
    "iotable.precompute",
    "iotable.trace",
    "iotable.graph",
    "iotable.network",
    "iotable.runtime",
    "iotable.bundle",
    "iotable.cli",
    "iotable.errors",
]


def _other_module(name: str) -> ModuleType:
    """A home module of :data:`OTHER_NAMES`, imported (``iotable.graph.diagram`` is imported lazily)."""
    __import__(name)
    return sys.modules[name]


def _other_section() -> list[str]:
    """The names that live in a module of their own, under their home module's full path."""
    out = [
        "## Other modules",
        "Public names that live in their home module rather than at the top level; import them from there.",
    ]
    for module_name, names in OTHER_NAMES.items():
        module = _other_module(module_name)
        modules = [module]
        out.append(f"### `{module_name}`")
        for name in names:
            out.extend(_entry(module_name, name, getattr(module, name), modules))
    return out


def _public_objects() -> list[tuple[str, Any]]:
    """Every documented name with its object: the public modules' names, then the other names."""
    found = [(name, getattr(module, name)) for module in PUBLIC_MODULES for name in module.__all__]
    for module_name, names in OTHER_NAMES.items():
        found += [(name, getattr(_other_module(module_name), name)) for name in names]
    return found


def _defining_modules() -> list[ModuleType]:
    """The package's submodules that define a public name, in import order of the package."""
    found: dict[str, ModuleType] = {}
    public = {m.__name__ for m in PUBLIC_MODULES}
    for _name, obj in _public_objects():
        home = getattr(obj, "__module__", None) if not inspect.ismodule(obj) else None
        if home and home.startswith("iotable.") and home not in public and _own_doc(sys.modules[home]):
            found.setdefault(home, sys.modules[home])
    return [
        found[key] for key in sorted(found, key=lambda m: (_PIPELINE.index(m) if m in _PIPELINE else len(_PIPELINE), m))
    ]


def _conventions() -> list[str]:
    """One section per defining module: its docstring holds the conventions its names share."""
    out = [
        "## Conventions by module",
        "Each module's notes: row order, address digit order, unit input order, batching. The names are "
        "imported from `iotable` itself, from a public module, or from the home module the package docstring "
        "names.",
    ]
    for module in _defining_modules():
        names = sorted({n for n, obj in _public_objects() if getattr(obj, "__module__", None) == module.__name__})
        listed = ", ".join(f"`{n}`" for n in names)
        short = module.__name__.rsplit(".", 1)[-1]
        # A private module is not imported by users: name it by its concept and the public names it defines.
        out.append(f"### {short[1:]} ({listed})" if short.startswith("_") else f"### `{module.__name__}` ({listed})")
        out.append(_markdown(_own_doc(module)))
    return out


def render() -> str:
    """The whole of ``docs/api.md`` as text."""
    header = (
        "# API reference\n\n"
        "<!-- Generated by docs/gen_api.py from the docstrings; edit those, then run `python docs/gen_api.py`. -->\n\n"
        "Every public name of `iotable` and its public modules, then the names that live in other modules. "
        "For a guided tour of how a layer becomes tables, "
        "see [walkthrough.md](walkthrough.md)."
    )
    toc = ["**Contents**", ""]
    for module in PUBLIC_MODULES:
        names = ", ".join(f"`{n}`" for n in module.__all__)
        toc.append(f"- `{module.__name__}`: {names}")
    for module_name, other in OTHER_NAMES.items():
        toc.append(f"- `{module_name}`: " + ", ".join(f"`{n}`" for n in other))
    sections = [
        header,
        "\n".join(toc),
        *(line for module in PUBLIC_MODULES for line in _module_section(module)),
        *_other_section(),
        *_conventions(),
    ]
    return "\n\n".join(s.rstrip() for s in sections if s) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/api.md``, or with ``--check`` report whether it is out of date (exit status 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if not args.check:
        API_MD.write_text(text, encoding="utf-8")
        print(f"wrote {API_MD.name} ({len(text.splitlines())} lines)")
        return 0
    current = API_MD.read_text(encoding="utf-8") if API_MD.exists() else ""
    if current == text:
        print(f"{API_MD.name} is up to date")
        return 0
    diff = difflib.unified_diff(
        current.splitlines(), text.splitlines(), "docs/api.md (on disk)", "docs/api.md (from docstrings)", lineterm=""
    )
    print("\n".join(list(diff)[:60]))
    print("docs/api.md is out of date; run `python docs/gen_api.py` and commit the result")
    return 1


if __name__ == "__main__":
    sys.exit(main())
