"""SQL of :mod:`memsvc.erasure.check`: what is left of an erased scope.

Tables are read from the catalog, so one added later is checked without a
code change. A table is *scoped* when it has the four scope columns: its rows
belong to a scope, and the check looks at the erased scope's rows there. The
others (only a ``tenant_id``, or none) are searched for the erased texts.

The erased texts live, for the check's transaction only, in two temporary
tables (dropped at commit, never written to the WAL): their fingerprints
(``sha256(key || text)``, the key known only to the erasing process) and
their distinct byte lengths, which let most values be dismissed without
hashing them.
"""

from __future__ import annotations

from memsvc.db.sql import Params, quote_ident
from memsvc.erasure.queries import (
    committed_before,
    entity_gone,
    json_strings,
    names_below,
    same_scope,
)

# Column types the text search reads; bytea only for substrings.
TEXT_TYPES = ("text", "varchar", "bpchar")
JSON_TYPES = ("json", "jsonb")
ARRAY_TYPES = ("_text", "_varchar", "_bpchar")
BYTES_TYPES = ("bytea",)
SEARCHED_TYPES = TEXT_TYPES + JSON_TYPES + ARRAY_TYPES + BYTES_TYPES

# Every table of the schema (partitioned ones once, by their parent), with
# its searchable columns (not the scope columns: ids, checked by scope) and
# whether it has a tenant and a scope.
RELATIONS = """
SELECT c.relname AS name,
       coalesce(array_agg(a.attname::text ORDER BY a.attnum) FILTER (
           WHERE t.typname = ANY($2::text[]) AND a.attname <> ALL($3::text[])), '{}') AS columns,
       coalesce(array_agg(t.typname::text ORDER BY a.attnum) FILTER (
           WHERE t.typname = ANY($2::text[]) AND a.attname <> ALL($3::text[])), '{}') AS types,
       bool_or(a.attname = 'tenant_id') AS has_tenant,
       count(*) FILTER (WHERE a.attname IN ('tenant_id', 'project_id', 'agent_id', 'session_id'))
           = 4 AS scoped
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type AS t ON t.oid = a.atttypid
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm') AND NOT c.relispartition
GROUP BY c.relname
ORDER BY c.relname"""

NOW = "SELECT clock_timestamp()"


# ------------------------------------------------------------------ structure

WRITTEN_DURING = ("memories", "assemblies", "session_checkpoints", "remembered_messages")


def kept_event(schema: str, tenant: str = "t.tenant_id") -> str:
    """An event (alias t) of a memory still there in the same scope: kept whole.

    ``tenant``: the events' tenant as a value, where the statement names one
    (Citus routes a statement to one shard only when every table read is
    filtered by the tenant's value).
    """
    return f"""EXISTS (
        SELECT 1 FROM {schema}.memories AS m
        WHERE m.tenant_id = {tenant} AND m.id = t.memory_id AND {same_scope("m", "t")})"""


def left_in_scope(schema: str, table: str, scope_sql: str, snapshot: str, depth: int) -> dict[
    str, str
]:
    """What of ``table``'s rows in the scope (``scope_sql`` on alias t) must not be there.

    Per name, a FROM/WHERE text for :func:`count_of`. Tables the erasure
    knows have their rules (tombstones and ``deleted`` ledger events stay,
    without ids below the named level ``depth``; rows written while it ran
    are kept whole); in any other scoped table every row of the scope is
    left over.
    """
    scope = f"{table} AS t WHERE {scope_sql}"
    if table in WRITTEN_DURING:
        return {table: f"{scope} AND {committed_before('t.created_xid', snapshot)}"}
    if table == "memory_events":
        return {
            table: f"{scope} AND NOT (t.kind = 'erased' AND t.prior IS NULL)"
            f" AND NOT {kept_event(schema)}",
            "memory_events.scope_ids": f"{scope} AND t.kind = 'erased'"
            f" AND {names_below(depth, 't.')}",
        }
    if table == "entity_events":
        return {
            table: f"{scope} AND t.kind <> 'deleted' AND {entity_gone(schema, 't')}",
            "entity_events.scope_ids": f"{scope} AND t.kind = 'deleted'"
            f" AND {names_below(depth, 't.')}",
        }
    return {table: scope}


def written_during(table: str, scope_sql: str, snapshot: str) -> str:
    """FROM/WHERE text: rows of the scope created by transactions after the cut."""
    return f"{table} AS t WHERE {scope_sql} AND NOT {committed_before('t.created_xid', snapshot)}"


def count_of(schema: str, from_where: str) -> str:
    """``(SELECT count(*) FROM <schema>.<from_where>)``."""
    return f"(SELECT count(*) FROM {schema}.{from_where})"


def counts(columns: dict[str, str]) -> str:
    """One row: each name's scalar subquery."""
    return "SELECT " + ",\n       ".join(
        f"{sql} AS {quote_ident(name)}" for name, sql in columns.items()
    )


# ------------------------------------------------------------------- texts

TEXTS = "memsvc_erased_texts"
RAW_TEXTS = "memsvc_erased_texts_raw"
LENGTHS = "memsvc_erased_lengths"

CREATE_RAW_TEXTS = f"""
CREATE TEMP TABLE {RAW_TEXTS} (fingerprint bytea NOT NULL, length int NOT NULL)
ON COMMIT DROP"""

# Distinct fingerprints with an index (looked up once per value scanned), and
# the distinct lengths (a value of another length is no erased text).
INDEX_TEXTS = f"""
CREATE TEMP TABLE {TEXTS} ON COMMIT DROP AS
    SELECT DISTINCT fingerprint, length FROM {RAW_TEXTS};
DROP TABLE {RAW_TEXTS};
CREATE UNIQUE INDEX ON {TEXTS} (fingerprint);
CREATE TEMP TABLE {LENGTHS} ON COMMIT DROP AS SELECT DISTINCT length FROM {TEXTS};
ANALYZE {TEXTS};
ANALYZE {LENGTHS}"""

COUNT_TEXTS = f"SELECT count(*) FROM {TEXTS}"

# Which of the fingerprints ``$1`` are still looked for.
STILL_LOOKED_FOR = f"SELECT fingerprint FROM {TEXTS} WHERE fingerprint = ANY($1::bytea[])"


def json_keys(document: str) -> str:
    """Every object key inside a JSON document, at any depth (a set-returning call)."""
    return (
        f"jsonb_path_query({document}, "
        """'strict $.** ? (@.type() == "object").keyvalue().key')"""
    )


def whole_values(column: str, type_name: str) -> str | None:
    """A SELECT of the column's values seen as texts (JSON strings and keys, array elements)."""
    if type_name in TEXT_TYPES:
        return f"SELECT {column}::text"
    if type_name in JSON_TYPES:
        document = f"{column}::jsonb"
        return (
            f"SELECT j #>> '{{}}' FROM {json_strings(document)} AS j "
            f"UNION ALL SELECT k #>> '{{}}' FROM {json_keys(document)} AS k"
        )
    if type_name in ARRAY_TYPES:
        return f"SELECT e::text FROM unnest({column}) AS e"
    return None  # bytea: substrings only


# The erased texts as two arrays, for Citus: a shard query cannot read the
# coordinator's temporary tables.
TEXT_ARRAYS = f"""
SELECT coalesce(array_agg(fingerprint), '{{}}') AS fingerprints,
       (SELECT coalesce(array_agg(length), '{{}}') FROM {LENGTHS}) AS lengths
FROM {TEXTS}"""


def erased(value: str, key: str, arrays: tuple[str, str] | None = None) -> str:
    """Whether the text ``value`` is one of the erased texts (length first, then the hash).

    ``arrays``: placeholders of the fingerprints and lengths (:data:`TEXT_ARRAYS`)
    to look them up in, instead of the temporary tables.
    """
    if arrays is not None:
        fingerprints, lengths = arrays
        return (
            f"(octet_length({value}) = ANY({lengths}::int[]) AND "
            f"sha256({key}::bytea || convert_to({value}, 'UTF8')) = ANY({fingerprints}::bytea[]))"
        )
    return (
        f"(octet_length({value}) IN (SELECT length FROM {LENGTHS}) AND EXISTS ("
        f"SELECT 1 FROM {TEXTS} AS x "
        f"WHERE x.fingerprint = sha256({key}::bytea || convert_to({value}, 'UTF8'))))"
    )


def held_outside(schema: str, table: str, columns: list[tuple[str, str]], rows: str,
                 key: str) -> str:
    """Forget the erased texts that rows ``rows`` of ``table`` (alias t) hold as whole values.

    Those rows are another scope's (or kept whole): their texts are theirs,
    and finding them elsewhere would accuse the innocent.
    """
    return f"""
DELETE FROM {TEXTS} AS x USING (
    {fingerprints_held(schema, table, columns, rows, key, f"SELECT length FROM {LENGTHS}")}
) AS h
WHERE x.fingerprint = h.fingerprint"""


def fingerprints_held(
    schema: str, table: str, columns: list[tuple[str, str]], rows: str, key: str, lengths: str
) -> str:
    """The fingerprints of the whole values that rows ``rows`` of ``table`` hold.

    ``lengths``: the erased texts' lengths, a subquery or (on Citus, whose
    shards cannot read the coordinator's temporary tables) an array
    parameter's elements.
    """
    values = [v for name, kind in columns if (v := whole_values(f"t.{quote_ident(name)}", kind))]
    union = " UNION ALL ".join(values)
    return f"""SELECT DISTINCT sha256({key}::bytea || convert_to(v.t, 'UTF8')) AS fingerprint
    FROM {schema}.{quote_ident(table)} AS t
    CROSS JOIN LATERAL ({union}) AS v(t)
    WHERE {rows} AND octet_length(v.t) IN ({lengths})"""


# Forget the fingerprints ``$1`` (found on Citus's shards by fingerprints_held).
FORGET_TEXTS = f"DELETE FROM {TEXTS} WHERE fingerprint = ANY($1::bytea[])"


def kept_rows(schema: str, table: str, snapshot: str, tenant: str) -> str:
    """Rows (alias t) of tenant ``tenant`` (a placeholder) of the scope that the erasure keeps
    whole (written while it ran)."""
    if table in WRITTEN_DURING:
        return f"NOT {committed_before('t.created_xid', snapshot)}"
    if table == "memory_events":
        return kept_event(schema, tenant)
    return "FALSE"


def texts_found(
    schema: str, table: str, columns: list[tuple[str, str]], params: Params, *,
    tenant: str | None, key: str, substrings: list[str],
    arrays: tuple[str, str] | None = None,
) -> str:
    """Per column of a table without scope: rows holding an erased text, in one scan.

    Whole values (text, JSON strings and keys, array elements) by
    fingerprint (``key`` the placeholder of the fingerprint key); with
    ``substrings``, also any value containing one of them (bytea: their
    UTF-8 bytes). ``tenant``: only that tenant's rows. ``arrays``: see
    :func:`erased`. Binds what it uses in ``params``; returns "" when the
    table has no column to search.
    """
    bound: dict[str, str] = {}

    def bind(name: str, value: object) -> str:
        if name not in bound:
            bound[name] = params.add(value)
        return bound[name]

    selects = []
    for name, kind in columns:
        column = f"t.{quote_ident(name)}"
        tests = []
        values = whole_values(column, kind)
        if values is not None:
            tests.append(
                f"EXISTS (SELECT 1 FROM ({values}) AS v(t) WHERE {erased('v.t', key, arrays)})"
            )
        if substrings and kind in TEXT_TYPES + JSON_TYPES:
            tests.append(
                f"EXISTS (SELECT 1 FROM unnest({bind('texts', substrings)}::text[]) AS s "
                f"WHERE strpos({column}::text, s) > 0)"
            )
        elif substrings and kind in ARRAY_TYPES:
            tests.append(
                f"EXISTS (SELECT 1 FROM unnest({column}) AS e, "
                f"unnest({bind('texts', substrings)}::text[]) AS s WHERE strpos(e::text, s) > 0)"
            )
        elif substrings and kind in BYTES_TYPES:
            encoded = [text.encode() for text in substrings]
            tests.append(
                f"EXISTS (SELECT 1 FROM unnest({bind('bytes', encoded)}::bytea[]) AS s "
                f"WHERE position(s IN {column}) > 0)"
            )
        if tests:
            selects.append(f"count(*) FILTER (WHERE {' OR '.join(tests)}) AS {quote_ident(name)}")
    if not selects:
        return ""
    where = f"WHERE t.tenant_id = {params.add(tenant)}" if tenant is not None else ""
    return f"""
SELECT {", ".join(selects)}
FROM {schema}.{quote_ident(table)} AS t
{where}"""
