"""The local model's server process on xllamacpp: llama.cpp's own C++ HTTP server from a
prebuilt wheel, so nothing is compiled on the way to the first run.

    python -m tasks.ops.llama_serve <server-config.json>

``tasks/ops/local_model.py`` writes the config and starts this as a detached process; the
server answers on the config's host and port until SIGTERM or SIGINT. Why this server:
llama.cpp's native server decodes several requests at once (``parallel`` slots with
continuous batching) and constrains decoding to a JSON schema given as
``response_format: {"type": "json_object", "schema": ...}``, the form the pipeline sends.

One server answers both of the record's model names (chat and embeddings): llama.cpp's
server ignores the request's ``model`` and, started with embeddings on, also completes
chats. Mean pooling makes ``/v1/embeddings`` return one vector per input.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path


def serve(config: dict) -> None:
    import xllamacpp as xlc  # the [local] extra; imported here so --help needs nothing

    params = xlc.CommonParams()
    params.model.path = config["model"]
    params.model_alias = config["model_alias"]
    params.hostnames = [config["host"]]
    params.port = int(config["port"])
    params.n_parallel = int(config["parallel"])
    # n_ctx is the total KV cache, split between the slots: each slot gets config's n_ctx.
    params.n_ctx = int(config["n_ctx"]) * params.n_parallel
    params.cpuparams.n_threads = int(config["threads"])
    params.cpuparams_batch.n_threads = int(config["threads"])
    # Reproducible answers: a seeded sample must be the same on every run, as it is on
    # llama-cpp-python's server. Reusing a cached prompt prefix (per slot, or from the RAM
    # cache) evaluates the rest of the prompt in other batches, whose rounding differs, and
    # seeded samples then drift apart between runs: measured, so both caches are off.
    params.cache_prompt = False
    params.cache_ram_mib = 0
    params.embedding = True
    params.pooling_type = xlc.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xlc.Server(params)  # starts serving at once, in its own threads
    print(f"llama_serve: listening on {server.listening_address} "
          f"({params.n_parallel} slots, {config['threads']} threads)", flush=True)
    stop.wait()
    del server  # the destructor stops the HTTP server and the slots


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tasks.ops.llama_serve <server-config.json>", file=sys.stderr)
        return 2
    serve(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
