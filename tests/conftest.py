"""Shared test set-up: the interpreter on CPU machines, one Ray cluster per session."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Baseline and verdict caches live in a per-session folder, never in the user's home."""
    os.environ["EVO_CACHE_DIR"] = str(tmp_path_factory.mktemp("evo-cache"))


@pytest.fixture(scope="session")
def ray_cluster():
    """One embedded Ray cluster for the whole session, with two fake GPUs for placement."""
    import ray

    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run with -m gpu on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
