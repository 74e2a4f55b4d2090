"""What ``memsvc doctor`` reports: one :class:`Check` per thing it looked at."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "warning", "problem", "repaired"]


@dataclass
class Check:
    """The outcome of one check."""

    name: str
    status: Status
    detail: str
    fixes: list[str] = field(default_factory=list)
    # False for what --repair cannot fix (the detail says what to do instead).
    repairable: bool = True


@dataclass
class DoctorReport:
    """All checks of one doctor run."""

    checks: list[Check] = field(default_factory=list)
    repair: bool = False

    @property
    def problems(self) -> list[Check]:
        """Checks that found something wrong that is still wrong."""
        return [c for c in self.checks if c.status == "problem"]

    @property
    def repairable(self) -> list[Check]:
        """Problems that ``repair`` could fix (none, once it ran)."""
        return [c for c in self.problems if c.repairable and not self.repair]

    @property
    def ok(self) -> bool:
        """True when no problem remains (warnings allowed)."""
        return not self.problems

    def add(self, name: str, status: Status, detail: str, *, repairable: bool = True) -> Check:
        """Append a check and return it."""
        check = Check(name, status, detail, repairable=repairable)
        self.checks.append(check)
        return check
