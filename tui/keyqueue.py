"""Typed keys acted on one at a time, each on the screen and field the keys before it produced.

Textual forwards a key to whatever has focus when the App reads it from the terminal, and
goes on to the next key at once. What a key causes happens later, in other widgets'
queues: a step's pane mounts, a screen opens, a Select's list opens or picks, a key the
field does not consume bubbles back to the App (which then looks its binding up from
whatever has focus *by then*), a field's change reaches the document. Typed in a burst
(a paste, a fast typist, keys queued over SSH), later keys overtook earlier ones: Tabs
landed on a button of a step not yet laid out, Enter in the quick start accepted the
proposal of the path before the paste, Down went to the field instead of its open list.

`KeyQueue` holds every key (and paste) from the terminal and hands the App the next one
only when the previous one has settled: the App, the screen and the focused widget with
its ancestors have processed every message the key caused (`call_later` passes from
the focused widget up, the way a key bubbles). A key typed alone goes on at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from textual import events
from textual.message import Message
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.app import App

#: Keys whose effect depends on where widgets are on screen (Textual's focus order).
FOCUS_KEYS = frozenset({"tab", "shift+tab"})

#: Passes over the pumps to wait at most per key; a key settles in two or three (its
#: handling and bubbling, the messages it posted, a pass that finds nothing).
MAX_ROUNDS = 40


class TypedKey(Message, bubble=False):
    """A held key (or paste) handed back to the App, in typing order."""

    def __init__(self, event: events.Event, done: asyncio.Future[None]) -> None:
        super().__init__()
        self.event = event
        self.done = done


class KeyQueue:
    """One App's keys, in order: `offer` from `App.on_event`, `TypedKey` comes back."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._pending: deque[events.Event] = deque()
        self._task: asyncio.Task[None] | None = None
        self._in_order: set[int] = set()
        self._said_joined = False

    @staticmethod
    def wants(event: events.Event) -> bool:
        return isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded

    def releasing(self, event: events.Event) -> bool:
        """True for a key this queue handed back (the App handles it as Textual does)."""
        return id(event) in self._in_order

    def offer(self, event: events.Event) -> None:
        """Hold `event` until every key before it has settled."""
        self._pending.append(event)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())

    async def drained(self) -> None:
        """Wait until every key the App has received so far was handled and settled."""
        while True:
            await _processed(self.app)  # keys still in the App's own queue reach `offer`
            task = self._task
            if not self._pending and (task is None or task.done()):
                return
            if task is not None:
                await asyncio.shield(task)

    async def _drain(self) -> None:
        batching = False
        try:
            while self._pending:
                event = self._pending.popleft()
                if self._pending and not batching:
                    # A burst: draw once at its end, not after every key (the keys never need
                    # the layout; a redraw per key made a 70-key burst several times slower).
                    self.app._begin_batch()
                    batching = True
                if self._pending and _line_break_in_text(event, self._pending[0]):
                    self._say_joined()
                if not await self._one(event):
                    self._pending.clear()  # the app is closing
        finally:
            self._said_joined = False
            if batching:
                self.app._end_batch()
                if not self.app._batch_count and self.app.is_running and self.app.screen_stack:
                    self.app.screen.refresh(layout=True)  # what the burst changed, drawn now

    async def _one(self, event: events.Event) -> bool:
        """Hand `event` to the App and wait until it has settled; False: the App is closing."""
        if isinstance(event, events.Key) and event.key in FOCUS_KEYS:
            self._lay_out()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._in_order.add(id(event))
        if not self.app.post_message(TypedKey(event, done)):
            self._in_order.discard(id(event))
            return False
        try:
            await done
        finally:
            self._in_order.discard(id(event))
        await self.settle()
        return True

    async def settle(self) -> None:
        """Wait until the focused widget, its ancestors, the screen and the App have nothing
        queued: passes from the focused widget up to the App (the way a key bubbles), each
        pump processing what it held, until a pass finds every queue empty."""
        for _ in range(MAX_ROUNDS):
            busy = False
            for pump in self._pumps():
                busy |= not pump._message_queue.empty()
                await _processed(pump)
            if not busy:
                return

    def _say_joined(self) -> None:
        """An Enter between typed characters in a settings field: a multi-line paste from a
        terminal without bracketed paste (each line break arrives as Enter). The field holds
        one line, so the lines end up joined: say so, once per burst."""
        from .fields import FieldInput

        try:
            focused = self.app.screen.focused
        except Exception:  # noqa: BLE001 - no screen (closing)
            return
        if isinstance(focused, FieldInput) and not self._said_joined:
            self._said_joined = True
            self.app.notify("Several lines arrived as typed text (a paste without bracketed paste): a field holds "
                            "one line, so they were joined here. Check the field; with bracketed paste on, only "
                            "the first line is kept and the wizard says so.", title="Paste", severity="warning",
                            markup=False)

    def _lay_out(self) -> None:
        """Lay the screen out now if anything changed since its last layout: Textual orders
        Tab by position on screen, and a pane just mounted (or a field just shown) has none
        until the next layout, which a burst, or a key right after the previous one, beats."""
        try:
            screen = self.app.screen
        except Exception:  # noqa: BLE001 - no screen (closing)
            return
        if screen.is_current and screen.size.area:
            for widget in screen.walk_children():
                if isinstance(widget, Widget) and widget._layout_required:  # a request its own idle has not passed up yet
                    widget._check_refresh()  # (an Advanced part just opened): its ancestors re-arrange
            screen._refresh_layout()

    def _pumps(self) -> list:
        app = self.app
        if not app.is_running:
            return []
        try:
            screen = app.screen
        except Exception:  # noqa: BLE001 - no screen (closing)
            return []
        focused = screen.focused
        pumps = [focused, *focused.ancestors] if focused is not None else []
        pumps += [screen, app]  # bottom-up, as a key bubbles
        seen: dict[int, object] = {}
        for pump in pumps:
            seen.setdefault(id(pump), pump)
        return list(seen.values())


def _line_break_in_text(event: events.Event, following: events.Event) -> bool:
    """True for an Enter followed at once by a printable key (a raw paste's line break)."""
    return (isinstance(event, events.Key) and event.key == "enter" and isinstance(following, events.Key)
            and following.is_printable)


async def _processed(pump) -> None:
    """Wait until `pump` has processed what was queued in it before this call."""
    finished = asyncio.Event()
    if pump.call_later(finished.set):
        try:
            await asyncio.wait_for(finished.wait(), timeout=5)
        except TimeoutError:
            pass  # a pump that stopped (a closed screen): go on rather than hang the keyboard
