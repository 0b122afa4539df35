"""The single-turn user: the item's opening prompt, then nothing (OpenSafeIntent's setting,
and a disambiguated question's)."""

from __future__ import annotations

from tasks.core.registry import user_policy
from tasks.core.users import SINGLE_TURN, Stop, UserPolicy


@user_policy("single_turn")
class SingleTurn(UserPolicy):
    name = "single_turn"
    roles: tuple[str, ...] = ()

    async def next(self, env, state):
        return Stop(SINGLE_TURN)

    def calls(self, condition) -> dict[str, int]:
        return {}


POLICY = SingleTurn()
