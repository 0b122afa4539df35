"""CPU cost of one provider batch line, built from litellm's live request.

    .venv/bin/python perf/batch_lines.py [--lines 300]

A batch line is the request litellm's live path builds for the call (tasks/gateway/batch_wire.py
``live_request``: litellm's ``completion`` stopped at its pre-send logging hook). For a paper
run's judge calls on each batch provider (a structured Ben-Util verdict with a few hundred
words of prompt) it prints the CPU milliseconds per line of that capture, next to litellm's
own ``return_raw_request`` (the same hook, but through litellm's exception mapping and
failure logging), and what a million lines cost at each. Nothing is sent anywhere.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")

from pydantic import BaseModel  # noqa: E402

from tasks.config import ModelSpec  # noqa: E402
from tasks.gateway.batch_wire import WIRES, batch_route  # noqa: E402
from tasks.gateway.transport import _litellm, request_kwargs  # noqa: E402


class Verdict(BaseModel):
    evidence: str
    fulfilled: bool


MODELS = [("openai/gpt-5.2", {"reasoning_effort": "none"}), ("openai/gpt-4o", {}),
          ("anthropic/claude-haiku-4-5", {}), ("anthropic/claude-sonnet-4-20250514", {}),
          ("gemini/gemini-2.5-flash", {"thinking_budget": 0}),
          ("gemini/gemini-3-flash-preview", {"reasoning_effort": "minimal"})]


def spec(model: str, over: dict) -> ModelSpec:
    fields = dict(name="m", model=model, api_base=None, api_key_env=None, temperature=0.0,
                  top_p=None, max_tokens=512, seed=None, stop=None, max_concurrency=16, rpm=None,
                  timeout_s=60.0, max_retries=0, structured="json_schema", mode="chat",
                  where="models.benutil_judge")
    return ModelSpec(**{**fields, **over})


def messages(i: int) -> list[dict]:
    text = " ".join(f"word{j}" for j in range(300))
    return [{"role": "system", "content": "You judge one checklist item."},
            {"role": "user", "content": f"Item {i}: {text}"}]


def cpu_ms(fn, n: int) -> float:
    fn(0)  # warm: imports, client caches
    t = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - t) / n * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=300)
    args = p.parse_args()
    from litellm.types.utils import CallTypes
    from litellm.utils import return_raw_request

    _litellm()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.lines} lines each")
    print(f"{'model':40} {'capture ms':>10} {'raw_request ms':>15} {'1M lines (h)':>13}")
    for model, over in MODELS:
        s = spec(model, over)
        wire = WIRES[batch_route(model)[0]]

        def capture(i, s=s, wire=wire):
            kwargs, msgs = request_kwargs(s, "benutil_judge", messages(i), Verdict, "sk-perf")
            wire.line(f"cob0000000000000000-{i}", wire.request(kwargs, msgs))

        def raw(i, s=s):
            kwargs, msgs = request_kwargs(s, "benutil_judge", messages(i), Verdict, "sk-perf")
            kwargs.pop("api_key")  # return_raw_request passes its own
            got = return_raw_request(CallTypes.completion, {**kwargs, "messages": msgs})
            assert got.get("raw_request_body"), got.get("error")

        a = cpu_ms(capture, args.lines)
        b = cpu_ms(raw, max(20, args.lines // 5))
        print(f"{model:40} {a:10.2f} {b:15.2f} {a * 1e6 / 3.6e6:13.2f}")


if __name__ == "__main__":
    main()
