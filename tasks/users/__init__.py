"""User policies of the episode engine, one module each (``tasks/users/<name>.py``), named by
a condition of the benchmark spec. Their protocol is the ground floor's: tasks/core/users.py."""
