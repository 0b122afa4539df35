"""Reading dataset files (fields.py: the input-file checks, JSON and text fields, ``DataError``
naming the file, the row and the field). The registry looks here for built-in dataset
loaders by name; every loader so far is a benchmark's own, beside its spec."""
