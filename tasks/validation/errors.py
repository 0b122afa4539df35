"""The one error of human validation: a user-fixable problem, printed as one line."""


class ValidationError(Exception):
    """A user-fixable problem; the CLI prints it as one line (exit 2)."""
