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


@pytest.fixture(scope="session")
def s3_endpoint():
    """A loopback S3 server (moto's server mode), for the object-store commit path."""
    moto_server = pytest.importorskip(
        "moto.server", reason="moto[server] not installed: pip install 'moto[server]'"
    )
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch) -> str:
    """A fresh bucket on the loopback server, with the environment a run would read."""
    import uuid

    import pyarrow.fs as pafs

    for var in ("AWS_ENDPOINT_URL", "EVO_S3_ENDPOINT", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    bucket = f"evo-{uuid.uuid4().hex[:12]}"
    pafs.S3FileSystem(
        endpoint_override=s3_endpoint.removeprefix("http://"),
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir(bucket)
    return bucket


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run with -m gpu on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
