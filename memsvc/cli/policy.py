"""``memsvc policy``: half-life policies per tenant or scope (see docs/how-to/forgetting.md)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from memsvc.core.models import Policy
from memsvc.core.scope import Scope
from memsvc.core.time_limits import MAX_DURATION_SECONDS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 604_800.0}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s`` or ``2w`` (a bare number is seconds)."""
    found = _DURATION.match(text)
    if found is None:
        raise click.BadParameter(f"{text!r} is not a duration like 30d, 12h, 90m, 3600s, 2w")
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not 0 < seconds <= MAX_DURATION_SECONDS:
        raise click.BadParameter(f"{text!r} must be positive and at most 365000d")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A half-life as the largest whole unit that states it exactly (``30d``, ``90m``)."""
    seconds = value.total_seconds()
    for unit in ("w", "d", "h", "m"):
        count = seconds / _UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


def policy_line(policy: Policy) -> str:
    """One policy: its scope, half-life and when it was set."""
    levels = [level or "-" for level in policy.scope.levels]
    while len(levels) > 1 and levels[-1] == "-":
        levels.pop()
    return (
        f"{'/'.join(levels)}: half-life {format_duration(policy.half_life)} "
        f"(set {policy.updated_at.isoformat(timespec='seconds')})"
    )


F = TypeVar("F", bound=Callable[..., Any])


def scope_options(command: F) -> F:
    """``--tenant`` (required) and the optional narrower levels."""
    for name, help_text in (
        ("--session", "Only this session."),
        ("--agent", "Only this agent (and its sessions)."),
        ("--project", "Only this project (and what is under it)."),
    ):
        command = click.option(name, default=None, help=help_text)(command)
    return click.option("--tenant", required=True, help="The tenant.")(command)


def scope_of(tenant: str, project: str | None, agent: str | None, session: str | None) -> Scope:
    """The scope the options name."""
    return Scope(tenant, project, agent, session)
