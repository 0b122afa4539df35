"""Dataset loaders of the episode engine's benchmarks (one module per source, found by name)."""
