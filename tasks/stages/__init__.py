"""The built-in stages, one module per name (``episodes``, ``verdicts``, ``report``): the
registry finds them here. What a stage is (``Stage``, its phases, the roles helpers) is on the
ground floor, tasks/core/stages.py, because the spec models check a spec's stages against it.
"""
