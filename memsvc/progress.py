"""Progress of long operations (import, export, gc, doctor --repair, index builds).

Long work reports what it is doing to a :class:`ProgressReporter`: a step
begins (``start``, with a total when one is known), advances, and ends
(``done``). The operations take the reporter as ``progress=`` and default to
:data:`NO_PROGRESS`, which does nothing. Two reporters ship:

- :class:`RichProgress`, for a terminal: a live bar (or a spinner when the
  total is unknown) per step, with the elapsed time;
- :class:`LineProgress`, for logs, cron and CI: timestamped lines, at most
  one every ``interval`` seconds (a step that does not advance, such as an
  index build, still gets one with its running time).

Operations start their first step only after their arguments (and a file's
header) are validated, so a rejected command prints nothing but its error.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Outside a terminal, at most one progress line this often (seconds).
LINE_INTERVAL_S = 5.0


@runtime_checkable
class ProgressReporter(Protocol):
    """Receives the progress of a long operation, one step at a time."""

    def start(self, description: str, *, total: int | None = None, unit: str = "rows") -> None:
        """A step begins (ending the previous one); ``total`` in ``unit`` when known."""

    def advance(self, amount: int = 1) -> None:
        """``amount`` more units of the current step are done."""

    def done(self) -> None:
        """The current step is over."""


class NullProgress:
    """A reporter that reports nothing (the default)."""

    def start(self, description: str, *, total: int | None = None, unit: str = "rows") -> None:
        """Ignored."""

    def advance(self, amount: int = 1) -> None:
        """Ignored."""

    def done(self) -> None:
        """Ignored."""


NO_PROGRESS: ProgressReporter = NullProgress()


def human_amount(amount: int, unit: str) -> str:
    """``1536, "bytes"`` -> ``1.5 KiB``; other units as grouped integers."""
    if unit != "bytes":
        return f"{amount:,} {unit}"
    value = float(amount)
    for name in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or name == "GiB":
            return f"{value:.0f} {name}" if name == "B" else f"{value:.1f} {name}"
        value /= 1024
    raise AssertionError("unreachable")


class LineProgress:
    """Timestamped lines for logs: at most one every ``interval`` seconds.

    The first step's line is printed at once; later lines (a step starting,
    its progress) wait until ``interval`` has passed since the previous one.
    A step that does not advance (an index build, the server starting) gets
    a line with its running time every ``interval`` from a background
    thread, so a log never goes quiet for long. Use as a context manager
    (or call :meth:`close`) to stop that thread.

    Args:
        stream: Where to write (standard error by default).
        interval: Minimum seconds between two lines.
        clock: Monotonic seconds (tests pass a fake one).
        heartbeat: Run the background thread (tests call :meth:`tick` instead).
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        interval: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: bool = True,
    ) -> None:
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._description = ""
        self._total: int | None = None
        self._unit = "rows"
        self._completed = 0
        self._started = 0.0
        self._last_line: float | None = None
        self._active = False
        self._announced = False  # the current step's first line was printed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat = heartbeat

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _due(self) -> bool:
        return self._last_line is None or self._clock() - self._last_line >= self._interval

    def _write(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        stream.write(f"{stamp} {text}\n")
        stream.flush()
        self._last_line = self._clock()

    def _status(self) -> str:
        if not self._announced:
            self._announced = True
            size = "" if self._total is None else f" ({human_amount(self._total, self._unit)})"
            return f"{self._description}{size}"
        done = human_amount(self._completed, self._unit)
        if self._total:
            share = min(100.0, 100.0 * self._completed / self._total)
            total = human_amount(self._total, self._unit)
            return f"{self._description}: {done} of {total} ({share:.0f}%)"
        if self._completed:
            return f"{self._description}: {done}"
        return f"{self._description}: running for {self._clock() - self._started:.0f} s"

    def start(self, description: str, *, total: int | None = None, unit: str = "rows") -> None:
        """Begin a step; its first line now, or as soon as ``interval`` allows."""
        self.done()
        with self._lock:
            self._description, self._total, self._unit = description, total, unit
            self._completed = 0
            self._started = self._clock()
            self._active = True
            self._announced = False
            if self._due():
                self._write(self._status())
        if self._heartbeat and self._thread is None:
            self._thread = threading.Thread(
                target=self._beat, name="memsvc-progress", daemon=True
            )
            self._thread.start()

    def advance(self, amount: int = 1) -> None:
        """Count ``amount``; print a line when ``interval`` has passed since the last one."""
        with self._lock:
            self._completed += amount
            if self._active and self._due():
                self._write(self._status())

    def tick(self) -> None:
        """Print the current step's status if no line was printed for ``interval``."""
        with self._lock:
            if self._active and self._due():
                self._write(self._status())

    def done(self) -> None:
        """End the step; a long one gets a closing line (if ``interval`` allows)."""
        with self._lock:
            if not self._active:
                return
            self._active = False
            elapsed = self._clock() - self._started
            if elapsed >= self._interval and self._due():
                self._announced = True
                self._write(f"{self._status()}, done in {elapsed:.1f} s")

    def close(self) -> None:
        """End the last step and stop the background thread."""
        self.done()
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self._interval / 5)):
            self.tick()


class RichProgress:
    """A live progress display in a terminal (``rich``), on standard error.

    Use as a context manager: the display is stopped (and left on screen)
    when the block ends.
    """

    def __init__(self, *, console_file: IO[str] | None = None, force_terminal: bool = False):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(
            file=console_file if console_file is not None else sys.stderr,
            force_terminal=force_terminal or None,
        )
        self._progress: Progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[amount]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self._task: TaskID | None = None
        self._unit = "rows"
        self._running = False

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, description: str, *, total: int | None = None, unit: str = "rows") -> None:
        """Show a new bar (a spinner when ``total`` is None)."""
        self.done()
        if not self._running:
            # Started with the first step: nothing appears before the work does.
            self._progress.start()
            self._running = True
        self._unit = unit
        self._task = self._progress.add_task(
            description, total=total, amount=human_amount(0, unit)
        )

    def advance(self, amount: int = 1) -> None:
        """Move the current bar."""
        if self._task is None:
            return
        self._progress.advance(self._task, amount)
        completed = int(self._progress.tasks[-1].completed)
        self._progress.update(self._task, amount=human_amount(completed, self._unit))

    def done(self) -> None:
        """Fill the current bar and stop its clock."""
        task, self._task = self._task, None
        if task is None:
            return
        state = self._progress.tasks[-1]
        total = state.total if state.total is not None else max(state.completed, 1)
        self._progress.update(task, total=total, completed=total)
        self._progress.stop_task(task)

    def close(self) -> None:
        """End the last step and stop the display."""
        self.done()
        if self._running:
            self._progress.stop()
            self._running = False
