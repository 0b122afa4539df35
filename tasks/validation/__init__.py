"""Human validation of the judges and the user simulator (paper App. A.4, B.1, B.3.1) over any
benchmark's episodes and verdicts: draw stratified samples (``sample``), write annotation
pages (``page``), import the annotators' exports (``annotations``) and measure agreement
(``agreement``, ``report``). What is sampled, shown and measured is a *kind*, registered
like every component (``@validation_kind(name)``): Ben-Util's and safety's agreement with
people are built in (tasks/validation/kinds/), over the verdicts of the config's benchmark;
a benchmark's own study sits beside its spec (CarryOnBench's naturalness of simulated user
turns). See docs/validation.md."""

from tasks.validation.errors import ValidationError
from tasks.validation.kind import ValidationKind

__all__ = ["ValidationError", "ValidationKind"]
