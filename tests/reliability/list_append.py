"""An Elle-style list-append checker (after Jepsen's Elle), small enough to read.

Clients append unique values to named lists while others read whole lists.
The history records, with a logical clock, when each operation was invoked and
when it completed, and how it ended: ``ok``, ``fail`` (definitely not applied)
or ``info`` (unknown: a timeout or cancellation). Given the final state, the
checker reports every anomaly it can prove:

- ``lost``: an acknowledged append is missing from the final list;
- ``duplicate``: a value appears more than once;
- ``phantom``: a value that was never appended, or whose append failed,
  or that belongs to another list (sessions mixed);
- ``non-prefix read`` (ordered lists): a read is not a prefix of the final list;
- ``read outside final`` (unordered sets): a read holds a value the final
  state lacks;
- ``stale read``: a read misses an append acknowledged before the read began.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Append:
    key: str
    value: str
    invoked: int
    completed: int | None = None
    outcome: str = "pending"  # ok | fail | info


@dataclass
class Read:
    key: str
    invoked: int
    completed: int
    values: list[str]


@dataclass
class History:
    """What clients did and saw, stamped with a logical clock."""

    appends: list[Append] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    _clock: itertools.count[int] = field(default_factory=itertools.count)
    _values: itertools.count[int] = field(default_factory=itertools.count)

    def tick(self) -> int:
        """The next instant of the logical clock."""
        return next(self._clock)

    def invoke_append(self, key: str) -> Append:
        """Start an append of a fresh, unique value to ``key``."""
        op = Append(key, f"{key}:{next(self._values)}", self.tick())
        self.appends.append(op)
        return op

    def complete(self, op: Append, outcome: str) -> None:
        """Record how an append ended: ok, fail or info."""
        op.completed = self.tick()
        op.outcome = outcome

    def record_read(self, key: str, invoked: int, values: list[str]) -> None:
        """Record a read that started at ``invoked`` and returned ``values``."""
        self.reads.append(Read(key, invoked, self.tick(), list(values)))

    @property
    def operations(self) -> int:
        """How many operations the history holds."""
        return len(self.appends) + len(self.reads)


def check(history: History, final: dict[str, list[str]], *, ordered: bool) -> list[str]:
    """Every anomaly the history and the final state prove (empty: consistent)."""
    anomalies: list[str] = []
    by_value = {op.value: op for op in history.appends}
    for key, values in final.items():
        for value, count in Counter(values).items():
            if count > 1:
                anomalies.append(f"duplicate: {value!r} appears {count} times in {key!r}")
        for value in set(values):
            op = by_value.get(value)
            if op is None:
                anomalies.append(f"phantom: {value!r} in {key!r} was never appended")
            elif op.key != key:
                anomalies.append(f"phantom: {value!r} of {op.key!r} appears in {key!r}")
            elif op.outcome == "fail":
                anomalies.append(f"phantom: {value!r} appears although its append failed")
    for op in history.appends:
        if op.outcome == "ok" and op.value not in final.get(op.key, []):
            anomalies.append(f"lost: acknowledged {op.value!r} is missing from {op.key!r}")
    acked = [op for op in history.appends if op.outcome == "ok"]
    for read in history.reads:
        final_values = final.get(read.key, [])
        if ordered:
            if read.values != final_values[: len(read.values)]:
                anomalies.append(f"non-prefix read of {read.key!r}: {read.values[-3:]!r}...")
        else:
            outside = set(read.values) - set(final_values)
            if outside:
                anomalies.append(f"read outside final of {read.key!r}: {sorted(outside)[:3]}")
            if len(set(read.values)) != len(read.values):
                anomalies.append(f"duplicate within a read of {read.key!r}")
        seen = set(read.values)
        for op in acked:
            if op.key == read.key and op.completed is not None and op.completed < read.invoked:
                if op.value not in seen:
                    anomalies.append(
                        f"stale read of {read.key!r}: misses acknowledged {op.value!r}"
                    )
                    break
    return anomalies
