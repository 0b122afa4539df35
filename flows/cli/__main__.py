"""``python -m flows.cli ...``: the ``carryon`` command line without its console script."""

from flows.cli import main

if __name__ == "__main__":
    main()
