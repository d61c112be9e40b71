"""Short reprs and notebook views (``_repr_html_``) of networks, layers, graphs and reports.

Reprs are one line that stays short whatever the model's size: names are cut to :data:`NAME_LIMIT`
characters and a whole repr to :data:`REPR_LIMIT`. The HTML views are the summary as a table (escaped
throughout), then the graph's picture as inline SVG when Graphviz is installed (see :mod:`iotable.graph.diagram`);
without Graphviz they are the table alone.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The longest name a repr shows in full.
NAME_LIMIT = 40
#: The longest repr.
REPR_LIMIT = 200

#: The summary columns of the HTML views: (key in the row dicts, heading), in display order. A column shows
#: when some row has a value for its key, so a new column (a cost estimate, say) is one entry here plus that
#: key in the rows of :meth:`TableNetwork.rows() <iotable.TableNetwork.rows>`.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "kind"),
    ("name", "name"),
    ("shape", "shape"),
    ("units", "units"),
    ("fan_in", "fan-in"),
    ("bits", "bits"),
    ("rows", "rows"),
    ("buffer", "buffer"),
    ("stride", "stride"),
    ("method", "method"),
    ("near_ties", "near ties"),
    ("estimate", "LUT6 (estimate)"),
    ("registers", "register bits"),
)

# The pictures of larger graphs take Graphviz long to lay out and are unreadable inline: the view leaves
# them out (``net.draw()`` still draws them).
MAX_PICTURE_NODES = 300

_NUMBERS = re.compile(r"[0-9][0-9,/]*")

_STYLE = (
    "<style>"
    ".iotable table{border-collapse:collapse;margin:0.4em 0}"
    ".iotable th,.iotable td{padding:0.15em 0.6em;text-align:left}"
    ".iotable td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".iotable tr.host td{font-style:italic;opacity:0.7}"
    ".iotable .picture{overflow:auto;max-height:40em}"
    "</style>"
)


def name(text: Any) -> str:
    """``repr`` of a name, cut to :data:`NAME_LIMIT` characters."""
    text = str(text)
    if len(text) > NAME_LIMIT:
        text = text[: NAME_LIMIT - 3] + "..."
    return repr(text)


def bounded(text: str) -> str:
    """``text`` cut to :data:`REPR_LIMIT` characters (a cut repr still ends with its closing parenthesis)."""
    if len(text) <= REPR_LIMIT:
        return text
    return text[: REPR_LIMIT - 4] + "...)"


def joined(values: Iterable[Any]) -> str:
    """Distinct values, ascending, joined by ``/`` (fan-ins 3/4)."""
    return "/".join(str(v) for v in sorted(set(values)))


def _cell(value: Any) -> tuple[str, bool]:
    """A value's text in a cell and whether it reads as numbers (``1,024``, fan-ins ``3/4``: right-aligned)."""
    if value is None:
        return "", False
    text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
    return text, bool(_NUMBERS.fullmatch(text))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]] = COLUMNS) -> str:
    """Rows as an HTML table of the columns some row fills; host rows are marked apart."""
    shown = [(key, title) for key, title in columns if any(row.get(key) not in (None, "") for row in rows)]
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in shown)
    body = []
    for row in rows:
        cells = []
        for key, _ in shown:
            text, number = _cell(row.get(key))
            cells.append(f'<td class="num">{html.escape(text)}</td>' if number else f"<td>{html.escape(text)}</td>")
        css = ' class="host"' if row.get("kind") == "host" else ""
        body.append(f"<tr{css}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def view(title: str, *parts: str, notes: Sequence[str] = (), picture: str = "") -> str:
    """A notebook view: a title line, the parts (HTML), notes (plain text, escaped), then the picture."""
    lines = "".join(f"<p>{html.escape(note)}</p>" for note in notes)
    return f'<div class="iotable">{_STYLE}<p><b>{html.escape(title)}</b></p>{"".join(parts)}{lines}{picture}</div>'
