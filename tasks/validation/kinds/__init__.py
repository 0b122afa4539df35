"""The built-in kinds of human validation, one module per name (``carryon validate --kind``):
``benutil`` (people mark a conversation's checklist questions present or absent, compared
with Ben-Util's verdicts) and ``safety`` (people score a model turn 1-5, compared with the
safety judge), over any benchmark's verdicts. A benchmark's own kind sits beside its spec."""
