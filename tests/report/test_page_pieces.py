"""A page written in pieces (its browser data a JsonArray read a chunk at a time) is the page
built whole: the same bytes, the same escaping."""

import json

from tasks.report.page_base import JsonArray, json_for_script, page, page_pieces


def _rows():
    return [{"id": i, "text": f"</script><img src=x> & {i} \u00e9", "n": [i, None, 1.5]}
            for i in range(7)]


def test_streamed_json_equals_the_whole():
    rows = _rows()
    for size in (1, 3, 100):
        streamed = {"conversations": JsonArray(len(rows), lambda s=size: (
            rows[i:i + s] for i in range(0, len(rows), s))), "items": {"q": {"1": "a<b"}},
            "truncated": False, "max": 3000}
        whole = {"conversations": rows, "items": {"q": {"1": "a<b"}}, "truncated": False,
                 "max": 3000}
        text = json_for_script(streamed)
        assert text == json_for_script(whole)
        assert "<" not in text and ">" not in text and "&" not in text
        assert json.loads(text) == whole
        assert "".join(page_pieces("t", ["<p>x</p>"], streamed, "1;")) == page(
            "t", ["<p>x</p>"], whole, "1;")


def test_empty_array_and_its_length():
    arr = JsonArray(0, lambda: iter([[]]))
    assert len(arr) == 0
    assert json_for_script({"conversations": arr}) == json_for_script({"conversations": []})
