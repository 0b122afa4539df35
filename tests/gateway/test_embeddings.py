"""Embeddings through the gateway: cached by content like chat calls (a rerun sends nothing),
one vector per text in order, provenance recorded, failures returned and never cached."""

from __future__ import annotations

import asyncio

import pytest

from tasks.gateway.embed import embed, embed_key
from tests.support.gateway import gateway, spec_for  # noqa: F401  (gateway is a fixture)


def test_embeddings_are_cached_by_content(gateway, llm_server):
    spec = spec_for(llm_server)
    texts = ["I need my own door open.", "A second text."]
    first = asyncio.run(embed(gateway, spec, "embedder", texts))
    assert first.ok and not first.cached and len(first.vectors) == 2
    assert all(len(v) == 8 for v in first.vectors) and first.vectors[0] != first.vectors[1]
    again = asyncio.run(embed(gateway, spec, "embedder", texts))
    assert again.cached and again.vectors == first.vectors and again.call_hash == first.call_hash
    assert llm_server.counts["embedder"] == 1  # the rerun sent nothing
    # Order is kept; a different text list is a different key.
    swapped = asyncio.run(embed(gateway, spec, "embedder", texts[::-1]))
    assert swapped.vectors == first.vectors[::-1] and llm_server.counts["embedder"] == 2
    # Generation settings do not shape an embedding: not in the key.
    assert embed_key(spec_for(llm_server, temperature=1.0, max_tokens=9), texts) == first.call_hash
    rows = {r["call_hash"]: r for r in gateway.drain_records()}
    assert rows[first.call_hash]["role"] == "embedder" and rows[first.call_hash]["error"] is None


def test_a_failed_embedding_is_data_and_not_cached(gateway, llm_server):
    spec = spec_for(llm_server, max_retries=1)
    llm_server.faults.error500 = 1.0
    r = asyncio.run(embed(gateway, spec, "embedder", ["x"]))
    assert not r.ok and r.error_kind == "retries_exhausted" and r.vectors is None
    llm_server.faults.error500 = 0.0
    ok = asyncio.run(embed(gateway, spec, "embedder", ["x"]))
    assert ok.ok and not ok.cached  # the failure was not cached: asked again


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        asyncio.run(embed(None, None, "embedder", []))


def test_per_token_vectors_are_mean_pooled_and_junk_is_refused():
    from tasks.gateway.embed import pooled

    assert pooled([1, 2.5]) == [1.0, 2.5]
    assert pooled([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]) == [3.0, 2.0]  # by hand: means per column
    for junk in ([], None, [[1.0], [1.0, 2.0]], [True, 1.0], [[1.0], "x"], [[]], "1,2"):
        assert pooled(junk) is None, junk
