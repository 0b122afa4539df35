"""The episode engine: a benchmark's items, played as episodes (a user policy and a target
until a stop rule fires), judged turn by turn by the spec's judges.

- ``items``    the spec's loader, selection (limit, shard) and the ``bench_items`` table;
- ``episode``  one episode, and the stage's batches (``episodes`` / ``episode_turns``);
- ``verdicts`` the judges of the spec over stored episodes (``verdict_sets`` / ``verdicts``);
- ``plan``     calls per role before anything is spent.
"""
