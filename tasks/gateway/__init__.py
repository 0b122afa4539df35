"""The LLM gateway: the only door to the models (see client.py)."""

from tasks.gateway.client import CallResult, Gateway, ServerUnavailable, parse_structured

__all__ = ["CallResult", "Gateway", "ServerUnavailable", "parse_structured"]
