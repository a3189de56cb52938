"""The terminal driver, with one fix: a SIGCONT resumes the app only after a suspension.

Textual's Linux driver handles SIGCONT by calling `resume_application_mode()`, which starts
application mode again (a new input thread, a new writer thread), whether or not the app
was ever suspended. A SIGCONT comes without any suspension every time a terminal closes:
the kernel sends SIGHUP *and* SIGCONT to the foreground process group when the terminal
hangs up (an SSH connection dropping, `tmux kill-session`), and `kill -CONT` sends one alone.
The second input thread is not a daemon and its stop event is set only for the thread the
driver knows of last; so when the app exits, the orphan keeps polling the terminal and
Python waits for it at exit (`threading._shutdown`) forever. Measured before this fix: a
lone `kill -CONT`, then ctrl+c, left the process running 4 times in 4; the terminal closed
right after an edit, 1 time in 4 (tests/tui/test_tmux_leaving.py).

`guarded(driver_class)` subclasses the platform's driver (what `App.get_driver_class`
returns) overriding three public `Driver` methods only: `suspend_application_mode` marks the
app as suspended, `resume_application_mode` does nothing unless it is, and
`stop_application_mode` (the app's exit) ends the driver for good, so that no signal starts
application mode again while, or after, the app shuts down.
"""

from __future__ import annotations

from typing import Any

from textual.driver import Driver


class ResumeOnlyAfterSuspend:
    """Mixin for a `Driver` subclass: see the module's docstring."""

    suspended = False
    """True between a suspension (ctrl+z, SIGTSTP) and the resume that follows it."""
    ended = False
    """True once the app's exit has stopped application mode: nothing resumes it."""
    _suspending = False

    def suspend_application_mode(self) -> None:
        self._suspending = True
        try:
            super().suspend_application_mode()  # type: ignore[misc]
        finally:
            self._suspending = False
        self.suspended = not self.ended

    def resume_application_mode(self) -> None:
        if not self.suspended or self.ended:
            return  # a SIGCONT with no suspension before it (a hangup sends one), or after the exit
        self.suspended = False
        super().resume_application_mode()  # type: ignore[misc]

    def stop_application_mode(self) -> None:
        if not self._suspending:
            self.ended = True  # first: a SIGCONT handled while stopping must not start it again
        super().stop_application_mode()  # type: ignore[misc]


def guarded(driver_class: type[Driver]) -> type[Driver]:
    """`driver_class` with `ResumeOnlyAfterSuspend` mixed in (the same class if already)."""
    if issubclass(driver_class, ResumeOnlyAfterSuspend):
        return driver_class
    name = f"Guarded{driver_class.__name__}"
    namespace: dict[str, Any] = {"__module__": __name__, "__doc__": f"{driver_class.__name__}, resumed only after a suspension."}
    return type(name, (ResumeOnlyAfterSuspend, driver_class), namespace)
