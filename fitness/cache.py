"""A small on-disk JSON cache (baselines, verdicts), keyed by everything that changes the answer."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def default_cache_dir() -> Path:
    """`EVO_CACHE_DIR`, else ~/.cache/evokernels."""
    return Path(os.environ.get("EVO_CACHE_DIR") or Path.home() / ".cache" / "evokernels")


def digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class JsonCache:
    """One JSON file per key under `root/kind/`; written atomically, unreadable entries ignored."""

    def __init__(self, root: Path | str, kind: str):
        self.dir = Path(root) / kind

    def get(self, key: str) -> dict | None:
        try:
            return json.loads((self.dir / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        os.replace(tmp, self.dir / f"{key}.json")
