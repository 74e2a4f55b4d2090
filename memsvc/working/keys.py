"""Redis key names for working memory: injective, and hash-tagged per session.

Every key of a session looks like ``memsvc:wm:{<scope>}:<kind>`` where
``<scope>`` encodes the four scope ids so that no two scopes share it:

* an unset level is ``-``;
* a set level is ``<n>:<escaped id>``, with ``%``, ``{`` and ``}`` escaped as
  ``%25``, ``%7B`` and ``%7D`` and ``n`` the length of the escaped id.

The length prefix makes each level self-delimiting (so ``"a:b"+"c"`` and
``"a"+"b:c"`` differ), and the escaping keeps braces out of the hash tag, so
the first ``}`` always closes it: Redis Cluster then hashes exactly the scope
part and every key of a session lands in the same slot. User keys are appended
raw after ``}:k:``; the part before them is self-delimiting, so no escaping is
needed there. :func:`parse_key` inverts :func:`SessionKeys.value`, which is
what makes the mapping injective.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from memsvc.core.scope import Scope

NAMESPACE = "memsvc:wm:"

_ESCAPE = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})
_UNESCAPE = (("%7B", "{"), ("%7D", "}"), ("%25", "%"))
_KINDS = ("idx", "task", "pad", "meta")


def _encode_levels(levels: tuple[str | None, ...]) -> str:
    parts: list[str] = []
    for value in levels:
        if value is None:
            parts.append("-")
        else:
            escaped = value.translate(_ESCAPE)
            parts.append(f"{len(escaped)}:{escaped}")
    return "".join(parts)


def encode_scope(scope: Scope) -> str:
    """The injective, brace-free text of a scope used inside the hash tag."""
    return _encode_levels(scope.levels)


def tenant_key_pattern(tenant: str) -> str:
    """The Redis ACL key pattern matching every working-memory key of one tenant.

    Keys of tenant ``t`` all begin with ``memsvc:wm:{<n>:<escaped t>`` and,
    the level being length-prefixed, no other tenant's keys do. Glob
    characters in the id are escaped, so the pattern matches that prefix
    only. Use it as ``ACL SETUSER <user> on ><password> ~<pattern> +@all``.
    """
    escaped = tenant.translate(_ESCAPE)
    prefix = f"{NAMESPACE}{{{len(escaped)}:{escaped}"
    globbed = "".join("\\" + char if char in "*?[]\\" else char for char in prefix)
    return globbed + "*"


def scope_key_pattern(scope: Scope, *, descendants: bool) -> str:
    """A Redis SCAN pattern matching the working-memory keys of ``scope``'s sessions.

    With ``descendants`` it matches every session nested under ``scope``
    (its levels down to the deepest set one are a prefix of the encoded
    scope, each level being self-delimiting); otherwise only the session
    that is exactly ``scope``. Glob characters in ids are escaped.
    """
    if descendants:
        prefix = f"{NAMESPACE}{{{_encode_levels(scope.levels[: scope.depth + 1])}"
    else:
        prefix = f"{NAMESPACE}{{{encode_scope(scope)}}}:"
    globbed = "".join("\\" + char if char in "*?[]\\" else char for char in prefix)
    return globbed + "*"


def in_scope(session: Scope, scope: Scope, *, descendants: bool) -> bool:
    """Whether ``session`` is ``scope`` itself or (with ``descendants``) nested under it."""
    if not descendants:
        return session == scope
    depth = scope.depth
    return session.levels[: depth + 1] == scope.levels[: depth + 1]


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        for code, char in _UNESCAPE:
            if text.startswith(code, i):
                out.append(char)
                i += 3
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def decode_scope(text: str) -> Scope:
    """Invert :func:`encode_scope`; raises ``ValueError`` on malformed text."""
    levels: list[str | None] = []
    i = 0
    while len(levels) < 4:
        if text.startswith("-", i):
            levels.append(None)
            i += 1
            continue
        colon = text.index(":", i)
        length_text = text[i:colon]
        if not length_text.isdigit():
            raise ValueError(f"bad level length at {i}")
        length = int(length_text)
        levels.append(_unescape(text[colon + 1 : colon + 1 + length]))
        i = colon + 1 + length
    if i != len(text):
        raise ValueError("trailing text after four levels")
    tenant = levels[0]
    if tenant is None:
        raise ValueError("the tenant is always set")
    return Scope(tenant, levels[1], levels[2], levels[3])


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The Redis keys of one session (all in the same Redis Cluster slot)."""

    tag: str
    """The hash tag, braces included: ``{<encoded scope>}``."""
    index: str
    """Set of the session's live user keys (names only)."""
    task: str
    """Hash of task-state fields, each value JSON text."""
    scratchpad: str
    """List of scratchpad entries, each JSON text."""
    meta: str
    """Hash of session metadata (``created_at``)."""
    value_prefix: str
    """Prefix of the string key holding one user value; the user key follows."""

    @property
    def structures(self) -> list[str]:
        """The four per-session keys: index, task, scratchpad, meta."""
        return [self.index, self.task, self.scratchpad, self.meta]

    def value(self, key: str) -> str:
        """The Redis key holding user key ``key``."""
        return self.value_prefix + key


@lru_cache(maxsize=4096)
def session_keys(scope: Scope) -> SessionKeys:
    """Build (and cache) the key names of ``scope``'s session."""
    prefix = f"{NAMESPACE}{{{encode_scope(scope)}}}:"
    # The Lua scripts get only the index key and rebuild the others by swapping
    # its "idx" suffix (see memsvc.working.redis_scripts): keep them in step.
    return SessionKeys(
        tag=prefix[len(NAMESPACE) : -1],
        index=prefix + "idx",
        task=prefix + "task",
        scratchpad=prefix + "pad",
        meta=prefix + "meta",
        value_prefix=prefix + "k:",
    )


def parse_key(redis_key: str) -> tuple[Scope, str, str | None]:
    """Split a working-memory Redis key into ``(scope, kind, user key)``.

    ``kind`` is ``"k"`` for a user value (then the user key is returned) or one
    of ``idx``, ``task``, ``pad``, ``meta``. Raises ``ValueError`` for a key
    this module did not build.
    """
    if not redis_key.startswith(NAMESPACE + "{"):
        raise ValueError("not a working-memory key")
    close = redis_key.index("}", len(NAMESPACE))
    scope = decode_scope(redis_key[len(NAMESPACE) + 1 : close])
    rest = redis_key[close + 1 :]
    if rest.startswith(":k:"):
        return scope, "k", rest[3:]
    if rest[:1] == ":" and rest[1:] in _KINDS:
        return scope, rest[1:], None
    raise ValueError("unknown key kind")
