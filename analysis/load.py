"""Loading runs: a run directory's lineage tables as pandas DataFrames.

Reads only Parquet part files (through pyarrow datasets and filesystems), never engine
objects, so it works on a laptop without Ray or a GPU. A part file counts once its `.ok`
marker exists (the lineage's commit); unmarked or unreadable part files are skipped with a
`LineageWarning`. Part files of older schema versions read too: a column they lack
reads as null, a column stored in an older type is cast to the current one.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

TABLES = ("candidates", "llm_calls", "events")

# The newest `schema_version` this reader knows (the lineage's own number). A part file without
# the column predates versioning and reads as version 0.
SCHEMA_VERSION = 2

_TS = pa.timestamp("us", tz="UTC")
_S, _F, _I, _B = pa.string(), pa.float64(), pa.int64(), pa.bool_()

# The columns of each table and their types, as this reader expects them. The lineage only adds
# columns between versions; a version that renames one must be mapped here, in `_conform`.
COLUMN_TYPES: dict[str, dict[str, pa.DataType]] = {
    "candidates": {
        "run_id": _S, "candidate_id": _S, "source_hash": _S, "workload": _S, "backend": _S,
        "island": _S, "step": _I, "parent_ids": pa.list_(_S), "operator": _S, "model": _S,
        "llm_call_id": _S, "source": _S, "status": _S, "reason": _S, "precision": _S,
        "atol": _F, "rtol": _F, "comparable": _B, "protocol_version": _I, "runtime_ms": _F,
        "runtime_iqr_ms": _F, "baseline_eager_ms": _F, "baseline_compile_ms": _F,
        "speedup_vs_eager": _F, "speedup_vs_compile": _F, "sol_ms": _F, "sol_fraction": _F,
        "audit": _B, "fitness": _F, "metrics": pa.map_(_S, _F), "max_abs_err": _F,
        "max_rel_err": _F, "error_fraction": _F, "isolation": pa.list_(_S),
        "recommendation": _S, "device": _S, "versions": pa.map_(_S, _S),
        "eval_seconds": _F, "created_at": _TS, "is_migrant": _B, "schema_version": pa.int32(),
    },
    "llm_calls": {
        "run_id": _S, "llm_call_id": _S, "operator": _S, "provider": _S, "model": _S,
        "prompt_hash": _S, "prompt": _S, "reply": _S, "input_tokens": _I, "output_tokens": _I,
        "cost_usd": _F, "latency_s": _F, "attempts": _I, "error": _S, "created_at": _TS,
        "schema_version": pa.int32(),
    },
    "events": {
        "run_id": _S, "kind": _S, "island": _S, "detail": _S, "created_at": _TS,
        "schema_version": pa.int32(),
    },
}  # fmt: skip

# Long text, left out of the small tables when only some candidate columns are asked for.
_LONG_TEXT = {"llm_calls": ("prompt", "reply"), "events": ()}
_MARKER = ".ok"


class AnalysisError(ValueError):
    """A problem the user can fix: a missing or empty run directory, an unknown column."""


class LineageWarning(UserWarning):
    """A part file was left out (not committed: no `.ok` marker yet; or unreadable: torn), or
    was written by a newer schema version than this reader knows."""


@dataclass
class Lineage:
    """The lineage of one or more runs. Every frame has a `run` column: the run's label."""

    candidates: pd.DataFrame
    llm_calls: pd.DataFrame
    events: pd.DataFrame
    runs: list[str] = field(default_factory=list)  # labels, in the order given
    paths: dict[str, str] = field(default_factory=dict)  # label -> path or URI
    configs: dict[str, str] = field(default_factory=dict)  # label -> config.yaml text

    def __iter__(self):
        """`candidates, llm_calls, events = load_run(RUN)`."""
        return iter((self.candidates, self.llm_calls, self.events))

    def select(self, run: str) -> Lineage:
        """The lineage of one of the runs, by label."""
        if run not in self.runs:
            raise AnalysisError(f"no run labelled {run!r} (runs: {', '.join(self.runs)})")
        frames = (f[f["run"].eq(run)] for f in self)
        return Lineage(
            *frames, runs=[run], paths={run: self.paths[run]}, configs={run: self.configs[run]}
        )


def _filesystem(path_or_uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and base path of a run: a local path or any pyarrow filesystem URI.

    For `s3://` URIs, `EVO_S3_ENDPOINT` or `AWS_ENDPOINT_URL` names a non-AWS endpoint.
    """
    if "://" not in path_or_uri:
        return pafs.LocalFileSystem(), os.path.abspath(path_or_uri).rstrip("/") or "/"
    uri = urlparse(path_or_uri)
    endpoint = os.environ.get("EVO_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if uri.scheme == "s3" and endpoint and not uri.query:
        ep = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        fs = pafs.S3FileSystem(
            endpoint_override=ep.netloc, scheme=ep.scheme or "https", region=region or "us-east-1"
        )
        return fs, f"{uri.netloc}{uri.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(path_or_uri)
    return fs, path.rstrip("/")


def _committed_parts(fs: pafs.FileSystem, directory: str) -> list[str]:
    names = {
        i.base_name
        for i in fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        if i.type == pafs.FileType.File
    }
    parts = sorted(n for n in names if n.startswith("part-") and n.endswith(".parquet"))
    missing = [n for n in parts if n + _MARKER not in names]
    if missing:
        warnings.warn(
            f"skipping {len(missing)} uncommitted part file(s) in {directory}: "
            + ", ".join(missing),
            LineageWarning,
            stacklevel=4,
        )
    return [f"{directory}/{n}" for n in parts if n + _MARKER in names]


def _conform(part: pa.Table, table: str, columns: list[str] | None, path: str) -> pa.Table:
    """One part file's rows in this reader's column types; absent columns are null."""
    types = COLUMN_TYPES[table]
    names = columns if columns is not None else list(dict.fromkeys([*types, *part.column_names]))
    out = {}
    for name in names:
        typ = types.get(name)
        if name not in part.column_names:
            if name == "schema_version":  # written before the lineage had versions
                out[name] = pa.array([0] * part.num_rows, pa.int32())
            else:
                out[name] = pa.nulls(part.num_rows, typ or pa.null())
            continue
        col = part[name]
        if typ is not None and col.type != typ:
            try:
                col = col.cast(typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise AnalysisError(
                    f"{path}: column {name!r} ({col.type}) is not {typ}: {e}"
                ) from None
        out[name] = col
    return pa.table(out)


def read_table(
    path_or_uri: str,
    table: str,
    columns: list[str] | None = None,
    row_filter: pc.Expression | None = None,
) -> pa.Table:
    """The committed rows of one lineage table, as an Arrow table (empty if it has none);
    `row_filter` (a pyarrow expression) keeps only the rows it selects.

    Raises AnalysisError for a column that neither this reader nor any part file knows.
    """
    if table not in TABLES:
        raise AnalysisError(f"unknown lineage table {table!r} (known: {', '.join(TABLES)})")
    types = COLUMN_TYPES[table]
    if columns is not None:
        columns = list(dict.fromkeys([*columns, "schema_version"]))
    fs, base = _filesystem(path_or_uri)
    paths = _committed_parts(fs, f"{base}/{table}")

    def read(path: str) -> tuple[pa.Table, set[str]] | Exception:
        try:
            part = ds.dataset(path, format="parquet", filesystem=fs)
            present = set(part.schema.names)
            wanted = None if columns is None else [c for c in columns if c in present]
            return part.to_table(columns=wanted, filter=row_filter), present
        except (OSError, pa.ArrowException) as e:
            return e

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(paths)))) as pool:
        results = list(pool.map(read, paths))
    parts, seen = [], set(types)
    for path, result in zip(paths, results):
        if isinstance(result, Exception):
            warnings.warn(
                f"skipping unreadable (torn) part file {path}: {result}",
                LineageWarning,
                stacklevel=3,
            )
            continue
        parts.append((path, result[0]))
        seen |= result[1]
    unknown = [c for c in columns or () if c not in seen]
    if unknown:
        raise AnalysisError(f"{table}: unknown column(s) {', '.join(unknown)}")
    parts = [_conform(part, table, columns, path) for path, part in parts]
    if not parts:
        names = columns if columns is not None else list(types)
        return pa.schema([(n, types.get(n, pa.null())) for n in names]).empty_table()
    newest = max(pc.max(p["schema_version"]).as_py() or 0 for p in parts)
    if newest > SCHEMA_VERSION:
        warnings.warn(
            f"{path_or_uri}/{table}: schema_version {newest} is newer than this reader's "
            f"({SCHEMA_VERSION}); the columns it added are read as stored",
            LineageWarning,
            stacklevel=3,
        )
    return pa.concat_tables(parts, promote_options="permissive")


def _columns_for(table: str, columns: list[str] | dict[str, list[str]] | None):
    if columns is None:
        return None
    if isinstance(columns, dict):
        wanted = columns.get(table)
        return None if wanted is None else list(dict.fromkeys([*wanted, "run_id"]))
    if table == "candidates":
        return list(dict.fromkeys([*columns, "run_id"]))
    # only some candidate columns: the small tables without their long text
    return [c for c in COLUMN_TYPES[table] if c not in _LONG_TEXT[table]]


def load_run(
    path_or_uri: str,
    columns: list[str] | dict[str, list[str]] | None = None,
    label: str | None = None,
) -> Lineage:
    """The candidates, llm_calls and events of one run directory (a path or a URI).

    `columns` picks the candidate columns to decode (leave out `source` for speed on a big
    run; the small tables then leave out prompts and replies), or is a dict naming the columns
    of each table. Every frame gains a `run` column, the label (default: the directory's name).
    Raises AnalysisError for a missing directory or a run with no committed candidate rows.
    """
    fs, base = _filesystem(path_or_uri)
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        raise AnalysisError(f"run directory {path_or_uri!r} does not exist")
    if fs.get_file_info(f"{base}/candidates").type != pafs.FileType.Directory:
        raise AnalysisError(f"{path_or_uri!r} is not a run directory: it has no candidates/")
    label = label or base.rstrip("/").rsplit("/", 1)[-1] or path_or_uri
    frames = {}
    for table in TABLES:
        data = read_table(path_or_uri, table, _columns_for(table, columns))
        frame = data.to_pandas(maps_as_pydicts="lossy")
        frame.insert(0, "run", label)
        frames[table] = frame
    if frames["candidates"].empty:
        raise AnalysisError(f"run {path_or_uri!r} has no committed candidate rows yet")
    config = ""
    try:
        with fs.open_input_stream(f"{base}/config.yaml") as f:
            config = f.read().decode()
    except (OSError, FileNotFoundError):
        pass
    return Lineage(
        frames["candidates"],
        frames["llm_calls"],
        frames["events"],
        runs=[label],
        paths={label: path_or_uri},
        configs={label: config},
    )


def load_runs(
    paths: list[str],
    columns: list[str] | dict[str, list[str]] | None = None,
    labels: list[str] | None = None,
) -> Lineage:
    """Several runs in one `Lineage`, told apart by the `run` column (labels default to the
    directories' names, numbered where two are the same)."""
    if not paths:
        raise AnalysisError("load_runs needs at least one run directory")
    if labels is not None and len(labels) != len(paths):
        raise AnalysisError(f"{len(labels)} labels for {len(paths)} runs")
    if labels is None:
        names = [_filesystem(p)[1].rstrip("/").rsplit("/", 1)[-1] or p for p in paths]
        labels = [n if names.count(n) == 1 else f"{n}#{i}" for i, n in enumerate(names)]
    if len(set(labels)) != len(labels):
        raise AnalysisError(f"run labels must differ: {labels}")
    runs = [load_run(p, columns, label) for p, label in zip(paths, labels)]
    return Lineage(
        *(
            pd.concat([getattr(r, t) for r in runs], ignore_index=True)
            for t in ("candidates", "llm_calls", "events")
        ),
        runs=list(labels),
        paths={k: v for r in runs for k, v in r.paths.items()},
        configs={k: v for r in runs for k, v in r.configs.items()},
    )


def read_sources(path_or_uri: str, candidate_ids: list[str]) -> dict[str, str]:
    """The `source` of a few candidates, read without decoding the other rows' sources."""
    ids = pa.array(sorted(set(candidate_ids)), pa.string())
    wanted = pc.field("candidate_id").isin(ids)
    data = read_table(path_or_uri, "candidates", ["candidate_id", "source"], wanted)
    return dict(zip(data["candidate_id"].to_pylist(), data["source"].to_pylist()))
