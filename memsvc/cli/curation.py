"""Commands that curate what long-term memory holds: consolidation and half-life policies.

Registered on :data:`memsvc.cli.commands.main` when :mod:`memsvc.cli` is imported.
"""

from __future__ import annotations

from datetime import timedelta

import click

from memsvc.cli.commands import _echo, _progress, _run, _service, main
from memsvc.cli.policy import parse_duration, policy_line, scope_of, scope_options
from memsvc.core.models import Policy
from memsvc.core.scope import Scope
from memsvc.ops.consolidation import CLUSTER_THRESHOLD, MAX_MEMBERS, ConsolidationReport
from memsvc.progress import ProgressReporter

# ------------------------------------------------------------------ consolidation


@main.command()
@click.option("--tenant", required=True, help="The scope's tenant.")
@click.option("--project", help="The scope's project.")
@click.option("--agent", help="The scope's agent.")
@click.option("--session", help="The scope's session.")
@click.option("--min-cluster", default=3, show_default=True,
              type=click.IntRange(2, MAX_MEMBERS), help="Fewest memories a cluster holds.")
@click.option("--threshold", default=CLUSTER_THRESHOLD, show_default=True,
              type=click.FloatRange(0, 1, min_open=True),
              help="Cosine similarity at which memories belong together.")
def consolidate(
    tenant: str, project: str | None, agent: str | None, session: str | None,
    min_cluster: int, threshold: float,
) -> None:
    """Group the related memories of one exact scope under summary memories.

    Only memories new since the last run are considered; clusters whose members
    changed are redone. Safe to run from several processes at once. The summarizer
    is the one MEMSVC_SUMMARIZER names (extractive by default).
    """
    scope = Scope(tenant, project, agent, session)

    async def run(progress: ProgressReporter) -> ConsolidationReport:
        async with _service(progress) as svc:
            return await svc.maintenance.consolidate(
                scope, min_cluster=min_cluster, threshold=threshold
            )

    with _progress() as progress:
        report = _run(run(progress))
    _echo([
        f"clusters made: {report.made}",
        f"memories joined to clusters: {report.joined}",
        f"clusters redone: {report.redone}",
        f"clusters dissolved: {report.dissolved}",
        f"memories considered: {report.considered}",
    ])


# ------------------------------------------------------------------ policies


@main.group()
def policy() -> None:
    """Half-life policies: how fast a tenant's or scope's memories fade (forgetting)."""


@policy.command(name="set")
@scope_options
@click.option("--half-life", "half_life", required=True, help="30d, 12h, 90m, 3600s or 2w.",
              callback=lambda _c, _p, value: parse_duration(value))
def policy_set(
    tenant: str, project: str | None, agent: str | None, session: str | None,
    half_life: timedelta,
) -> None:
    """Set the half-life of a tenant's or scope's memories (gc then forgets the weak ones)."""

    async def run() -> Policy:
        async with _service() as svc:
            return await svc.policies.set(
                scope_of(tenant, project, agent, session), half_life=half_life
            )

    _echo([policy_line(_run(run()))])


@policy.command(name="show")
@scope_options
def policy_show(tenant: str, project: str | None, agent: str | None, session: str | None) -> None:
    """The policy set on exactly this scope (exit code 1 when none)."""

    async def run() -> Policy:
        async with _service() as svc:
            return await svc.policies.get(scope_of(tenant, project, agent, session))

    _echo([policy_line(_run(run()))])


@policy.command(name="list")
@click.option("--tenant", default=None, help="Only this tenant's.")
def policy_list(tenant: str | None) -> None:
    """Every policy, broader scopes first."""

    async def run() -> list[Policy]:
        async with _service() as svc:
            return await svc.policies.list(tenant=tenant)

    policies = _run(run())
    _echo([policy_line(p) for p in policies] or ["no policies"])


@policy.command(name="unset")
@scope_options
def policy_unset(tenant: str, project: str | None, agent: str | None, session: str | None) -> None:
    """Remove the policy set on exactly this scope."""
    scope = scope_of(tenant, project, agent, session)

    async def run() -> bool:
        async with _service() as svc:
            return await svc.policies.delete(scope)

    _echo(["removed" if _run(run()) else "no policy on this scope"])
