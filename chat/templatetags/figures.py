"""How the staff pages write a number: whole, with thousands separators ("13,774").

One way on every /audit/ page and in the admin, whatever the locale settings
(the pages turn localization off for their SVG coordinates): a count, a
token total and a duration in milliseconds alike. `{% load figures %}`.
"""

from __future__ import annotations

from django import template

from chat.audit.formatting import figure_text

register = template.Library()


@register.filter
def figure(value: float | int | None) -> str:
    """1234.6 → "1,235"; None → "—"."""
    return figure_text(value)


@register.filter
def table_figure(cell: str | None) -> str:
    """A statistics table's cell (the CSV's bare "1234" or "12.5") as the page writes it.

    "1234" → "1,234", "1234.5" → "1,234.5"; a name or "—" stays as it is.
    """
    if cell is None:
        return "—"
    try:
        value = float(cell)
    except ValueError:
        return cell
    return f"{value:,.0f}" if value.is_integer() else f"{value:,.1f}"
