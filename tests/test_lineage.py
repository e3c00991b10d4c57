"""The Parquet lineage: round trips, the commit protocol, flushing, and an S3 run directory."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from evo.lineage import (
    CANDIDATE_SCHEMA,
    EVENT_SCHEMA,
    LLM_CALL_SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    LineageWarning,
    LineageWriter,
    open_run_dir,
    read_frame,
    read_table,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def candidate(i: int, **kw) -> dict:
    """A candidate row with every column kind filled (lists, maps, bools, floats)."""
    row = {
        "run_id": "r1",
        "candidate_id": f"r1/w|triton|0/{i:06d}",
        "source_hash": f"h{i}",
        "workload": "builtin:softmax",
        "backend": "triton",
        "island": "w|triton|0",
        "step": i,
        "parent_ids": [f"p{i}", f"q{i}"],
        "operator": "mutate",
        "model": "offline",
        "llm_call_id": f"c{i}",
        "source": f"# kernel {i}\n" + "x" * 100,
        "status": "correct",
        "reason": "ok",
        "precision": "fp32",
        "atol": 1e-4,
        "rtol": 2e-4,
        "comparable": True,
        "protocol_version": 3,
        "runtime_ms": 0.5 + i,
        "runtime_iqr_ms": 0.01,
        "baseline_eager_ms": 1.0,
        "baseline_compile_ms": 0.9,
        "speedup_vs_eager": 2.0,
        "speedup_vs_compile": 1.8,
        "sol_ms": 0.1,
        "sol_fraction": 0.2,
        "audit": False,
        "fitness": 2.0,
        "metrics": {"code_size": 123.0, "regs": 32.0},
        "max_abs_err": 1e-6,
        "max_rel_err": 2e-6,
        "error_fraction": 0.125,
        "isolation": ["mount", "pid", "net"],
        "recommendation": "tile the K loop",
        "device": "NVIDIA H100",
        "versions": {"torch": "2.9", "triton": "3.6"},
        "eval_seconds": 1.5,
        "created_at": T0,
        "is_migrant": False,
    }
    row.update(kw)
    return row


def llm_call(i: int) -> dict:
    return {
        "run_id": "r1",
        "llm_call_id": f"c{i}",
        "operator": "mutate",
        "provider": "openai",
        "model": "gpt-x",
        "prompt_hash": f"ph{i}",
        "prompt": "make it faster",
        "reply": "```python\n...\n```",
        "input_tokens": 1000 + i,
        "output_tokens": 200,
        "cost_usd": 0.003,
        "latency_s": 4.2,
        "attempts": 1,
        "error": None,
        "created_at": T0,
    }


def event(i: int) -> dict:
    return {
        "run_id": "r1",
        "kind": "migration",
        "island": "w|triton|1",
        "detail": '{"from": "w|triton|0"}',
        "created_at": T0,
    }


MAKERS = {"candidates": candidate, "llm_calls": llm_call, "events": event}


def as_plain(table: pa.Table) -> list[dict]:
    """Rows as Python values, with map columns as dicts (pyarrow gives lists of pairs)."""
    maps = [f.name for f in table.schema if pa.types.is_map(f.type)]
    rows = table.to_pylist()
    for r in rows:
        for m in maps:
            r[m] = None if r[m] is None else dict(r[m])
    return rows


def parts(run: str, table: str) -> list[str]:
    return sorted(os.listdir(os.path.join(run, table)))


def test_tables_carry_schema_version():
    assert TABLES == {
        "candidates": CANDIDATE_SCHEMA,
        "llm_calls": LLM_CALL_SCHEMA,
        "events": EVENT_SCHEMA,
    }
    for schema in TABLES.values():
        assert schema.field("schema_version").type == pa.int32()
        assert schema.field("created_at").type == pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("table", list(TABLES))
def test_round_trip_keeps_every_value_and_append_order(tmp_path, table):
    rows = [MAKERS[table](i) for i in range(5)]
    with LineageWriter(str(tmp_path), table, "w0") as w:
        w.append_many(rows)
    got = as_plain(read_table(str(tmp_path), table))
    assert got == [{**r, "schema_version": SCHEMA_VERSION} for r in rows]
    assert read_table(str(tmp_path), table).schema == TABLES[table]


def test_candidate_nulls_and_empty_containers_survive(tmp_path):
    sparse = {"run_id": "r1", "candidate_id": "a", "step": 0, "parent_ids": [], "metrics": {}}
    with LineageWriter(str(tmp_path), "candidates", "w0") as w:
        w.append(sparse)
        w.append(candidate(1, runtime_ms=None, fitness=None, parent_ids=None, metrics=None))
    a, b = as_plain(read_table(str(tmp_path), "candidates"))
    assert a["parent_ids"] == [] and a["metrics"] == {}
    assert a["source"] is None and a["comparable"] is None and a["versions"] is None
    assert a["schema_version"] == SCHEMA_VERSION
    assert a["created_at"] is not None  # filled in on append
    assert b["runtime_ms"] is None and b["fitness"] is None
    assert b["parent_ids"] is None and b["metrics"] is None
    assert b["created_at"] == T0


def test_event_detail_given_as_a_dict_is_stored_as_json_text(tmp_path):
    with LineageWriter(str(tmp_path), "events", "w0") as w:
        w.append({"run_id": "r", "kind": "fault", "detail": {"b": 1, "a": [2]}})
    assert read_table(str(tmp_path), "events")["detail"].to_pylist() == ['{"a": [2], "b": 1}']


def test_projection_returns_only_the_named_columns_in_order(tmp_path):
    with LineageWriter(str(tmp_path), "candidates", "w0") as w:
        w.append_many([candidate(i) for i in range(3)])
    got = read_table(str(tmp_path), "candidates", columns=["step", "metrics", "candidate_id"])
    assert got.column_names == ["step", "metrics", "candidate_id"]
    assert got["step"].to_pylist() == [0, 1, 2]
    with pytest.raises(ValueError, match="nonesuch"):
        read_table(str(tmp_path), "candidates", columns=["step", "nonesuch"])


def test_reading_without_source_never_decodes_the_source_column(tmp_path):
    """Garbage in the source column's bytes: invisible without `source`, torn with it."""
    with LineageWriter(str(tmp_path), "candidates", "w0") as w:
        w.append_many([candidate(i, source=os.urandom(3000).hex()) for i in range(50)])
    (name,) = [n for n in parts(str(tmp_path), "candidates") if n.endswith(".parquet")]
    path = tmp_path / "candidates" / name
    chunk = (
        pq.ParquetFile(path)
        .metadata.row_group(0)
        .column(CANDIDATE_SCHEMA.get_field_index("source"))
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))

    no_source = [c for c in CANDIDATE_SCHEMA.names if c != "source"]
    slim = read_table(str(tmp_path), "candidates", columns=no_source)  # no warning, no error
    assert slim["step"].to_pylist() == list(range(50))
    with pytest.warns(LineageWarning, match="torn"):
        assert read_table(str(tmp_path), "candidates").num_rows == 0


def test_a_resumed_writer_continues_the_sequence(tmp_path):
    run = str(tmp_path)
    with LineageWriter(run, "candidates", "isl") as w:
        w.append(candidate(0))
        w.flush()
        w.append(candidate(1))
    with LineageWriter(run, "candidates", "isl-2") as other:  # a different writer id
        other.append(candidate(100))
    with LineageWriter(run, "candidates", "isl") as w:
        w.append(candidate(2))
    assert parts(run, "candidates") == [
        f"part-{wid}-{seq:08d}.parquet{ok}"
        for wid, seq in [("isl", 0), ("isl", 1), ("isl", 2), ("isl-2", 0)]
        for ok in ("", ".ok")
    ]
    assert read_table(run, "candidates")["step"].to_pylist() == [0, 1, 2, 100]


def test_a_resumed_writer_skips_past_an_uncommitted_part(tmp_path):
    run = str(tmp_path)
    with LineageWriter(run, "events", "isl") as w:
        w.append(event(0))
    os.remove(tmp_path / "events" / "part-isl-00000000.parquet.ok")  # died before its marker
    with LineageWriter(run, "events", "isl") as w:
        w.append(event(1))
    assert "part-isl-00000001.parquet.ok" in parts(run, "events")
    with pytest.warns(LineageWarning, match="part-isl-00000000.parquet"):
        assert read_table(run, "events").num_rows == 1


def test_torn_and_uncommitted_parts_are_skipped_with_a_warning(tmp_path):
    run = str(tmp_path)
    for wid, steps in [("good", [0, 1]), ("torn", [10, 11]), ("uncommitted", [20])]:
        with LineageWriter(run, "candidates", wid) as w:
            w.append_many([candidate(i) for i in steps])
    torn = tmp_path / "candidates" / "part-torn-00000000.parquet"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    os.remove(tmp_path / "candidates" / "part-uncommitted-00000000.parquet.ok")

    with pytest.warns(LineageWarning) as caught:
        got = read_table(run, "candidates")
    assert got["step"].to_pylist() == [0, 1]
    messages = " ".join(str(w.message) for w in caught)
    assert "part-torn-00000000.parquet" in messages
    assert "part-uncommitted-00000000.parquet" in messages


def test_an_old_part_file_without_newer_columns_reads_them_as_null(tmp_path):
    """A run written before a column was added still reads (the schema_version contract)."""
    run = str(tmp_path)
    LineageWriter(run, "candidates", "new").close()  # creates the table folder
    old = pa.table({"run_id": ["r0"], "candidate_id": ["old"], "step": [7]})
    pq.write_table(old, tmp_path / "candidates" / "part-old-00000000.parquet")
    (tmp_path / "candidates" / "part-old-00000000.parquet.ok").write_bytes(b"")
    got = as_plain(read_table(run, "candidates"))
    assert got[0]["candidate_id"] == "old" and got[0]["step"] == 7
    assert got[0]["fitness"] is None and got[0]["metrics"] is None


def test_an_empty_table_reads_as_zero_rows_with_the_schema(tmp_path):
    assert read_table(str(tmp_path), "llm_calls").schema == LLM_CALL_SCHEMA
    assert read_table(str(tmp_path), "llm_calls", columns=["model"]).column_names == ["model"]
    assert len(read_frame(str(tmp_path), "events")) == 0


def test_unknown_column_is_refused_by_name(tmp_path):
    w = LineageWriter(str(tmp_path), "candidates", "w0")
    with pytest.raises(ValueError, match="speedup_vs_eagr"):
        w.append(candidate(0, speedup_vs_eagr=2.0))
    assert w.pending == 0
    with pytest.raises(ValueError, match="unknown lineage table 'candidate'"):
        LineageWriter(str(tmp_path), "candidate", "w0")
    with pytest.raises(ValueError, match="writer_id"):
        LineageWriter(str(tmp_path), "events", "a/b")


def test_a_value_of_the_wrong_type_is_named_and_the_other_rows_are_written(tmp_path):
    w = LineageWriter(str(tmp_path), "candidates", "w0")
    w.append_many([candidate(0), candidate(1, step="three"), candidate(2)])
    with pytest.raises(ValueError, match=r"candidates\.step: 'three'"):
        w.flush()
    assert w.pending == 0
    w.close()
    assert read_table(str(tmp_path), "candidates")["step"].to_pylist() == [0, 2]


def test_maybe_flush_commits_once_flush_rows_are_pending(tmp_path):
    w = LineageWriter(str(tmp_path), "events", "w0", flush_rows=3, flush_seconds=1e9)
    w.append_many([event(0), event(1)])
    w.maybe_flush()
    assert read_table(str(tmp_path), "events").num_rows == 0 and w.pending == 2
    w.append(event(2))
    w.maybe_flush()
    assert read_table(str(tmp_path), "events").num_rows == 3 and w.pending == 0
    w.maybe_flush()  # nothing pending: no empty part file
    assert len(parts(str(tmp_path), "events")) == 2


def test_maybe_flush_commits_once_flush_seconds_have_passed(tmp_path):
    started = time.monotonic()
    w = LineageWriter(str(tmp_path), "events", "w0", flush_rows=10**9, flush_seconds=0.05)
    w.append(event(0))
    w.maybe_flush()
    if time.monotonic() - started < 0.05:  # only meaningful while the interval has not passed
        assert w.pending == 1
    while time.monotonic() - started < 0.06:
        time.sleep(0.01)
    w.maybe_flush()
    assert w.pending == 0
    assert read_table(str(tmp_path), "events").num_rows == 1


def test_the_timer_thread_flushes_without_being_polled(tmp_path):
    w = LineageWriter(str(tmp_path), "events", "w0", flush_rows=10**9, flush_seconds=0.02)
    w.start_timer()
    w.append(event(0))
    deadline = time.monotonic() + 30
    while w.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.pending == 0
    w.append(event(1))
    w.close()
    assert read_table(str(tmp_path), "events").num_rows == 2
    with pytest.raises(RuntimeError, match="closed"):
        w.append(event(2))


def test_read_frame_gives_dicts_for_maps_and_utc_timestamps(tmp_path):
    with LineageWriter(str(tmp_path), "candidates", "w0") as w:
        w.append(candidate(0))
    df = read_frame(str(tmp_path), "candidates", columns=["metrics", "versions", "created_at"])
    assert df["metrics"][0] == {"code_size": 123.0, "regs": 32.0}
    assert df["versions"][0] == {"torch": "2.9", "triton": "3.6"}
    assert df["created_at"][0] == T0 and str(df["created_at"].dt.tz) == "UTC"


def test_a_local_run_dir_may_be_a_file_uri(tmp_path):
    fs, base = open_run_dir(f"file://{tmp_path}")
    assert isinstance(fs, pafs.LocalFileSystem) and base == str(tmp_path)
    with LineageWriter(f"file://{tmp_path}", "events", "w0") as w:
        w.append(event(0))
    assert read_table(str(tmp_path), "events").num_rows == 1


@pytest.mark.parametrize("endpoint_var", ["AWS_ENDPOINT_URL", "EVO_S3_ENDPOINT"])
def test_an_s3_run_dir_commits_and_reads_back(s3_endpoint, monkeypatch, endpoint_var):
    for var in ("AWS_ENDPOINT_URL", "EVO_S3_ENDPOINT", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv(endpoint_var, s3_endpoint)
    bucket = f"lineage-{uuid.uuid4().hex[:12]}"
    fs, base = open_run_dir(f"s3://{bucket}/runs/r1")
    assert isinstance(fs, pafs.S3FileSystem) and base == f"{bucket}/runs/r1"
    pafs.S3FileSystem(
        endpoint_override=s3_endpoint.removeprefix("http://"),
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir(bucket)

    run = f"s3://{bucket}/runs/r1"
    with LineageWriter(run, "candidates", "isl0", flush_rows=2) as w:
        w.append_many([candidate(0), candidate(1)])
        w.maybe_flush()
        w.append(candidate(2))
    with LineageWriter(run, "candidates", "isl0") as w:  # resumed: no overwrite
        w.append(candidate(3))
    names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{base}/candidates")))
    assert names == [f"part-isl0-{s:08d}.parquet{ok}" for s in range(3) for ok in ("", ".ok")]
    with fs.open_output_stream(f"{base}/candidates/part-dead-00000000.parquet") as f:
        f.write(b"PAR1 half a file")  # a writer that died before its marker

    with pytest.warns(LineageWarning, match="part-dead-00000000"):
        got = as_plain(read_table(run, "candidates"))
    assert got == [{**candidate(i), "schema_version": SCHEMA_VERSION} for i in range(4)]
    with pytest.warns(LineageWarning):
        slim = read_table(run, "candidates", columns=["candidate_id", "fitness"])
    assert slim.column_names == ["candidate_id", "fitness"] and slim.num_rows == 4
