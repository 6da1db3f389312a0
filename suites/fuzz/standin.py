"""A stand-in for the fuzzing worker's connection to its parent (harness/fuzz/worker.py),
for tests that run a worker's task in their own process.

    parent = Parent(halt_after=2)                       # halt once 2 cases have started
    parent = Parent(halt_after=6, counting=CaseEnded)   # ... once 6 have ended
    worker._run_task(parent, config, task)
    parent.sent, parent.started()
"""

from __future__ import annotations

from harness.fuzz.messages import CaseStarted, Halt


class Parent:
    """Keeps what the worker sends; asks it to halt once `halt_after` messages of the
    kind `counting` have come (never with None)."""

    def __init__(self, halt_after: int | None = None, counting: type = CaseStarted):
        self.sent = []
        self.halt_after = halt_after
        self.counting = counting

    def send(self, message):
        self.sent.append(message)

    def poll(self, timeout=0):
        return self.halt_after is not None and \
            sum(isinstance(m, self.counting) for m in self.sent) >= self.halt_after

    def recv(self):
        return Halt()

    def started(self):
        return [m.params for m in self.sent if isinstance(m, CaseStarted)]
