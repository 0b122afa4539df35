"""``carryon check`` (issue 52, item 7; tasks/engine/check.py): one real request per distinct
model entry with its role's settings, against the loopback fakes; an unreachable server, a
missing key and a rejected parameter each give one line naming the entry; with ``--batch`` a
one-line batch per batch provider. ``test_check_real_providers`` runs it against the real
providers when their keys are set (marked ``real_provider``, skipped otherwise)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from typer.testing import CliRunner

from flows.cli import app
from tasks.config import load_config
from tasks.engine.check import entries
from tests.support.factories import base_config

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def _config(tmp_path, cfg) -> Path:
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rows(output: str) -> dict[str, list[str]]:
    lines = output.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("entry "))
    out = {}
    for ln in lines[head + 2:]:
        if not ln.startswith("models."):
            break
        cols = re.split(r"\s{2,}", ln.strip())
        out[cols[0]] = cols
    return out


def test_one_row_per_model_entry_and_all_pass(tmp_path, llm_server):
    cfg = base_config(llm_server.api_base, tmp_path / "home")
    cfg["models"]["defaults"]["price"] = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    path = _config(tmp_path, cfg)
    got = entries(load_config(path))
    # The helper model is one request for the four roles that send it alike; the judge's two
    # roles too; every other entry its own.
    wheres = sorted(sorted(e.where) for e in got)
    assert wheres == sorted(sorted(w) for w in [
        ["models.benutil_judge", "models.safety_judge"],
        ["models.intent_rewriter", "models.decomposer", "models.merger", "models.misuse_filter"],
        ["models.ensemble[0]"], ["models.ensemble[1]"], ["models.ensemble[2]"],
        ["models.targets[0]"], ["models.user_simulator"], ["models.wildguard"]])
    r = invoke("check", "--config", str(path))
    assert r.exit_code == 0, r.output
    rows = _rows(r.output)
    assert len(rows) == len(got) == llm_server.counts["total"]
    for cols in rows.values():
        assert cols[3:6] == ["not needed", "yes", "yes"], cols  # key, params, parsed
    # Structured roles ask in the entry's structured mode, with the role's max_tokens.
    judge = next(q for q in llm_server.requests if q["role"] == "benutil_judge")
    assert judge["body"]["response_format"]["type"] == "json_schema"
    assert judge["body"]["max_tokens"] == 256
    assert re.search(r"^8 request\(s\), 8 passed; cost \$0\.0\d+$", r.output, re.M), r.output
    # Nothing cached: a second check sends every request again.
    assert invoke("check", "--config", str(path)).exit_code == 0
    assert llm_server.counts["total"] == 2 * len(got)


def test_unreachable_server_missing_key_and_rejected_parameter_each_one_line(
        tmp_path, llm_server, monkeypatch):
    monkeypatch.delenv("CHECK_TEST_KEY", raising=False)
    cfg = base_config(llm_server.api_base, tmp_path / "home")
    m = cfg["models"]
    m["ensemble"][0]["api_base"] = "http://127.0.0.1:9/v1"  # nothing listens there
    m["ensemble"][1]["api_key_env"] = "CHECK_TEST_KEY"  # not set

    def refuse(body):  # what the gpt-5 family says to max_tokens (the fake refuses it here)
        if "max_tokens" in body:
            return web.json_response({"error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this "
                           "model. Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error", "param": "max_tokens",
                "code": "unsupported_parameter"}}, status=400)
        return "OK"

    llm_server.scripts["targets"] = refuse
    r = invoke("check", "--config", str(_config(tmp_path, cfg)))
    assert r.exit_code == 1, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 3, r.output
    src = str(tmp_path / "check.yaml")
    by_entry = {re.match(rf"error: {re.escape(src)}: (\S+) ", ln).group(1): ln for ln in errors}
    assert set(by_entry) == {"models.ensemble[0]", "models.ensemble[1]", "models.targets[0]"}
    assert "(openai/test-ens-1): retries_exhausted: " in by_entry["models.ensemble[0]"]
    assert "Connection" in by_entry["models.ensemble[0]"] or "connect" in by_entry["models.ensemble[0]"]
    assert by_entry["models.ensemble[1]"].endswith(
        "(openai/test-ens-2): no API key: environment variable CHECK_TEST_KEY is not set")
    assert "api_error: " in by_entry["models.targets[0]"]
    assert "Unsupported parameter: 'max_tokens'" in by_entry["models.targets[0]"]
    rows = _rows(r.output)
    assert rows["models.ensemble[1]"][3:6] == ["missing", "-", "-"]  # never sent
    assert rows["models.targets[0]"][4:6] == ["no", "-"]
    assert llm_server.counts["test-ens-2"] == 0 and llm_server.counts["ensemble"] == 1  # ens-3
    assert "CHECK_TEST_KEY=" not in r.output


def test_batch_sends_a_one_line_batch_per_batch_provider(tmp_path, llm_server):
    cfg = base_config(llm_server.api_base, tmp_path / "home")
    for role in ("benutil_judge", "safety_judge"):
        cfg["models"][role].update(batch=True, batch_poll_s=0.05)
    r = invoke("check", "--config", str(_config(tmp_path, cfg)), "--batch")
    assert r.exit_code == 0, r.output
    assert llm_server.counts["POST /v1/batches"] == 1 and llm_server.counts["batch_lines"] == 1
    line = next(ln for ln in r.output.splitlines() if "batch (structured)" in ln)
    assert line.startswith("models.benutil_judge, models.safety_judge ")


# The shipped configs' providers, and the variables their entries name.
REAL_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "TOGETHERAI_API_KEY")


@pytest.mark.real_provider
def test_check_real_providers(tmp_path):
    """``configs/paper.yaml``'s entries of the providers whose keys are set (WildGuard and the
    rest left out), checked for real. Costs cents."""
    keys = [k for k in REAL_KEYS if os.environ.get(k)]
    if not keys:
        pytest.skip("no provider key set (" + ", ".join(REAL_KEYS) + ")")
    cfg = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    cfg["home"] = str(tmp_path / "home")
    for role, value in list(cfg["models"].items()):
        if role == "defaults":
            continue
        kept = [e for e in (value if isinstance(value, list) else [value])
                if e.get("api_key_env") in keys]
        if not kept:
            del cfg["models"][role]
        else:
            cfg["models"][role] = kept if isinstance(value, list) else kept[0]
    r = invoke("check", "--config", str(_config(tmp_path, cfg)))
    print(r.output)
    assert r.exit_code == 0, r.output
