"""Plain-text renderings of the ops reports, for the command line and logs."""

from __future__ import annotations

from collections.abc import Sequence

from memsvc.core.scope import Scope
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.ops.doctor_report import DoctorReport
from memsvc.ops.gc import GcReport
from memsvc.ops.recall_audit import RecallReport
from memsvc.ops.reembed import ReembedReport
from memsvc.ops.stats import Stats
from memsvc.transfer.export import ExportReport
from memsvc.transfer.legacy import LegacyReport
from memsvc.transfer.loader import LoadReport

MAX_PROBLEMS_SHOWN = 200


def human_bytes(size: int | None) -> str:
    """1536 -> '1.5 KiB'."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned text columns (numbers right-aligned)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(isinstance(row[i], int | float) for row in rows) if rows else False
        for i in range(len(headers))
    ]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def _estimate(rows: int | None) -> int | str:
    return "unknown" if rows is None else rows


def stats_lines(stats: Stats) -> list[str]:
    """``memsvc stats``."""
    lines = ["memories per tenant and scope level:"]
    lines += table(
        ["tenant", "total", "tenant-only", "project", "agent", "session", "expired (gc)",
         "embedded", "keyed"],
        [
            [t.tenant, t.memories, t.tenant_only, t.project, t.agent, t.session, t.expired,
             t.embedded, t.keyed]
            for t in stats.tenants
        ],
    )
    lines += ["", "assemblies and checkpoints per tenant:"]
    lines += table(
        ["tenant", "assemblies", "memberships", "checkpoints", "checkpoint bytes", "sessions"],
        [
            [t.tenant, t.assemblies, t.assembly_members, t.checkpoints,
             human_bytes(t.checkpoint_bytes), t.checkpoint_sessions]
            for t in stats.tenants
        ],
    )
    lines += [
        "",
        f"expired memories waiting for gc: {stats.expired}",
        f"checkpoints: {stats.checkpoints} ({human_bytes(stats.checkpoint_bytes)})",
        f"LangGraph store items: {sum(t.store_items for t in stats.tenants)}",
        "",
        "tables and indexes:",
    ]
    lines += table(
        ["table / index", "size", "with indexes", "indexes", "rows (estimate)"],
        [
            [
                r.name if r.kind == "table" else f"  {r.name}",
                human_bytes(r.bytes),
                human_bytes(r.total_bytes),
                human_bytes(r.index_bytes),
                _estimate(r.estimated_rows) if r.kind == "table" else "",
            ]
            for r in stats.relations
        ],
    )
    return lines


def doctor_lines(report: DoctorReport) -> list[str]:
    """``memsvc doctor``."""
    marks = {"ok": "ok  ", "warning": "WARN", "problem": "FAIL", "repaired": "FIXD"}
    lines = []
    for check in report.checks:
        lines.append(f"[{marks[check.status]}] {check.name}: {check.detail}")
        lines += [f"       fixed: {fix}" for fix in check.fixes]
    problems = len(report.problems)
    if not problems:
        lines.append("no problems")
    else:
        # --repair is suggested only where it can fix something.
        hint = "; try --repair" if report.repairable else ""
        lines.append(f"{problems} problem(s) remain{hint}")
    return lines


def gc_lines(report: GcReport) -> list[str]:
    """``memsvc gc``."""
    lines = [
        f"expired memories deleted: {report.expired_deleted}",
        f"expired LangGraph store items deleted: {report.store_items_expired}",
        f"checkpoints pruned past retention: {report.checkpoints_pruned}",
        f"history events given their commit time: {report.commit_times_persisted}",
    ]
    if report.idle_sessions or report.idle_memories_deleted:
        lines += [
            f"idle sessions removed: {report.idle_sessions} "
            f"({report.idle_memories_deleted} memories, {report.idle_assemblies_deleted} "
            f"assemblies, {report.idle_checkpoints_deleted} checkpoints)"
        ]
    if report.change_events_removed:
        lines.append(f"change events removed past retention: {report.change_events_removed}")
    if report.memories_forgotten or report.forgotten_deleted:
        lines.append(
            f"memories forgotten: {report.memories_forgotten}; forgotten memories deleted "
            f"past their grace period: {report.forgotten_deleted}"
        )
    if report.namespace_indexes_dropped:
        lines.append(
            f"LangGraph store namespace indexes dropped: {report.namespace_indexes_dropped}"
        )
    if report.scope_indexes_built or report.scope_indexes_dropped:
        lines.append(
            f"scope indexes of memories built: {report.scope_indexes_built}; dropped: "
            f"{report.scope_indexes_dropped}"
        )
    lines.append(f"{report.batches} batches in {report.seconds:.1f} s")
    return lines


def reembed_lines(report: ReembedReport) -> list[str]:
    """``memsvc reembed``."""
    lines = [
        f"embedding migration {report.migration_id} to {report.embedder} "
        f"({report.dim} dimensions): switched",
    ]
    if report.already_done:
        lines.append("it had switched already: nothing to do")
        return lines
    lines.append(f"rows embedded by this worker: {report.embedded} in {report.batches} batches")
    if report.switched_here:
        lines.append(f"switched here ({report.caught_up} rows embedded at the switch)")
    else:
        lines.append("switched by another worker")
    return lines


def erasure_lines(receipt: ErasureReceipt) -> list[str]:
    """``memsvc erase``: the receipt."""
    what = "and everything under it" if receipt.include == "descendants" else "exactly"
    lines = [f"erased: {scope_text(receipt.scope)} ({what})"]
    rows = [(name, count) for name, count in sorted(receipt.removed.items())]
    lines += table(["removed", "rows"], rows) if rows else ["nothing to remove"]
    if not receipt.langgraph:
        lines.append("LangGraph checkpoints and store items: kept (erased with whole tenants only)")
    finished = receipt.finished.isoformat() if receipt.finished else "-"
    lines.append(f"started {receipt.started.isoformat()}, finished {finished}")
    if receipt.written_during:
        kept = ", ".join(f"{n} {name}" for name, n in sorted(receipt.written_during.items()))
        lines.append(f"written during the erasure and kept whole: {kept}")
    lines.append(f"working memory: {receipt.working_memory}")
    lines.append("checked:")
    lines += [f"  {sentence}" for sentence in receipt.checked]
    if receipt.verified:
        lines.append("verified: nothing of the scope written before the erasure remains")
    else:
        lines.append("NOT verified; still present (written during the erasure? run it again):")
        lines += [f"  {name}: {count}" for name, count in sorted(receipt.remaining.items())]
    lines.append("kept:")
    lines += [f"  {column}: {why}" for column, why in receipt.kept.items()]
    if receipt.vacuum:
        by_outcome: dict[str, list[str]] = {}
        for name, outcome in sorted(receipt.vacuum.items()):
            by_outcome.setdefault(outcome, []).append(name)
        lines += [f"{outcome}: {', '.join(names)}" for outcome, names in by_outcome.items()]
    return lines


def scope_text(scope: Scope | None) -> str:
    """``tenant 'acme', session 's-1'`` (only the levels given); ``everything`` for None."""
    if scope is None:
        return "everything"
    levels = [("tenant", scope.tenant), ("project", scope.project), ("agent", scope.agent),
              ("session", scope.session)]
    return ", ".join(f"{name} {value!r}" for name, value in levels if value is not None)


def export_lines(report: ExportReport, target: str) -> list[str]:
    """``memsvc export``: the scope selected, what was written, a warning if nothing was."""
    lines = []
    if report.scope is not None:
        lines.append(f"selected scope: {scope_text(report.scope)} and the scopes under it")
    lines.append(
        f"exported {report.memories} memories, {report.assemblies} assemblies, "
        f"{report.checkpoints} checkpoints, {report.store_items} store items "
        f"({report.total} rows) to {target}"
    )
    if report.total == 0:
        lines.append("warning: the selection matched nothing; only the header was written")
    return lines


def load_lines(report: LoadReport, *, dry_run: bool = False) -> list[str]:
    """What a load did, and every rejected record (up to a limit) with its source."""
    lines = []
    if not dry_run:
        for name, counts in (
            ("memories", report.memories),
            ("assemblies", report.assemblies),
            ("checkpoints", report.checkpoints),
            ("store items", report.store_items),
        ):
            lines.append(
                f"{name}: {counts.inserted} inserted, {counts.already_present} already present, "
                f"{counts.rejected} rejected"
            )
    if report.other_rejected:
        # Lines or files that never became a record: with the counts above,
        # they add up to the rejected total listed below.
        lines.append(f"other input: {report.other_rejected} rejected (not a record)")
    if not dry_run:
        lines += report.index_repairs
        if report.index_decision:
            lines.append(report.index_decision)
        if report.index_rebuilt:
            lines.append(
                "vector index dropped for the load and rebuilt "
                f"({report.index_build_seconds:.1f} s); it is valid"
            )
    if report.warnings_total:
        lines.append(f"{report.warnings_total} warning(s):")
        lines += [f"  {p}" for p in report.warnings[:MAX_PROBLEMS_SHOWN]]
    if report.rejected_total:
        lines.append(f"{report.rejected_total} rejected:")
        lines += [f"  {p}" for p in report.rejected[:MAX_PROBLEMS_SHOWN]]
        hidden = report.rejected_total - min(len(report.rejected), MAX_PROBLEMS_SHOWN)
        if hidden > 0:
            lines.append(f"  ... and {hidden} more")
    return lines


def legacy_lines(report: LegacyReport) -> list[str]:
    """``memsvc import-legacy``."""
    lines = [
        f"{report.files_read} files read: {report.memories_found} memories, "
        f"{report.assemblies_found} assemblies, {report.sessions_found} session files"
    ]
    if report.dry_run:
        lines.append(
            f"dry run: would load {report.memories_valid} memories and "
            f"{report.assemblies_valid} assemblies into an empty store (rows already "
            "stored are skipped); nothing was written"
        )
        if report.memories_duplicate or report.assemblies_duplicate:
            lines.append(
                f"{report.memories_duplicate} memories and {report.assemblies_duplicate} "
                "assemblies in the input duplicate an earlier one (same id, content, key "
                "or name in the scope): the load skips or rejects them"
            )
    return lines + load_lines(report.load, dry_run=report.dry_run)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def recall_lines(report: RecallReport) -> list[str]:
    """``memsvc doctor --recall``."""
    lines = [
        f"recall audit: recall@{report.k} of search against an exact scan, "
        f"up to {report.sample} queries per scope-size bucket",
    ]
    lines += table(
        ["scope rows", "scopes", "queries", f"recall@{report.k}", "worst", "short pages"],
        [
            [b.label, b.scopes, b.queries, _share(b.recall), _share(b.worst), b.short_pages]
            for b in report.buckets
        ],
    )
    if report.ok:
        lines.append(f"recall ok: every bucket at or above {report.threshold:g}")
    else:
        below = ", ".join(f"{b.label} ({_share(b.recall)})" for b in report.failing)
        lines.append(f"RECALL BELOW {report.threshold:g} in scopes of {below} rows")
    return lines
