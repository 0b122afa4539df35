"""A run leaves the harness (issue 54, docs/export.md): ``hf.py`` writes a folder ready to
upload as a Hugging Face dataset (Parquet configs and a dataset card, ``card.py``), read back
into a fresh home by ``importer.py``; ``inspect_logs.py`` writes one Inspect AI eval log per
benchmark and target. ``tables.py`` finds what to export in any warehouse (tables by their
keys, the benchmark's views by its spec), ``provenance.py`` reads each input's licence and
citation from the ``sources.yaml`` beside the benchmark's spec, ``run_info.py`` the run's
provenance with the config's key names left out. Nothing here asks which benchmark it is."""
