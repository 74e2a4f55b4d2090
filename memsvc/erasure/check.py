"""The check after an erasure: what of the erased scope is left, and what was looked at.

Three looks, each stated in the receipt's ``checked``:

- **By scope**, in every table of the schema with the four scope columns
  (from the catalog): no row of the scope created by a transaction committed
  before the erasure began, except content-free tombstones and ``deleted``
  ledger events, which keep no real id below the level the caller named.
  For a whole tenant, also no row of it in the tables with only a tenant
  column.
- **By content**: every text the erasure removed (of 8 bytes or more:
  contents, keys and metadata string values of memories and their history,
  assembly names, descriptions and metadata strings, checkpoint descriptions
  and data strings) that no row outside the scope also holds, history
  included, is looked for in every table without scope columns: as a whole
  value (text, JSON string values and keys at any depth, array elements)
  and, when few enough, inside longer values (text, JSON text, array
  elements, bytea). Texts another scope holds are that scope's: not looked
  for, so ``remaining`` never names a row of another scope.
- **Working memory**, where it lives (Redis, or the in-process store): no
  key of the scope's sessions.

It runs in one transaction (the texts in temporary tables of that
transaction, streamed from :class:`~memsvc.erasure.texts.ErasedTexts`);
the working-memory look comes last.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from memsvc.core.settings import Settings
from memsvc.db.repository import Repository
from memsvc.db.sql import COLUMNS, Params, quote_ident
from memsvc.erasure import check_queries as q
from memsvc.erasure.plan import ErasurePlan
from memsvc.erasure.queries import MIN_TEXT_BYTES
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.erasure.texts import SUBSTRING_MAX_BYTES, SUBSTRING_MAX_TEXTS, SUBSTRING_MIN_BYTES
from memsvc.working import WorkingStore


@dataclass(frozen=True)
class Relation:
    """One table of the schema, as the catalog describes it."""

    name: str
    columns: list[tuple[str, str]]  # (name, type) of the columns the text search reads
    has_tenant: bool
    scoped: bool

    @property
    def text_columns(self) -> list[tuple[str, str]]:
        """The columns holding text as whole values (bytea is only searched inside)."""
        return [(name, kind) for name, kind in self.columns if kind not in q.BYTES_TYPES]


class ErasureCheck(Repository):
    """Looks for what is left of an erased scope; fills the receipt's check fields."""

    def __init__(
        self, pool: asyncpg.Pool, settings: Settings, *, working_store: WorkingStore
    ) -> None:
        super().__init__(pool, settings)
        self._working_store = working_store

    async def verify(self, plan: ErasurePlan, receipt: ErasureReceipt) -> None:
        """Fill ``remaining``, ``written_during``, ``checked``, ``finished`` and ``verified``."""
        found: dict[str, int] = {}
        async with self._transaction(tenant=plan.scope.tenant) as conn:
            relations = [
                Relation(
                    row["name"], list(zip(row["columns"], row["types"], strict=True)),
                    bool(row["has_tenant"]), bool(row["scoped"]),
                )
                for row in await conn.fetch(
                    q.RELATIONS, self._schema, list(q.SEARCHED_TYPES), list(COLUMNS)
                )
            ]
            found.update(await self._structure_left(conn, plan, relations, receipt))
            found.update(await self._texts_left(conn, plan, relations, receipt))
            receipt.finished = await conn.fetchval(q.NOW)
        # Working memory last, outside the database check's transaction.
        found.update(await self._working_memory_left(plan, receipt))
        receipt.remaining = found
        receipt.verified = not found

    async def _structure_left(
        self,
        conn: asyncpg.Connection,
        plan: ErasurePlan,
        relations: list[Relation],
        receipt: ErasureReceipt,
    ) -> dict[str, int]:
        params = Params()
        scope_sql = plan.scope_sql(params, "t")
        snapshot = params.add(plan.snapshot)
        scoped = [r.name for r in relations if r.scoped]
        left: dict[str, str] = {}
        for table in scoped:
            for name, rows in q.left_in_scope(
                self._schema, table, scope_sql, snapshot, plan.depth
            ).items():
                left[name] = q.count_of(self._schema, rows)
        tenant_only = [r.name for r in relations if r.has_tenant and not r.scoped]
        if plan.whole_tenant:
            tenant = params.add(plan.scope.tenant)
            for table in tenant_only:
                rows = f"{quote_ident(table)} AS t WHERE t.tenant_id = {tenant}"
                left[table] = q.count_of(self._schema, rows)
        during = {
            table: q.count_of(self._schema, q.written_during(table, scope_sql, snapshot))
            for table in q.WRITTEN_DURING
        }
        row = await conn.fetchrow(q.counts(left | {f"during {t}": s for t, s in during.items()}),
                                  *params.values)
        receipt.written_during = {
            table: row[f"during {table}"] for table in q.WRITTEN_DURING if row[f"during {table}"]
        }
        receipt.checked.append(
            f"rows of the scope in every table with scope columns ({', '.join(scoped)}): "
            "none created by a transaction committed before the erasure began, but "
            "content-free tombstones and 'deleted' ledger events"
            + (", which hold no real id below the erased level" if plan.depth < 3 else "")
        )
        if plan.whole_tenant:
            receipt.checked.append(
                f"rows of the tenant in the tables with only a tenant column "
                f"({', '.join(tenant_only)}): none"
            )
        return {name: row[name] for name in left if row[name]}

    async def _texts_left(
        self,
        conn: asyncpg.Connection,
        plan: ErasurePlan,
        relations: list[Relation],
        receipt: ErasureReceipt,
    ) -> dict[str, int]:
        texts = plan.texts
        if not texts.count:
            receipt.checked.append(
                f"texts: the erasure removed none of {MIN_TEXT_BYTES} bytes or more"
            )
            return {}
        await conn.execute(q.CREATE_RAW_TEXTS)
        await conn.copy_records_to_table(
            q.RAW_TEXTS, records=texts.records(), columns=("fingerprint", "length")
        )
        await conn.execute(q.INDEX_TEXTS)
        removed = await conn.fetchval(q.COUNT_TEXTS)
        on_citus = await self._on_citus()
        if not plan.whole_tenant:
            lengths = (await conn.fetchrow(q.TEXT_ARRAYS))["lengths"] if on_citus else None
            for relation in relations:
                if relation.scoped and relation.text_columns:
                    await self._forget_held_outside(conn, plan, relation, lengths)
        looked_for = await conn.fetchval(q.COUNT_TEXTS)
        substrings = await self._substrings(conn, plan)
        # On Citus the texts go to the shards as arrays (see q.TEXT_ARRAYS).
        text_arrays = await conn.fetchrow(q.TEXT_ARRAYS) if on_citus else None
        found: dict[str, int] = {}
        searched = []
        for relation in relations:
            if relation.scoped:
                continue
            params = Params(texts.key)
            arrays = None
            if text_arrays is not None:
                arrays = (
                    params.add(text_arrays["fingerprints"]), params.add(text_arrays["lengths"])
                )
            sql = q.texts_found(
                self._schema, relation.name, relation.columns, params,
                tenant=plan.scope.tenant if relation.has_tenant else None,
                key="$1", substrings=substrings, arrays=arrays,
            )
            if not sql:
                continue
            searched.append(relation.name)
            row = await conn.fetchrow(sql, *params.values)
            found.update({f"{relation.name}.{name}": n for name, n in row.items() if n})
        receipt.checked += self._texts_checked(
            plan, removed, looked_for, searched, len(substrings)
        )
        return found

    async def _forget_held_outside(
        self,
        conn: asyncpg.Connection,
        plan: ErasurePlan,
        relation: Relation,
        lengths: list[int] | None,
    ) -> None:
        """Drop from the texts looked for those this table's rows outside the scope hold.

        ``lengths``: on Citus, the texts' lengths (the shards find the
        fingerprints, the coordinator forgets them).
        """
        params = Params(plan.texts.key)
        tenant = params.add(plan.scope.tenant)
        scope_sql = plan.scope_sql(params, "t")
        snapshot = params.add(plan.snapshot) if relation.name in q.WRITTEN_DURING else ""
        kept = q.kept_rows(self._schema, relation.name, snapshot, tenant)
        rows = f"t.tenant_id = {tenant} AND (({scope_sql}) IS NOT TRUE OR {kept})"
        if lengths is None:
            sql = q.held_outside(self._schema, relation.name, relation.text_columns, rows, "$1")
            await conn.execute(sql, *params.values)
            return
        in_lengths = f"SELECT unnest({params.add(lengths)}::int[])"
        sql = q.fingerprints_held(
            self._schema, relation.name, relation.text_columns, rows, "$1", in_lengths
        )
        held = [row["fingerprint"] for row in await conn.fetch(sql, *params.values)]
        if held:
            await conn.execute(q.FORGET_TEXTS, held)

    @staticmethod
    async def _substrings(conn: asyncpg.Connection, plan: ErasurePlan) -> list[str]:
        """The plain texts kept for the substring search that are still looked for."""
        texts = plan.texts
        candidates = texts.substring_texts()
        if not candidates:
            return []
        fingerprints = [texts.fingerprint(text) for text in candidates]
        still = {row["fingerprint"] for row in await conn.fetch(q.STILL_LOOKED_FOR, fingerprints)}
        return [text for text, f in zip(candidates, fingerprints, strict=True) if f in still]

    @staticmethod
    def _texts_checked(
        plan: ErasurePlan, removed: int, looked_for: int, searched: list[str], substrings: int
    ) -> list[str]:
        held = removed - looked_for
        lines = [
            f"{removed} distinct texts removed ({MIN_TEXT_BYTES} bytes or more: contents, keys "
            "and metadata string values of memories and their history, assembly names, "
            "descriptions and metadata strings, checkpoint descriptions and data strings); "
            f"{held} of them also held by rows outside the scope or written during the "
            "erasure, so theirs, and not looked for",
            f"the other {looked_for} looked for as whole values (text, JSON string values and "
            "keys at any depth, array elements) in every table without scope columns "
            f"({', '.join(searched)}): the tenant's rows, and all rows of tables without a "
            "tenant column",
        ]
        if plan.texts.substrings_overflowed:
            lines.append(
                f"substrings: not looked for (more than {SUBSTRING_MAX_TEXTS} texts of "
                f"{SUBSTRING_MIN_BYTES} bytes or more, or over {SUBSTRING_MAX_BYTES // 1024} "
                "KiB of them)"
            )
        else:
            lines.append(
                f"substrings: {substrings} of them ({SUBSTRING_MIN_BYTES} bytes or more) also "
                "looked for inside longer values of those tables (text, JSON text, array "
                "elements, bytea)"
            )
        return lines

    async def _working_memory_left(
        self, plan: ErasurePlan, receipt: ErasureReceipt
    ) -> dict[str, int]:
        left = await self._working_store.count_state(
            plan.scope, descendants=plan.include == "descendants"
        )
        receipt.checked.append(
            f"working memory, in {receipt.working_memory}: "
            + (f"{left} keys of the scope's sessions" if left else "no key of the scope's sessions")
        )
        return {"working_memory_keys": left} if left else {}
