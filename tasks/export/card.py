"""The dataset card (``README.md``) of an export: a YAML header the Hub reads (``configs`` with
their ``data_files``, ``license``, ``language``, ``task_categories``, ``size_categories``,
``pretty_name``, ``tags``, ``source_datasets``) and a body that says what the benchmark
measures, how the run was made, where its inputs come from under which licences, the terms of
the models whose outputs it holds, and how to cite."""

from __future__ import annotations

import json

import yaml

from tasks.export.run_info import (clean_config, models_by_role, planned_cost, project_version,
                                   usage, without_nulls)

# Where a provider's terms for its models' outputs are published (by litellm's provider
# prefix); any other provider: its own terms, named but not linked.
PROVIDER_TERMS = {
    "openai": "https://openai.com/policies/",
    "anthropic": "https://www.anthropic.com/legal",
    "gemini": "https://ai.google.dev/gemini-api/terms",
    "vertex_ai": "https://cloud.google.com/terms",
    "mistral": "https://mistral.ai/terms",
    "bedrock": "https://aws.amazon.com/service-terms/",
}
# The project's own text in every export (its prompt templates, its code's outputs).
PROJECT_LICENSE = "apache-2.0"
SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
         (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")]


def size_category(n: int) -> str:
    return next((label for bound, label in SIZES if n < bound), "10M<n<100M")


def header(spec, exp) -> dict:
    episodes = exp.configs.get("episodes", {}).get("rows", 0)
    licenses = list(dict.fromkeys([PROJECT_LICENSE] + [s["license"] for s in exp.inputs]))
    return {
        "pretty_name": f"{spec.title}: run {exp.run_id}",
        "license": licenses,
        "language": ["en"],
        "task_categories": ["text-generation"],
        "size_categories": [size_category(episodes)],
        "tags": ["carryonbench", spec.name, "llm-evaluation", "multi-turn"],
        "source_datasets": [s.get("url") or s["name"] for s in exp.inputs],
        "configs": [{"config_name": name, "data_files": [{"split": "train", "path": c["path"]}]}
                    for name, c in exp.configs.items()],
    }


def _md_cell(v) -> str:
    return ("" if v is None else str(v)).replace("|", "\\|").replace("\n", " ")


def render(con, spec, prov, run: dict, exp, run_ids: list[str]) -> str:
    config = json.loads(run.get("config_json") or "{}")
    clean = clean_config(config)
    use = usage(con, run_ids)
    planned, plan_note = planned_cost(config)
    head = yaml.safe_dump(header(spec, exp), sort_keys=False, allow_unicode=True, width=10_000)
    out = ["---", head.rstrip(), "---", "", f"# {spec.title}: run `{exp.run_id}`", ""]
    if exp.partial:
        out += [f"> **Partial run.** This run's status is `{exp.run_status}`: it did not finish, "
                "and its numbers cover only what it stored (exported with `--partial`).", ""]
    out += [spec.description or spec.title, "", "Conditions:", ""]
    out += [f"- `{c.name}`: {c.description or c.prompt} (user: {c.user}, at most {c.max_turns} "
            f"target turn{'s' if c.max_turns != 1 else ''})" for c in spec.conditions]
    out += ["", "Exported by CarryOnBench's `carryon export --format hf`: every number here is "
            "the warehouse's, and `carryon import` reads this folder back into a fresh home "
            "(docs/export.md).", "", "## How the run was made", ""]
    out += [f"- Run `{run['run_id']}`: status `{run['status']}`, started {run.get('started')}, "
            f"finished {run.get('finished')}; {len(run_ids)} run(s) of this benchmark in the "
            "home this export reads.",
            f"- Project: carryonbench {project_version()}, commit `{run.get('git_rev') or 'unknown'}`.",
            f"- Model calls: {use['calls']} recorded, {use['cache_hits']} served from the cache "
            f"({_share(use['cache_hits'], use['calls'])}); tokens {use['prompt_tokens']} in, "
            f"{use['completion_tokens']} out.",
            f"- Cost: billed {_usd(use['cost_usd'])} (litellm's price map; a model it does not "
            f"price counts 0, so this is a lower bound); planned {_usd(planned)} ({plan_note}).",
            "", "Models per role:", ""]
    roles = models_by_role(config)
    out += [f"- {role}: " + ", ".join(f"`{m['name']}` ({m['model']}, provider {m['provider']})"
                                      for m in ms) for role, ms in roles.items()] or ["- none"]
    out += ["", "The config (its key variables' names, URL credentials and the machine's paths "
            "left out: keys are read from the environment and are never stored; unset settings "
            "not shown):", "", "```yaml",
            yaml.safe_dump(without_nulls(clean), sort_keys=True, allow_unicode=True).rstrip(), "```", ""]
    out += ["## Sources and licences", "",
            "| input | licence | redistributed here | source | where the licence was read |",
            "|---|---|---|---|---|"]
    for s in exp.inputs:
        lic = s["license"] + (f" ({s['license_name']})" if s.get("license_name") else "")
        shared = ("yes" if s["redistribute"] else
                  "no: its text is left out" if s["name"] in exp.withheld else
                  "included with --include-restricted")
        out.append(f"| {_md_cell(s['title'])} | {_md_cell(lic)} | {shared} | "
                   f"{_md_cell(s.get('url') or 'this project')} | {_md_cell(s.get('read'))} |")
    out += ["", f"The project's prompt templates and code are {PROJECT_LICENSE}."]
    if exp.withheld:
        out += ["", f"**Left out** (the licence of {', '.join(exp.withheld)} does not allow "
                "redistribution): the items' prompts and hidden fields (their keys kept, every "
                "text null), every text of a row tied to such an item (a turn, a verdict's "
                "reason) that contains one of those texts verbatim, and "
                + (", ".join(f"`{c}`" for c in prov.withhold) or "no other column")
                + ". Text the models wrote about them (answers, simulated turns that reword "
                "the request) stays."]
    elif exp.include_restricted and any(not s["redistribute"] for s in exp.inputs):
        out += ["", "**Restricted text included** (`--include-restricted`): this export holds "
                "text whose licence does not allow redistribution; sharing it is the "
                "publisher's responsibility under those terms."]
    out += ["", "## Terms of the models whose outputs this holds", ""]
    providers = sorted({m["provider"] for ms in roles.values() for m in ms})
    out += [f"- {p}: " + (PROVIDER_TERMS[p] if p in PROVIDER_TERMS else
                          "the terms of the service that served it") for p in providers]
    out += ["", "Model outputs (targets' answers, simulated users' turns, judges' verdicts) are "
            "subject to the terms of the provider that produced them.", "", "## Configs", "",
            "| config | rows | what |", "|---|---|---|"]
    for name, c in exp.configs.items():
        what = {"table": f"table `{c.get('table')}`", "view": f"view `{c.get('view')}`",
                "nested": f"table `{c.get('table')}`, each row with its `{c.get('field')}` "
                          f"(table `{c.get('child')}`)"}[c["kind"]]
        out.append(f"| `{name}` | {c['rows']} | {what} |")
    out += ["", "Columns keep the warehouse's types; `prompts`, `hidden`, `meta`, `script` "
            "and `config_json` hold JSON text. Load one config with "
            "`datasets.load_dataset(\"parquet\", data_dir=\"data/<config>\")`."]
    if exp.skipped:
        out += ["", "Not exported: " + "; ".join(f"`{t}` ({why})"
                                                  for t, why in sorted(exp.skipped.items())) + "."]
    out += ["", "## Citation", ""]
    if prov.paper:
        out += [f"The benchmark reproduces {prov.paper.get('title')} "
                f"({prov.paper.get('url')}):", "", "```bibtex",
                (prov.paper.get("citation") or "").rstrip(), "```", ""]
    cites = [s for s in exp.inputs if s.get("citation")]
    if cites:
        out += ["Its inputs:", "", "```bibtex", *[s["citation"].rstrip() for s in cites], "```"]
    return "\n".join(out).rstrip() + "\n"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "no call"


def _usd(v) -> str:
    return "unknown" if v is None else f"${v:,.4f}"
