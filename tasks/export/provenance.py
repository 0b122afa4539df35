"""Each input's source, licence and citation, as its benchmark declares them in
``sources.yaml`` beside its spec (one entry per name of the spec's ``sources:``), and which
inputs a home's runs used. A spec without the file (a study's own) declares nothing: its
inputs are named with licence ``unknown`` and treated as not redistributable."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tasks.config_error import ConfigError

SOURCES_FILE = "sources.yaml"


@dataclass(frozen=True)
class Source:
    name: str
    title: str
    license: str = "unknown"            # a Hugging Face licence id (apache-2.0, cc-by-4.0, other)
    license_name: str | None = None     # what "other" means
    redistribute: bool = False          # may its text be shared? (unknown: no)
    url: str | None = None
    citation: str | None = None
    read: str | None = None             # where the licence was read


@dataclass(frozen=True)
class Provenance:
    paper: dict = field(default_factory=dict)   # {title, url, citation}: what the benchmark reproduces
    sources: dict = field(default_factory=dict)  # name -> Source
    always: tuple = ()                           # inputs every run uses
    withhold: tuple = ()                         # "table.column": an input's text in its own tables

    def source(self, name: str) -> Source:
        return self.sources.get(name) or Source(name, f"{name} (not declared in {SOURCES_FILE})")


def provenance(spec) -> Provenance:
    """The spec's declaration (an empty one when it has no sources.yaml); ConfigError naming
    the file and the field for a malformed one."""
    if not spec.source_path:
        return Provenance()
    path = Path(spec.source_path).parent / SOURCES_FILE
    if not path.is_file():
        return Provenance()
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a mapping of keys, not {type(doc).__name__}")
    sources = {}
    for name, entry in (doc.get("sources") or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("title"), str):
            raise ConfigError(f"{path}: sources.{name}: a mapping with at least a title")
        unknown = sorted(set(entry) - set(Source.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"{path}: sources.{name}.{unknown[0]}: not a field of a source")
        if not isinstance(entry.get("redistribute", False), bool):
            raise ConfigError(f"{path}: sources.{name}.redistribute: true or false")
        sources[name] = Source(name=name, **entry)
    return Provenance(paper=doc.get("paper") or {}, sources=sources,
                      always=tuple(doc.get("always") or ()), withhold=tuple(doc.get("withhold") or ()))


def inputs_used(prov: Provenance, configs: list[dict]) -> list[Source]:
    """The sources the runs' configs read (``dataset.source``, the sample by default), and the
    ones every run reads, each once, in the declaration's order."""
    names = {(c.get("dataset") or {}).get("source") or "sample" for c in configs} | set(prov.always)
    order = list(prov.sources)
    return [prov.source(n) for n in sorted(names, key=lambda n: (n not in order,
                                                              order.index(n) if n in order else 0, n))]
