"""The toy benchmark (tests/fixtures/toy_bench): its spec (SPEC), a config on the loopback
server (``_config``) and the loopback answers of its target and grader (``_script``). Used by
test_toy_benchmark and test_remembered_failures."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "toy_bench" / "spec.yaml"

# The target model's answers, by question: right, wrong, right (the case differs from the key).
ANSWERS = {"What is the capital of France?": "Paris.", "What is 2 + 2?": "5",
           "What colour is a clear daytime sky?": "Blue"}


def _config(tmp_path, api_base: str, spec: Path = SPEC) -> Path:
    cfg = {"benchmark": str(spec), "home": str(tmp_path / "home"), "seed": 0,
           "dataset": {"source": "sample"},
           "models": {"defaults": {"api_base": api_base, "temperature": 0.0, "max_tokens": 128,
                                   "max_concurrency": 4, "timeout_s": 5, "max_retries": 2},
                      "targets": [{"name": "target-a", "model": "openai/test-target-a"}],
                      "toy_grader": {"model": "openai/test-grader"}},
           "gateway": {"backoff_base_s": 0.01, "backoff_max_s": 0.1}}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _script(llm_server):
    def target(body):
        return ANSWERS[body["messages"][0]["content"]]

    def grader(body):
        text = body["messages"][-1]["content"]
        key = text.split("Answer key: ", 1)[1].split("\n", 1)[0]
        response = text.split("\nBEGIN ", 1)[1].split("\n", 1)[1].rsplit("\nEND ", 1)[0]
        return json.dumps({"reason": "compared", "correct": key.lower() in response.lower()})

    llm_server.scripts.update({"targets": target, "toy_grader": grader})
