"""Human validation of the user simulator and the judges (paper App. A.4, B.1, B.3.1):
draw stratified samples (``sample``), write annotation pages (``page``), import the
annotators' exports (``annotations``) and measure agreement (``agreement``, ``report``).
See docs/validation.md."""

KINDS = ("naturalness", "benutil", "safety")


class ValidationError(Exception):
    """A user-fixable problem; the CLI prints it as one line (exit 2)."""
