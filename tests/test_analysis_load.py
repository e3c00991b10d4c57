"""`analysis.load`: a run's lineage as DataFrames, from committed part files only, across schema
versions, from local paths and filesystem URIs; clear errors for a missing or empty run."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import analysis
from analysis import AnalysisError, LineageWarning
from analysis.load import SCHEMA_VERSION
from tests.analysis_lineages import CALLS, ROWS, cid, write_hand_made_run

NEWER = SCHEMA_VERSION + 1  # a lineage written by a later version of evo

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(write_hand_made_run(tmp_path / "hand"))


def test_a_run_loads_as_three_frames_labelled_with_the_run(run_dir):
    run = analysis.load_run(str(run_dir))
    cands, calls, events = run  # unpacks in this order
    assert len(cands) == len(ROWS) and len(calls) == len(CALLS) and len(events) == 1
    assert set(cands["run"]) == set(calls["run"]) == set(events["run"]) == {"hand"}
    assert run.runs == ["hand"] and "candidates/" not in run.configs["hand"]
    a03 = cands.set_index("candidate_id").loc[cid("A0-3")]
    assert list(a03["parent_ids"]) == [cid("A0-2"), cid("A0-m")]
    assert a03["source"] == "# source of A0-3\n" and a03["speedup_vs_eager"] == 2.0
    assert str(cands["created_at"].dt.tz) == "UTC"


def test_columns_leave_the_long_text_out(run_dir):
    run = analysis.load_run(str(run_dir), columns=["workload", "speedup_vs_eager"])
    assert set(run.candidates.columns) == {"run", "run_id", "workload", "speedup_vs_eager",
                                           "schema_version"}  # fmt: skip
    assert "prompt" not in run.llm_calls and "cost_usd" in run.llm_calls
    run = analysis.load_run(str(run_dir), columns={"llm_calls": ["cost_usd"]})
    assert "source" in run.candidates and list(run.llm_calls.columns) == [
        "run", "cost_usd", "run_id", "schema_version"]  # fmt: skip
    with pytest.raises(AnalysisError, match="speedup_vs_eagr"):
        analysis.load_run(str(run_dir), columns=["speedup_vs_eagr"])


def test_missing_not_a_run_and_empty_runs_are_named(tmp_path):
    with pytest.raises(AnalysisError, match="does not exist"):
        analysis.load_run(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(AnalysisError, match="not a run directory"):
        analysis.load_run(str(tmp_path / "plain"))
    (tmp_path / "empty" / "candidates").mkdir(parents=True)
    with pytest.raises(AnalysisError, match="no committed candidate rows"):
        analysis.load_run(str(tmp_path / "empty"))
    with pytest.raises(AnalysisError, match="at least one"):
        analysis.load_runs([])


def test_torn_and_uncommitted_part_files_are_skipped_with_a_warning(run_dir):
    from evo.lineage import LineageWriter

    for wid in ("torn", "pending"):
        with LineageWriter(str(run_dir), "candidates", wid) as w:
            w.append({"run_id": "h", "candidate_id": f"x-{wid}", "status": "correct"})
    torn = run_dir / "candidates" / "part-torn-00000000.parquet"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    (run_dir / "candidates" / "part-pending-00000000.parquet.ok").unlink()
    with pytest.warns(LineageWarning) as caught:
        run = analysis.load_run(str(run_dir))
    assert len(run.candidates) == len(ROWS)  # the hand rows, none of the two bad files
    said = " ".join(str(w.message) for w in caught)
    assert "part-torn-00000000.parquet" in said and "part-pending-00000000.parquet" in said


def test_older_and_newer_schema_versions_read(run_dir):
    """A part file from before versioning (no schema_version, fewer columns, a float
    protocol_version) and one from a newer version (an extra column) read with the rest."""
    parts = run_dir / "candidates"
    old = pa.table({"run_id": ["h"], "candidate_id": ["old"], "workload": ["builtin:wa"],
                    "status": ["correct"], "protocol_version": [3.0]})  # fmt: skip
    pq.write_table(old, parts / "part-old-00000000.parquet")
    (parts / "part-old-00000000.parquet.ok").touch()
    new = pa.table({"run_id": ["h"], "candidate_id": ["new"], "status": ["mismatch"],
                    "schema_version": pa.array([NEWER], pa.int32()),
                    "energy_j": [1.5]})  # fmt: skip
    pq.write_table(new, parts / "part-zzz-00000000.parquet")
    (parts / "part-zzz-00000000.parquet.ok").touch()
    with pytest.warns(LineageWarning, match=f"schema_version {NEWER} is newer"):
        c = analysis.load_run(str(run_dir)).candidates.set_index("candidate_id")
    assert c.loc["old", "schema_version"] == 0
    assert c.loc[cid("A0-0"), "schema_version"] == SCHEMA_VERSION
    assert c.loc["old", "protocol_version"] == 3  # cast to the current integer type
    assert c.loc["old", "speedup_vs_eager"] != c.loc["old", "speedup_vs_eager"]  # NaN
    assert c.loc["new", "energy_j"] == 1.5 and c.loc["new", "schema_version"] == NEWER
    with pytest.warns(LineageWarning, match="newer"):
        slim = analysis.load_run(str(run_dir), columns=["energy_j", "status"]).candidates
    assert slim["energy_j"].notna().sum() == 1


def test_a_file_uri_and_an_object_store_uri_load(run_dir, s3_bucket):
    from evo.lineage import LineageWriter

    by_uri = analysis.load_run(run_dir.as_uri())
    assert len(by_uri.candidates) == len(ROWS)
    uri = f"s3://{s3_bucket}/runs/r1"
    with LineageWriter(uri, "candidates", "w0") as w:
        w.append_many([{"run_id": "s3", "candidate_id": f"s3-{i}", "status": "correct",
                        "speedup_vs_eager": 1.0 + i} for i in range(3)])  # fmt: skip
    got = analysis.load_run(uri)
    assert got.candidates["speedup_vs_eager"].tolist() == [1.0, 2.0, 3.0]
    assert got.runs == ["r1"] and got.llm_calls.empty


def test_several_runs_are_told_apart_by_label(tmp_path):
    a = write_hand_made_run(tmp_path / "x" / "run")
    b = write_hand_made_run(tmp_path / "y" / "run")
    both = analysis.load_runs([a, b])
    assert both.runs == ["run#0", "run#1"]
    assert both.candidates.groupby("run").size().to_dict() == {"run#0": 15, "run#1": 15}
    named = analysis.load_runs([a, b], labels=["llm", "offline"])
    assert set(named.llm_calls["run"]) == {"llm", "offline"}
    assert len(named.select("llm").candidates) == len(ROWS)
    with pytest.raises(AnalysisError, match="2 runs"):
        analysis.load_runs([a, b], labels=["one"])


def test_read_sources_reads_only_the_candidates_asked_for(run_dir):
    got = analysis.read_sources(str(run_dir), [cid("A0-3"), cid("B1-0")])
    assert got == {cid("A0-3"): "# source of A0-3\n", cid("B1-0"): "# source of B1-0\n"}


def test_analysis_imports_nothing_of_the_engine():
    """Ground rule: analysis/ reads Parquet with pyarrow, pandas, matplotlib, numpy only."""
    allowed = {"pyarrow", "pandas", "matplotlib", "numpy", "analysis", "__future__"}
    for path in (ROOT / "analysis").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or top in sys.stdlib_module_names, (path, name)
    code = ("import sys, analysis, analysis.report; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'evo', 'ray', 'torch', 'triton', 'fitness', 'operators', 'backends'}))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out
