"""A figure with nothing to show is not drawn: the report says why in a sentence where the
image would be (empty axes, or bars of 0 for values nobody scored, read as results).

The drawing functions raise ``NotDrawn(why)``; the writer keeps ``(caption, NotDrawn)`` in
place of ``(caption, png path)``; markdown and HTML render the sentence. No matplotlib here:
a rerun whose figures are all kept (figure_cache.py) renders without importing it.
"""

from __future__ import annotations

from html import escape

import pandas as pd


class NotDrawn(Exception):
    """A figure whose data has nothing to draw; ``why`` says so in words."""

    def __init__(self, why: str):
        why = " ".join(str(why or "no data").split())
        super().__init__(why)
        self.why = why


def nothing_in(frame: pd.DataFrame | None, cols) -> bool:
    """True when the table is missing, empty, lacks the columns or holds no value in any of
    them (every cell NULL / NaN)."""
    if frame is None or frame.empty:
        return True
    have = [c for c in cols if c in frame.columns]
    return not have or not frame[have].notna().to_numpy().any()


def sentence(title: str, item: NotDrawn) -> str:
    why = item.why.rstrip(".")
    if why.lower().startswith("not computed"):
        why = why[len("not computed"):].lstrip(" :")
    # (not the words "not drawn": the writer's FIGURE_FAILED marks a figure that crashed)
    return f"{title} — no figure: {why}."


def figure_md(title: str, item) -> str:
    if isinstance(item, NotDrawn):
        return f"_{sentence(title, item)}_"
    return f"![{title}]({item.name})"


def figure_html(title: str, item) -> str:
    if isinstance(item, NotDrawn):
        return f'<p class="note figure-not-drawn">{escape(sentence(title, item))}</p>'
    import base64

    b64 = base64.b64encode(item.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{escape(title)}" src="data:image/png;base64,{b64}">'
            f"<figcaption>{escape(title)}</figcaption></figure>")
