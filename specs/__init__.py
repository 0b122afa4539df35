"""The built-in benchmark specs (``<name>.yaml``), read by tasks/bench.py; a package so an
installed copy carries them."""
