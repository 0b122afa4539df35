"""The episode engine's judges, one module each (``tasks/judges/<name>.py``), named by the
benchmark spec. The protocol is in ``base.py``."""
