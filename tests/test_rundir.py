"""The run directory's checkpoints: the newest committed one is read, only the newest few kept."""

import pyarrow.fs as pafs
import pytest

from evo.rundir import KEEP_CHECKPOINTS, RunDir


@pytest.fixture(params=["local", "s3"])
def run_dir(request, tmp_path) -> RunDir:
    if request.param == "local":
        return RunDir(str(tmp_path / "run"))
    bucket = request.getfixturevalue("s3_bucket")
    return RunDir(f"s3://{bucket}/runs/r1")


def numbers(rd: RunDir) -> list[int]:
    infos = rd.fs.get_file_info(pafs.FileSelector(rd.path("checkpoints")))
    return sorted(int(i.path.rstrip("/").split("/")[-1]) for i in infos)


def test_only_the_newest_checkpoints_are_kept_and_the_newest_committed_is_read(run_dir):
    rd = run_dir
    assert [rd.write_checkpoint({"n": n}) for n in range(1, 8)] == list(range(1, 8))
    assert numbers(rd) == list(range(8 - KEEP_CHECKPOINTS, 8))
    assert rd.latest_checkpoint() == {"n": 7}
    rd.write_text("checkpoints/000008/state.json", '{"n": "torn"}')  # a crash before its marker
    assert rd.latest_checkpoint() == {"n": 7}
    assert rd.write_checkpoint({"n": 8}) == 8 and rd.latest_checkpoint() == {"n": 8}
    assert numbers(rd) == list(range(9 - KEEP_CHECKPOINTS, 9))
