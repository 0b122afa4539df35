"""The built-in target policies, one module per name (``llm.py``: a configured target model).
What a target policy is (``respond``, ``Reply``, the run's seats) is the ground floor's:
tasks/core/targets.py."""
