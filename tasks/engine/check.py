"""``carryon check``: before a long run, the smallest real request to every distinct model
entry of a config, with its role's real settings; with ``batch=True`` also a one-line batch
per batch provider. Costs cents.

A request is what a run would send for the role, through the same gateway (request building,
structured output, parsing, pricing): the entry's model, api_base, key, max_tokens,
temperature, seed, reasoning controls and structured-output mode; a role that answers in a
schema is asked for a one-field schema in that mode; WildGuard in its own mode gets a text
completion. Only the retries are off (one attempt: a check reports, it does not wait out a
provider) and nothing is cached (a gateway on a temporary folder): every row is a request
sent now. Entries the same in all of this are checked once, their config paths on one row.

Each row says: the key (set, missing or not needed, never its value), whether the provider
accepted the parameters, whether the answer parsed, latency and cost. Each failure is one line
that names the entry and gives the provider's own message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from tasks.core import registry
from tasks.gateway import Gateway
from tasks.gateway.batch_wire import wire_for
from tasks.gateway.servers import ServerUnavailable
from tasks.model_entry import GatewayConfig, ModelSpec

PROMPT = "This is a connectivity check. Reply with the single word OK."
STRUCTURED = 'This is a connectivity check. Reply with the JSON object {"ok": true}.'
WILDGUARD = ("<s><|user|>\n[INST] Connectivity check.\n\nHuman user:\nHello\n\nAI assistant:\n"
             "Hello!\n\n---\n\nAnswers: [/INST]\n<|assistant|>\n")
# Provider answers that mean the request's parameters were accepted (the answer itself may
# still be unusable); any other failure is a refusal of the request or no answer at all.
ANSWERED = ("invalid_output", "empty_output", "reasoning_exhausted", "content_blocked")


class CheckAnswer(BaseModel):
    ok: bool


@dataclass
class Entry:
    """One distinct request: a model entry as a role sends it (``kind``: chat, structured or
    text), and the config paths that send it."""

    role: str
    spec: ModelSpec
    kind: str
    where: list[str] = field(default_factory=list)


@dataclass
class Checked:
    entry: Entry
    key: str
    params: str = "-"  # yes / no / - (never reached the provider)
    parsed: str = "-"
    latency_s: float | None = None
    cost_usd: float | None = None
    error: str | None = None
    batch_id: str | None = None

    def row(self) -> dict:
        e = self.entry
        return {"entry": ", ".join(e.where), "model": e.spec.model, "request": e.kind,
                "key": self.key, "params_accepted": self.params, "output_parsed": self.parsed,
                "latency_s": None if self.latency_s is None else round(self.latency_s, 2),
                "cost_usd": self.cost_usd}

    def line(self, source: str) -> str | None:
        """The failure's one line, naming the entry; None when it passed."""
        if self.error is None:
            return None
        text = " ".join(self.error.split())
        return f"{source}: {self.entry.where[0]} ({self.entry.spec.model}): {text}"


def entries(cfg) -> list[Entry]:
    """Every configured model entry, one per distinct request (its where's merged)."""
    cfg.spec  # noqa: B018 (loads the benchmark: its components declare their roles)
    out: dict[tuple, Entry] = {}
    by_role = cfg.all_specs()
    # In the spec's order of roles (the config's own order follows component registration).
    order = {r: i for i, r in enumerate(cfg.spec.config_roles())}
    for role in sorted(by_role, key=lambda r: order.get(r, len(order))):
        specs = by_role[role]
        known = registry.role(role)
        for s in specs:
            kind = ("text" if s.mode == "wildguard" else
                    "structured" if known is not None and known.schema else "chat")
            same = dataclasses.replace(s, name="", where="", family=None, batch=False,
                                       batch_size=1, batch_poll_s=1.0, price=None)
            e = out.setdefault((same, kind), Entry(role, s, kind))
            e.where.append(s.where)
    return list(out.values())


def key_status(spec: ModelSpec) -> tuple[str, str | None]:
    """(set | missing | not needed, why missing); the key's value is never read out."""
    if os.environ.get("CARRYON_API_KEY"):
        return "set (CARRYON_API_KEY)", None
    if spec.api_key_env:
        if os.environ.get(spec.api_key_env):
            return f"set ({spec.api_key_env})", None
        return "missing", f"no API key: environment variable {spec.api_key_env} is not set"
    if spec.api_base:
        return "not needed", None  # a local server gets a placeholder (tasks/model_keys.py)
    from tasks.model_keys import litellm_missing

    provider, missing = litellm_missing(spec.model)
    if missing:
        return "missing", (f"no API key: {', '.join(missing)} not set (litellm's {provider} "
                           "provider reads it)")
    return "set", None


async def _ask(gw: Gateway, e: Entry, spec: ModelSpec):
    if e.kind == "text":
        return await gw.text(spec, e.role, WILDGUARD)
    if e.kind == "structured":
        return await gw.chat(spec, e.role, [{"role": "user", "content": STRUCTURED}],
                             schema=CheckAnswer, live=not spec.batch)
    return await gw.chat(spec, e.role, [{"role": "user", "content": PROMPT}], live=not spec.batch)


async def _one(gw: Gateway, e: Entry, spec: ModelSpec, timeout_s: float) -> Checked:
    key, why = key_status(e.spec)
    c = Checked(e, key)
    if why is not None:
        c.error = why
        return c
    try:
        r = await asyncio.wait_for(_ask(gw, e, spec), timeout_s)
    except asyncio.TimeoutError:
        c.error = f"no answer within {timeout_s:g} s"
        return c
    except ServerUnavailable as err:
        c.error = str(err)
        return c
    c.latency_s, c.cost_usd, c.batch_id = r.latency_s, r.cost_usd, r.batch_id
    answered = r.ok or r.error_kind in ANSWERED
    c.params = "yes" if answered else "no"
    c.parsed = "yes" if r.ok else ("no" if answered else "-")
    if not r.ok:
        c.error = f"{r.error_kind}: {r.error}"
    elif spec.batch and not r.batch_id:
        c.error = "the batch did not answer it (sent live instead: see the log for why)"
    return c


async def check(cfg, batch: bool = False, timeout_s: float = 120.0,
                batch_timeout_s: float = 1800.0) -> tuple[list[Checked], list[Checked]]:
    """The live checks (one per distinct entry) and, with ``batch``, a one-line batch per
    batch provider (the first ``batch: true`` entry of each)."""
    todo = entries(cfg)
    with tempfile.TemporaryDirectory(prefix="carryon-check-") as tmp:
        live = await _checks(Path(tmp) / "live", [
            (e, dataclasses.replace(e.spec, max_retries=0, batch=False)) for e in todo],
            timeout_s)
        batched: list[Checked] = []
        if batch:
            firsts: dict[str, Entry] = {}
            for e in todo:
                wire = wire_for(e.spec.model)
                if e.spec.batch and e.kind != "text" and wire is not None:
                    firsts.setdefault(type(wire).__name__, e)
            # A cache of their own: the live checks' answers would be read back, not batched.
            batched = await _checks(Path(tmp) / "batch", [
                (e, dataclasses.replace(e.spec, max_retries=0, batch_size=1))
                for e in firsts.values()], batch_timeout_s, batches=True)
    return live, batched


async def _checks(folder: Path, todo: list[tuple[Entry, ModelSpec]], timeout_s: float,
                  batches: bool = False) -> list[Checked]:
    gw = Gateway(folder / "cache", "check", GatewayConfig(workers=0, max_connection_failures=10_000))
    try:
        if batches:
            from warehouse import Warehouse

            gw.batch_store = Warehouse(folder / "check.duckdb").init()
        return list(await asyncio.gather(*(_one(gw, e, s, timeout_s) for e, s in todo)))
    finally:
        gw.close()


def report(cfg, live: list[Checked], batched: list[Checked]) -> tuple[list[dict], list[str]]:
    """The table's rows (batch rows marked) and the failure lines."""
    source = cfg.source_path or "config"
    rows = [c.row() for c in live] + [{**c.row(), "request": f"batch ({c.entry.kind})"}
                                      for c in batched]
    lines = [ln for c in live + batched if (ln := c.line(source))]
    return rows, lines
