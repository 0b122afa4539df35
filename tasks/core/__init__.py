"""The ground floor (docs/ARCHITECTURE.md, "Layers"): what every part of the engine shares and
no part of it owns. The component registry (``registry.py``), the run's work (``items.py``),
the spec's models (``spec.py``), what a stage is (``stages.py``), the sample keys
(``keys.py``), and the protocols every component of a kind follows: user policies
(``users.py``), target policies and seats (``targets.py``), judges (``judges.py``) and a judge
panel's votes and agreement (``votes.py``). Its modules import nothing above the ground floor (tests/test_import_graph.py):
the components, the loops and the benchmarks stand on them, not the other way round.
"""
