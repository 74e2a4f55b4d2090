"""Redis key names: injective over (scope, key) and one hash slot per session."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from memsvc.core.scope import Scope
from memsvc.working.keys import decode_scope, encode_scope, parse_key, session_keys

# Printable ids, biased towards the characters the encoding must handle.
_tricky = st.sampled_from(list(":{}%-0123456789 k"))
_id = st.text(
    alphabet=st.one_of(_tricky, st.characters(blacklist_categories=("Cc", "Cs"))),
    min_size=1,
    max_size=12,
)
_scopes = st.builds(
    Scope,
    tenant=_id,
    project=st.none() | _id,
    agent=st.none() | _id,
    session=st.none() | _id,
)
_keys = st.text(
    alphabet=st.one_of(_tricky, st.characters(blacklist_categories=("Cc", "Cs"))),
    min_size=1,
    max_size=12,
)


def hash_tag(redis_key: str) -> str:
    """The part of a key Redis Cluster hashes (its rule for ``{...}``)."""
    start = redis_key.find("{")
    if start >= 0:
        end = redis_key.find("}", start + 1)
        if end > start + 1:
            return redis_key[start + 1 : end]
    return redis_key


def all_keys(scope: Scope, key: str) -> list[str]:
    names = session_keys(scope)
    return [names.value(key), *names.structures]


@given(st.lists(st.tuples(_scopes, _keys), min_size=2, max_size=30, unique=True))
@settings(max_examples=300, deadline=None)
def test_distinct_scope_key_pairs_never_share_a_redis_key(pairs: list[tuple[Scope, str]]) -> None:
    built = [session_keys(scope).value(key) for scope, key in pairs]
    assert len(set(built)) == len(pairs)


@given(_scopes, _keys)
@settings(max_examples=300, deadline=None)
def test_value_keys_parse_back_to_their_scope_and_key(scope: Scope, key: str) -> None:
    assert parse_key(session_keys(scope).value(key)) == (scope, "k", key)
    assert decode_scope(encode_scope(scope)) == scope


@given(_scopes, st.lists(_keys, min_size=1, max_size=10))
@settings(max_examples=300, deadline=None)
def test_every_key_of_a_session_has_the_same_hash_tag(scope: Scope, keys: list[str]) -> None:
    names = session_keys(scope)
    built = [redis_key for key in keys for redis_key in all_keys(scope, key)]
    assert {hash_tag(redis_key) for redis_key in built} == {names.tag[1:-1]}
    assert len({key_slot(redis_key.encode()) for redis_key in built}) == 1


@given(st.lists(_scopes, min_size=2, max_size=20, unique=True))
@settings(max_examples=200, deadline=None)
def test_structure_keys_of_distinct_sessions_differ(scopes: list[Scope]) -> None:
    built = [redis_key for scope in scopes for redis_key in session_keys(scope).structures]
    assert len(set(built)) == len(built)


def test_separators_inside_ids_do_not_merge_scopes() -> None:
    pairs = [
        (Scope("a:b", "c", session="s"), Scope("a", "b:c", session="s")),
        (Scope("t", "p", session="{x}"), Scope("t", "p}", session="x")),
        (Scope("t", session="%7B"), Scope("t", session="{")),
        (Scope("t", "1:x", session="s"), Scope("t", "1", "x", session="s")),
        (Scope("t", "-", session="s"), Scope("t", None, "-", session="s")),
    ]
    for first, second in pairs:
        assert session_keys(first).value("k") != session_keys(second).value("k")
        assert session_keys(first).tag != session_keys(second).tag


def test_user_key_text_cannot_escape_its_session() -> None:
    # A key that looks like another session's key suffix stays in its own session.
    scope = Scope("t", session="s")
    forged = "}:k:x"
    assert parse_key(session_keys(scope).value(forged)) == (scope, "k", forged)
    assert hash_tag(session_keys(scope).value(forged)) == session_keys(scope).tag[1:-1]
