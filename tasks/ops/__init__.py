"""Operations: the servers and processes the project starts, watches and stops, as opposed to
the benchmark's own work. The offline local model server (``local_model``), the long-lived
Prefect server with its deployments and workers (``prefect_server``), the temporary Prefect
server of ``carryon run`` (``ephemeral``), the pid/record/port helpers they share
(``daemons``), the parent-death signal of a run's child processes (``parent_death``) and
Ctrl-C / SIGTERM during a run (``interrupt``).
Nothing here imports the benchmark's modules; importing the package itself imports nothing.
"""
