"""Report sections of the episode engine's benchmarks (one module per section, found by name)."""
