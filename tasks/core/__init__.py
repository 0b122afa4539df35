"""The ground floor (docs/ARCHITECTURE.md, "Layers"): what every part of the engine shares and
no part of it owns. The component registry (``registry.py``), the run's work (``items.py``),
the spec's models (``spec.py``), what a stage is (``stages.py``) and the sample keys
(``keys.py``). Its modules import nothing above the ground floor (tests/test_import_graph.py):
the components, the loops and the benchmarks stand on them, not the other way round.
"""
