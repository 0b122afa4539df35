"""Each input's source, licence and citation, as its benchmark declares them in
``sources.yaml`` beside its spec (one entry per name of the spec's ``sources:``), and which
inputs a home's runs used. A spec without the file (a study's own) declares nothing: its
inputs are named with licence ``unknown`` and treated as not redistributable."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.config_error import ConfigError

SOURCES_FILE = "sources.yaml"


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = ""                      # its key in the spec's `sources:`
    title: str
    license: str = "unknown"            # a Hugging Face licence id (apache-2.0, cc-by-4.0, other)
    license_name: str | None = None     # what "other" means
    redistribute: bool = False          # may its text be shared? (unknown: no)
    url: str | None = None
    citation: str | None = None
    read: str | None = None             # where the licence was read


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    paper: dict = Field(default_factory=dict)         # {title, url, citation}: what it reproduces
    sources: dict[str, Source] = Field(default_factory=dict)
    always: list[str] = Field(default_factory=list)   # inputs every run uses
    withhold: list[str] = Field(default_factory=list)  # "table.column": an input's text

    def source(self, name: str) -> Source:
        return self.sources.get(name) or Source(
            name=name, title=f"{name} (not declared in {SOURCES_FILE})")


def provenance(spec) -> Provenance:
    """The spec's declaration (an empty one when it has no sources.yaml); ConfigError naming
    the file and the field for a malformed one."""
    path = Path(spec.source_path).parent / SOURCES_FILE if spec.source_path else None
    if path is None or not path.is_file():
        return Provenance()
    try:
        prov = Provenance.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: cannot read: {' '.join(str(e).split())[:200]}") from None
    except ValidationError as e:
        first = e.errors()[0]
        raise ConfigError(f"{path}: {'.'.join(map(str, first['loc'])) or '(top level)'}: "
                          f"{first['msg']}") from None
    return prov.model_copy(update={"sources": {
        n: s.model_copy(update={"name": n}) for n, s in prov.sources.items()}})


def inputs_used(prov: Provenance, configs: list[dict]) -> list[Source]:
    """The sources the runs' configs read (``dataset.source``, the sample by default), and the
    ones every run reads, each once, in the declaration's order."""
    names = {(c.get("dataset") or {}).get("source") or "sample" for c in configs} | set(prov.always)
    order = list(prov.sources)
    return [prov.source(n) for n in sorted(names, key=lambda n: (n not in order,
                                                              order.index(n) if n in order else 0, n))]
