"""The assembled report's HTML page (tasks/report/episode_page.py): the sections' Markdown
as escaped HTML, whatever a section writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.report.episode_page import md_html
from tasks.report.md_common import md_lines


def test_sections_markdown_as_html():
    text = "\n".join(["## Utility <per target>", "", "Text with `code` and **bold** & more.", "",
                      *md_lines(["target", "value"], [["a|b", "-"], ["<img src=x>", "0.5"]]),
                      "", "- one", "- `two`"])
    assert md_html(text) == [
        "<h2>Utility &lt;per target&gt;</h2>",
        "<p>Text with <code>code</code> and <strong>bold</strong> &amp; more.</p>",
        "<table><thead><tr><th>target</th><th>value</th></tr></thead><tbody>"
        "<tr><td>a|b</td><td>-</td></tr><tr><td>&lt;img src=x&gt;</td><td>0.5</td></tr>"
        "</tbody></table>",
        "<ul><li>one</li><li><code>two</code></li></ul>"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="|-#`* \n<>&:\"'xy", max_size=60))
def test_any_markdown_renders_and_no_markup_gets_through(text):
    out = "".join(md_html(text))
    for tag in ("<x", "<y", "<>", "<'", '<"', "<<", "<&", "<:", "<|", "<-", "<#", "<*", "<`",
                "< ", "<\n"):
        assert tag not in out
