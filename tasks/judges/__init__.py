"""The episode engine's judges, one module each (``tasks/judges/<name>.py``), named by the
benchmark spec. Their protocol is the ground floor's: tasks/core/judges.py."""
