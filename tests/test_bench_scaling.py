"""The scaling benchmark runs end to end on CPU workers (its figures come from GPUs)."""

from __future__ import annotations

from experiments.bench import scaling


def test_scaling_judges_the_same_distinct_batch_on_each_worker_count(ray_cluster, capsys):
    rows = scaling.main(["--device", "cpu", "--workers", "1", "2", "--n", "3"])
    assert [r["workers"] for r in rows] == [1, 2]
    for r in rows:
        assert r["verdicts"] == 3 and r["statuses"] == {"correct": 3}
        assert len(r["placement"]) == r["workers"]
    assert rows[0]["efficiency"] == 1.0
    expected = rows[1]["per_min"] / (2 * rows[0]["per_min"])
    assert abs(rows[1]["efficiency"] - expected) < 1e-3
    assert "| workers | verdicts |" in capsys.readouterr().out


def test_small_shapes_and_rows_written_as_they_are_measured(ray_cluster, tmp_path):
    import json

    out = tmp_path / "rows.json"
    rows = scaling.main(["--device", "cpu", "--workers", "1", "--n", "2", "--small",
                         "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == rows and rows[0]["statuses"] == {"correct": 2}
    assert all(isinstance(v, dict) and v for v in scaling.SMALL.values())  # a SHAPES entry each
    req = scaling._req("builtin:softmax", "src")
    assert req["overrides"] == scaling.SMALL["builtin:softmax"]
