"""The configuration error, in a leaf module: tasks/config.py and tasks/model_env.py both raise
it, and tasks/config.py imports tasks/model_env.py (import it from tasks.config as before)."""


class ConfigError(Exception):
    """A configuration problem a user must fix; the message names the file and field."""
