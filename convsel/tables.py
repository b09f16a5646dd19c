"""Plain-text tables, laid out by rich: every column as wide as its widest cell, so a long
label never pushes its row out of line. No colour, no borders, no wrapping: the text is the
same on a terminal, in a pipe and in a test."""

from __future__ import annotations

import io
from collections.abc import Collection, Iterable, Sequence


def render(headers: Sequence[str], rows: Iterable[Sequence[object]], *,
           right: Collection[str] = ()) -> str:
    """``headers`` and ``rows`` as aligned text; the columns named in ``right`` are
    right-aligned (numbers). Cells are shown as ``str(cell)``, never as rich markup."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="", pad_edge=False, show_edge=False,
                  padding=(0, 2, 0, 0))
    for header in headers:
        table.add_column(Text(header), justify="right" if header in right else "left",
                         no_wrap=True)
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))
    buffer = io.StringIO()
    Console(file=buffer, width=1 << 16, color_system=None, force_terminal=False,
            highlight=False, emoji=False, soft_wrap=False).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
