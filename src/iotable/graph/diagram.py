"""Pictures of the interlayer graph, drawn by Graphviz (the optional extra ``iotable[notebook]``).

:meth:`Graph.to_dot() <iotable.Graph.to_dot>` writes the graph as DOT text with no dependency;
:meth:`Graph.to_svg() <iotable.Graph.to_svg>` and :meth:`TableNetwork.draw() <iotable.TableNetwork.draw>`
have Graphviz draw it. That needs two things: the ``graphviz`` Python package (``pip install
"iotable[notebook]"``) and Graphviz's ``dot`` program (Debian and Ubuntu: ``apt-get install graphviz``;
macOS: ``brew install graphviz``). Both are looked for only when a picture is asked for; when one is missing,
:class:`GraphvizNotInstalledError` says which and how to install it. A notebook's HTML view of a network
leaves the picture out instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import GraphvizNotInstalledError
from .nodes import GraphError

__all__ = ["Diagram", "GraphvizNotInstalledError", "render_svg"]

_PACKAGE_FIX = 'install it with pip install "iotable[notebook]"'
_PROGRAM_FIX = "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"


def render_svg(dot: str) -> str:
    """SVG text of a DOT graph, drawn by Graphviz's ``dot`` program.

    Raises:
        GraphvizNotInstalledError: the ``graphviz`` package or the ``dot`` program is missing.

    Example:
        >>> svg = render_svg('digraph { "a" -> "b"; }')
        >>> svg.startswith("<svg"), "</svg>" in svg
        (True, True)
    """
    try:
        import graphviz
    except ImportError:
        msg = f"drawing the graph needs the Python package 'graphviz', which is not installed; {_PACKAGE_FIX}"
        raise GraphvizNotInstalledError(msg) from None
    try:
        svg = graphviz.Source(dot).pipe(format="svg", encoding="utf-8", quiet=True)
    except graphviz.ExecutableNotFound:
        msg = f"drawing the graph needs Graphviz's 'dot' program, which is not on the PATH; {_PROGRAM_FIX}"
        raise GraphvizNotInstalledError(msg) from None
    except graphviz.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip() if isinstance(exc.stderr, bytes) else exc.stderr
        msg = f"Graphviz's 'dot' failed on the graph's DOT text (exit status {exc.returncode}): {detail}"
        raise GraphError(msg) from None
    # The picture goes inside HTML: keep the <svg> element, without the XML prolog and doctype before it.
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


@dataclass(frozen=True)
class Diagram:
    """A picture of the interlayer graph: its DOT text and the SVG Graphviz drew from it.

    A Jupyter notebook shows it inline; :meth:`save` writes either form. Made by
    :meth:`TableNetwork.draw() <iotable.TableNetwork.draw>` and :meth:`Graph.draw() <iotable.Graph.draw>`.

    Example:
        >>> net = precompute(torch.nn.Sequential(torch.nn.Linear(2, 1), iotable.nn.Quantize(1)),
        ...                  input_domain=Domain.uniform(1))
        >>> diagram = net.draw()
        >>> diagram.svg.startswith("<svg"), diagram.dot.startswith("digraph")
        (True, True)
    """

    dot: str
    svg: str

    def _repr_svg_(self) -> str:
        return self.svg

    def __repr__(self) -> str:
        return f"Diagram(graph picture: {len(self.svg):,} characters of SVG, {len(self.dot):,} of DOT)"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the picture to ``path`` (atomically): SVG for ``.svg``, DOT text for ``.dot`` or ``.gv``.

        Returns:
            The path written.
        """
        from .._util.files import atomic_write

        target = Path(path)
        suffix = target.suffix.lower()
        if suffix not in (".svg", ".dot", ".gv"):
            msg = f"Diagram.save: cannot tell the format of {str(target)!r}; name the file *.svg, *.dot or *.gv"
            raise GraphError(msg)
        if not target.parent.is_dir():
            msg = f"Diagram.save: the folder of {str(target)!r} does not exist; create it first"
            raise GraphError(msg)
        atomic_write(target, (self.svg if suffix == ".svg" else self.dot).encode("utf-8"))
        return target
