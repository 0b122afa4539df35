"""The export tests read exports as the Hub would, offline: Hugging Face's libraries read
these variables when first imported, so they are set before any test imports them."""

import os

os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
