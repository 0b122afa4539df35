"""User policies of the episode engine, one module each (``tasks/users/<name>.py``), named by
a condition of the benchmark spec. The protocol is in ``base.py``."""
