"""Project error classes.

Every error a user can see is a `MetaltileError` that names the kernel, the construct
(buffer, op, parameter, MSL line) and the reason, so a message is useful without a
traceback. Errors are raised at the earliest stage that can know.
"""

from __future__ import annotations


class MetaltileError(Exception):
    """Base class: `kernel` and `construct` locate the problem, `reason` explains it."""

    def __init__(self, reason: str, *, kernel: str | None = None, construct: str | None = None):
        self.kernel = kernel
        self.construct = construct
        self.reason = reason
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.kernel:
            where.append(f"kernel '{self.kernel}'")
        if self.construct:
            where.append(self.construct)
        prefix = ", ".join(where)
        return f"{prefix}: {self.reason}" if prefix else self.reason


class KernelDefinitionError(MetaltileError):
    """An ill-formed kernel the DSL or the verifier rejects (wrong shape, scope, dtype, a
    construct outside its allowed context): the message says what is wrong and what is
    allowed. Raised before any code runs."""


class LoweringError(MetaltileError):
    """A well-formed kernel whose plan the lowering does not support (yet). Raised before
    any code runs."""


class ToolchainError(MetaltileError):
    """The C++ toolchain the emulator needs is missing or unusable."""


class MSLCompileError(MetaltileError):
    """MSL text the emulator cannot compile: real MSL would reject it, or it is outside the
    supported subset. `line` is the 1-based line in the MSL source."""

    def __init__(self, reason: str, *, kernel: str | None, line: int | None = None,
                 column: int | None = None, source_line: str | None = None):
        self.line = line
        self.column = column
        self.source_line = source_line
        construct = f"MSL line {line}" if line else None
        if source_line is not None:
            reason = f"{reason}\n    {line:>4} | {source_line}"
        super().__init__(reason, kernel=kernel, construct=construct)


class LaunchError(MetaltileError):
    """A launch that cannot run as asked: grid, threadgroup size, arguments."""


class KernelCrashError(MetaltileError):
    """The kernel crashed (e.g. a wild pointer) inside the emulator's child process."""


class KernelTimeoutError(MetaltileError):
    """The kernel did not finish within the emulator's watchdog time."""
