"""The LLM gateway: the only door to the models (see client.py)."""

from tasks.gateway.client import CallResult, Gateway, parse_structured

__all__ = ["CallResult", "Gateway", "parse_structured"]
