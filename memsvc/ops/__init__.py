"""Operations: gc, stats, doctor, recall audit, re-embedding, roles, Citus, consolidation.

Apps reach them through ``svc.maintenance`` (:class:`Maintenance`); the
``memsvc`` command line is a thin layer over the same code. SQL lives in the
``*_queries`` modules next to each concept.

May import: the feature packages, ``memsvc.extraction`` (summarizers),
``memsvc.erasure``, ``memsvc.transfer``, ``memsvc.working``, ``memsvc.db``,
``memsvc.core``.
"""

from __future__ import annotations

from memsvc.ops.consolidation import ConsolidationReport
from memsvc.ops.doctor_report import Check, DoctorReport
from memsvc.ops.gc import GcReport
from memsvc.ops.maintenance import Maintenance
from memsvc.ops.roles import roles_sql
from memsvc.ops.stats import Stats
from memsvc.transfer.export import ExportReport
from memsvc.transfer.legacy import LegacyReport
from memsvc.transfer.loader import LoadReport, Problem

__all__ = [
    "Check",
    "ConsolidationReport",
    "DoctorReport",
    "ExportReport",
    "GcReport",
    "LegacyReport",
    "LoadReport",
    "Maintenance",
    "Problem",
    "Stats",
    "roles_sql",
]
