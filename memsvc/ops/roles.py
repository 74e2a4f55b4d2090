"""Least privilege: a migration role that owns the schema, a runtime role that only uses rows.

``memsvc roles --print-sql`` prints the script of :func:`roles_sql` for a
DBA to review and run. Deploy pipelines then migrate as the migration role,
and apps connect as the runtime role, which can read and write rows but
cannot change the schema (no CREATE on it) or TRUNCATE tables.
"""

from __future__ import annotations

import re

from memsvc.core.errors import ValidationError
from memsvc.ops.roles_queries import ROLE_SCRIPT

DEFAULT_MIGRATION_ROLE = "memsvc_migrator"
DEFAULT_RUNTIME_ROLE = "memsvc_app"

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _identifier(field: str, value: str) -> str:
    # Interpolated into SQL text: plain lower-case identifiers only.
    if not _IDENTIFIER.match(value):
        raise ValidationError(field, "must be a lower-case identifier: [a-z_][a-z0-9_]{0,62}")
    return value


def roles_sql(
    schema: str = "memsvc",
    *,
    migration_role: str = DEFAULT_MIGRATION_ROLE,
    runtime_role: str = DEFAULT_RUNTIME_ROLE,
) -> str:
    """The SQL script creating both roles and their privileges on ``schema``.

    Raises:
        ValidationError: A name is not a plain lower-case identifier, or the
            two roles are the same.
    """
    schema = _identifier("schema", schema)
    migration = _identifier("migration_role", migration_role)
    runtime = _identifier("runtime_role", runtime_role)
    if migration == runtime:
        raise ValidationError("runtime_role", "must differ from the migration role")
    return ROLE_SCRIPT.format(schema=schema, migration=migration, runtime=runtime)
