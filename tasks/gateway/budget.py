"""A spending cap (``budget_usd``): the gateway never lets money spent plus money committed
pass it.

``spent`` is what this home has paid for model calls: the earlier runs' recorded cost
(``llm_calls``, requests sent, not cache hits, which the run context sums when it opens the
gateway) plus this run's answers as they come back. ``held`` is money committed and not yet
billed: each live request in flight at an upper bound of its price (its prompt at 3
characters a token, its whole ``max_tokens`` as answer), and each provider batch submitted
and not yet read, at the same bound per line at the batch price. A request or a batch is let
go only if ``spent + held`` plus its own bound stays within the cap; otherwise the gateway
stops the run as Ctrl-C does (tasks/ops/interrupt.py ``stop``): nothing new is sent, what is
in flight finishes, and the run ends with ``line()``.

A batch resumed from an earlier run is held whatever the cap says: it was submitted and will
be billed; only what is not yet sent can be stopped. The gateway takes the cap as numbers
(the run context reads the config and the warehouse), never the config.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.gateway.prices import rates

# Characters per prompt token for a bound (the plan estimates with 4, tasks/engine/plan_tokens.py):
# fewer characters a token than most tokenizers give English, so a held price rarely falls
# short of the bill.
CHARS_PER_TOKEN_BOUND = 3
MESSAGE_TOKENS = 4  # the chat format's own tokens per message


@dataclass
class Budget:
    cap_usd: float
    spent_before: float = 0.0  # this home's recorded spend when the run opened
    spent_run: float = 0.0  # billed in this run
    held: float = 0.0  # committed, not yet billed
    stopped: bool = False  # a request or batch was refused: the run is stopping

    @property
    def spent(self) -> float:
        return self.spent_before + self.spent_run

    def hold(self, usd: float, force: bool = False) -> bool:
        """Commit ``usd`` if it fits under the cap (or ``force``: money already committed
        elsewhere); False, and nothing held, if it does not."""
        if not force and (self.stopped or self.spent + self.held + usd > self.cap_usd):
            self.stopped = True
            return False
        self.held += usd
        return True

    def settle(self, held: float, billed: float) -> None:
        """A commitment ended: ``held`` released, ``billed`` (what it cost) spent."""
        self.held = max(0.0, self.held - held)
        self.spent_run += billed

    def line(self) -> str:
        """The one line a stopped run ends with: what was spent and what is left."""
        left = max(0.0, self.cap_usd - self.spent)
        return (f"budget_usd ${self.cap_usd:,.2f}: the next request could pass it; spent "
                f"${self.spent:,.2f} (this home's earlier runs ${self.spent_before:,.2f}, this "
                f"run ${self.spent_run:,.2f}), ${left:,.2f} left; rerun with a larger "
                "--budget-usd (or none) to go on: answers already paid for are not paid again")


def prompt_chars(kwargs: dict, messages: list | None, prompt: str | None) -> int:
    """Characters a request sends as prompt: its messages (or text prompt) and its schema."""
    n = len(prompt or "")
    for m in messages or []:
        n += len(str(m.get("content") or "")) + MESSAGE_TOKENS * CHARS_PER_TOKEN_BOUND
    rf = kwargs.get("response_format")
    return n + (len(str(rf)) if rf else 0)


def bound(spec, chars: int, batch: bool = False) -> float:
    """The most one request of ``chars`` prompt characters can cost: its prompt at
    ``CHARS_PER_TOKEN_BOUND`` and its whole ``max_tokens`` as answer, at the entry's rates
    (the batch price for a batch line). 0 for an unpriced model (a run with a cap refuses to
    start with one: tasks/engine/run.py)."""
    r = rates(spec)
    if not r.priced:
        return 0.0
    usd = chars / CHARS_PER_TOKEN_BOUND * r.input + spec.max_tokens * r.output
    return usd * (1 - r.batch_discount) if batch else usd
