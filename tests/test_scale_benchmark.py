"""The growth-curve benchmark's bookkeeping: layout, import lines, recall, targets."""

from __future__ import annotations

import json
import statistics
from collections import Counter

import numpy as np

from benchmarks import scale
from memsvc import Scope, Settings
from memsvc.memories.repository import content_hash
from memsvc.transfer import records


def test_layout_holds_the_measured_scopes_and_heavy_tailed_tenants() -> None:
    layout = scale.Layout()
    layout.grow(10_000)
    # Rows 0..199, a quarter of them with b == 1 (the filtered searches' rows).
    assert layout.rows_in(scale.SMALL_SCOPE, "exact") == (200, 50)
    assert not layout.has_mid  # 10,000 rows of a 10,000-row store would be all of it
    layout.grow(40_000)
    assert layout.rows_in(scale.MID_SCOPE, "exact")[0] == scale.MID_ROWS
    assert layout.rows_in(scale.SMALL_SCOPE, "exact")[0] == 200
    assert len(layout.tenants) == 40_000
    assert sum(rows for rows, _ in layout.scope_rows.values()) == 40_000
    rest = 40_000 - 200 - scale.MID_ROWS
    big = layout.rows_in(scale.TENANT_SCOPE, "descendants")[0] - scale.MID_ROWS
    assert 0.25 * rest < big < 0.35 * rest
    sizes = Counter(t for t in layout.tenants if t.startswith("t"))
    assert len(sizes) >= 40
    assert max(sizes.values()) > 20 * statistics.median(sizes.values())


def test_the_real_tenant_holds_each_real_row_once_in_its_data_set_scope() -> None:
    layout = scale.Layout()
    layout.grow(10_000)
    scope_ids = np.array([3, 3, 5, 3, 7])
    keys = layout.add_real(scope_ids)
    assert keys == [("real", f"s{s}", None, None) for s in scope_ids]
    assert layout.rows_in(Scope("real"), "descendants") == (5, 1)
    assert layout.rows_in(Scope("real", "s3"), "exact")[0] == 3
    assert layout.real_project == "s3"
    assert len(layout.tenants) == 10_000  # row numbers (gets) are the growth's alone
    labels = [s.label for s in scale.measured_scopes(layout)]
    assert labels[-2:] == [
        "real tenant, descendants (5 real rows)", "real tenant's largest project (3 real rows)"
    ]


def test_growth_lines_are_import_lines_on_the_fast_path() -> None:
    rng = np.random.default_rng(1)
    vector = rng.normal(size=scale.DIM)
    vector /= np.linalg.norm(vector)
    memory_id = scale.row_id(7)
    line = scale.memory_line(memory_id, ("t1", "p2", "a0", None), "memory 7", {"n": 7, "b": 3},
                             vector)
    record = records.record_from_json(json.loads(line), Settings())
    assert isinstance(record, records.MemoryRecord)
    assert record.id == memory_id
    assert record.scope == Scope("t1", "p2", "a0")
    assert record.content_hash == content_hash("memory 7")
    assert json.loads(record.metadata) == {"n": 7, "b": 3}
    np.testing.assert_allclose(np.asarray(record.embedding, dtype=np.float64), vector, atol=1e-6)
    # The import cuts the vector's numbers out, to parse them a batch at a time.
    assert records.split_embedding(line.encode(), scale.DIM, "cosine") is not None


def test_recall_counts_a_hit_tying_the_tenth_neighbour() -> None:
    truth = [{"id": i, "distance": 0.1 * i} for i in range(10)]
    assert scale.tie_aware_recall([(i, 0.1 * i) for i in range(10)], truth) == 1.0
    nine = [(i, 0.1 * i) for i in range(9)]
    assert scale.tie_aware_recall([*nine, ("other", 0.9)], truth) == 1.0
    assert scale.tie_aware_recall([*nine, ("other", 0.95)], truth) == 0.9
    assert scale.tie_aware_recall([], []) == 1.0


def test_results_are_held_to_the_issue_targets() -> None:
    def ok(kind: str, memsvc: float, raw: float | None) -> bool | None:
        return scale.Result(1, "figure", "", memsvc, raw, kind).ok

    assert ok("throughput", 80, 100) and not ok("throughput", 79, 100)
    assert ok("latency", 1.25, 1.0) and not ok("latency", 1.26, 1.0)
    assert ok("recall", 0.95, None) and not ok("recall", 0.949, None)
    assert ok("count", 0, None) and not ok("count", 1, None)
    assert ok("rss", 299, 100) and not ok("rss", 300, 100)
    assert ok("info", 10, 5) is None


def test_read_rounds_are_summed_up_by_their_medians(capsys: object) -> None:
    rounds = [
        scale.Result(10, "search p50, x", "ms", memsvc, raw, "latency", read_round=n)
        for n, (memsvc, raw) in enumerate(((2.0, 10.0), (9.0, 11.0), (3.0, 30.0)), 1)
    ]
    writes = scale.Result(10, "add (single)", "ops/s", 80, 100, "throughput")
    scale.summary([*rounds, writes])
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    median = next(line for line in out.splitlines() if "(median)" in line)
    # memsvc's median, raw's, and their ratio.
    assert median.split()[-6:] == ["3", "11", "0.27x", "<=", "1.25x", "ok"]
    # Targets are counted once per figure: the first round's.
    assert "2 figures on target, 0 missed" in out
