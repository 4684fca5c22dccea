"""The one boundary where text reaches the user's terminal: a rich Console that cleans every
segment it renders (docs/design.md#terminal).

Log lines, attachment names, node names, a peer's notes and reports read back come from
outside. A terminal obeys the control sequences in them: OSC sets the window title (``ESC]0;``),
writes the clipboard (``ESC]52;``) or hides a link behind text (``ESC]8;;``), CSI moves the
cursor and clears the screen, and C1 bytes (0x80-0x9f) are the same commands in one character.
Cleaning the segments, not the strings, reaches every renderable (a Text, a Group, the live
line) and leaves rich's own styling and cursor control alone: those are made after this, from
styles and control segments, never from the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

# Whole sequences go, so their arguments (a title, a URL, base64 for the clipboard) do not stay
# behind as text: CSI (7-bit and C1); OSC, DCS, SOS, PM and APC strings up to their terminator
# (BEL or ST), or, with none before the next control (rich's Text drops BEL before a segment
# gets here), up to the next whitespace; any other escape; every C0 and C1 control and DEL but
# newline and tab. A string's body holds no control, so a search for its terminator stops at
# the next one: a line of a million OSC introducers costs one pass, not a million.
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"
    r"(?:[^\x00-\x1f\x7f-\x9f]*(?:\x07|\x1b\\|\x9c)|[^\s\x00-\x1f\x7f-\x9f]*)"
    r"|\x1b[!-/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def clean(text: str) -> str:
    """``text`` without control characters and escape sequences; newline and tab stay."""
    if text.isprintable():  # most text: one C pass, no regex
        return text
    return _CONTROL.sub("", text)


class CleanConsole(Console):
    """A Console whose rendered text holds no control sequence but rich's own."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            text = segment.text
            # a control segment is rich's (cursor moves of the live line); its text is the code
            if segment.control or text.isprintable() or text == "\n":
                yield segment
            else:
                yield Segment(clean(text), segment.style)
