"""What a pickle would build, told from its opcodes before anything is unpickled.

A pickle refers to an object it built before in two bytes (a memo ``GET``), so a file of a few
hundred bytes can describe a list that every walk visits 10^40 times, or a tuple whose hash, when
it becomes a dict key inside the unpickler, never ends; a length field can make the unpickler
allocate gigabytes before it finds the bytes missing. ``scan`` runs the pickle's opcodes over a
model of the unpickler's stack and memo where each value is only its weight: the objects a walk
over it visits (each reference again), the bytes of strings, bytes and integers it holds (each
reference again) and its depth in containers. A memo ``GET`` pushes what the object it names
weighs, so a shared list counts once per reference; a container that is changed after it was
referenced would make a weight already counted wrong, and is refused (only a cycle does that).
Dict keys and set items are strings, bytes or numbers of at most 18 digits, whose hashes cost
their length once: anything else could make the unpickler's own hashing a bomb.

The scan stops at the first bound it passes, with where and why; at an opcode that asks for a
Python global (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``EXT*``) it stops and says nothing: the
restricted unpickler refuses that global before it builds anything past it.

``scan`` is the C function of ``_pickscan.c`` where the package was built with a C compiler (the
wheel's build hook, ``hatch_build.py``): a 2000-entry dump scans in 0.4 ms there, 130 ms in
Python (its unpickling takes 3.5 ms), so a package built without a compiler reads dumps some ten
times slower. ``scan_python`` is the same definition in Python; the tests hold the two to the same
answer on genuine dumps, generated pickles and hostile ones.
"""

from __future__ import annotations

from enum import IntEnum

# what a value is, as far as the bounds care
KEY = 0  # a string, bytes, None, a bool or an int of at most 18 digits: a dict key or set item
SCALAR = 1  # a float, a longer int, a bytearray
TUPLE = 2
FROZENSET = 3
LIST = 4  # the containers an opcode changes after they were built
DICT = 5
SET = 6


class Stop(IntEnum):
    """Why the scan stopped; each is told with the byte offset of the opcode and a number."""

    TRUNCATED = 1  # a length or a line runs past the end, or no STOP: number = bytes missing
    OPCODE = 2  # no opcode, an unreadable argument, a protocol over 5: number = that byte
    STACK = 3  # an opcode finds the stack without what it needs: number = the opcode
    MEMO = 4  # a memo index never stored, or stored out of order: number = the index
    NOT_DATA = 5  # REDUCE, BUILD, OBJ, NEWOBJ, persistent ids, buffers: number = the opcode
    KEY = 6  # a dict key or set item that is no string or short number: number = the opcode
    CHANGED = 7  # a container changed after it was referenced (a cycle): number = the opcode
    OBJECTS = 8  # over max_objects: number = the bound
    BYTES = 9  # over max_bytes: number = the bound
    DEPTH = 10  # over max_depth: number = the bound
    NUMBER = 11  # an int longer than any torch writes (8 bytes, 20 digits): number = its length


class _Stopped(Exception):
    def __init__(self, why: Stop, number: int) -> None:
        self.why, self.number = why, number


# opcodes that build objects by calling code: a plain dump has none
_NOT_DATA = frozenset(b"RbPQo\x81\x92\x97\x98")
_GLOBALS = frozenset(b"ci\x82\x83\x84\x93")  # the restricted unpickler refuses each of them
_SHORT_DIGITS = 18  # an int of at most this many characters hashes to itself: no collisions
# torch writes int64: longer ones are refused, as Python cannot print one of over 4300 digits
_LONG_BYTES, _LONG_DIGITS = 8, 20


def scan_python(
    data: bytes, max_objects: int, max_bytes: int, max_depth: int
) -> tuple[Stop, int, int] | None:
    """Why unpickling ``data`` would pass a bound (the reason, the opcode's offset, a number),
    or None: within every bound, or stopped at a global the unpickler refuses."""
    scanner = _Scanner(data, max_objects, max_bytes, max_depth)
    try:
        scanner.run()
    except _Stopped as stopped:
        return stopped.why, scanner.at, stopped.number
    return None


class _Scanner:
    """The unpickler's stack and memo, each value as [objects, bytes, depth, kind, frozen]."""

    def __init__(self, data: bytes, max_objects: int, max_bytes: int, max_depth: int) -> None:
        self.data = data
        self.bounds = max_objects, max_bytes, max_depth
        self.stack: list[list[int]] = []
        self.marks: list[int] = []
        self.memo: list[list[int]] = []
        self.built = 0
        self.at = 0

    # -- reading the opcodes' arguments

    def take(self, pos: int, count: int) -> bytes:
        if count > len(self.data) - pos:
            raise _Stopped(Stop.TRUNCATED, count - (len(self.data) - pos))
        return self.data[pos : pos + count]

    def skip(self, pos: int, count: int) -> int:
        """Where ``count`` bytes from ``pos`` end, when they are there."""
        if count > len(self.data) - pos:
            raise _Stopped(Stop.TRUNCATED, count - (len(self.data) - pos))
        return pos + count

    def line(self, pos: int) -> bytes:
        end = self.data.find(b"\n", pos)
        if end < 0:
            raise _Stopped(Stop.TRUNCATED, 1)
        return self.data[pos:end]

    # -- the stack

    def fence(self) -> int:
        return self.marks[-1] if self.marks else 0

    def need(self, count: int, op: int) -> None:
        if len(self.stack) - self.fence() < count:
            raise _Stopped(Stop.STACK, op)

    def pop_mark(self, op: int) -> list[list[int]]:
        if not self.marks:
            raise _Stopped(Stop.STACK, op)
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def new(self, objects: int, nbytes: int, depth: int, kind: int) -> list[int]:
        self.built += 1
        value = [objects, nbytes, depth, kind, 0]
        self.check(value, max(self.built, objects))
        return value

    def check(self, value: list[int], objects: int) -> None:
        max_objects, max_bytes, max_depth = self.bounds
        if objects > max_objects:
            raise _Stopped(Stop.OBJECTS, max_objects)
        if value[1] > max_bytes:
            raise _Stopped(Stop.BYTES, max_bytes)
        if value[2] > max_depth:
            raise _Stopped(Stop.DEPTH, max_depth)

    def scalar(self, nbytes: int, kind: int) -> None:
        self.stack.append(self.new(1, nbytes, 0, kind))

    def number(self, text: bytes) -> None:
        if len(text) > _LONG_DIGITS:
            raise _Stopped(Stop.NUMBER, len(text))
        self.scalar(len(text), KEY if len(text) <= _SHORT_DIGITS else SCALAR)

    def container(self, items: list[list[int]], kind: int) -> list[int]:
        value = self.new(1, 0, 1, kind)
        self.add(value, items)
        return value

    def add(self, target: list[int], items: list[list[int]]) -> None:
        """``items`` go into ``target``: it weighs what they weigh (checked once they are in)."""
        for item in items:
            target[0] += item[0]
            target[1] += item[1]
            target[2] = max(target[2], item[2] + 1)
        self.check(target, target[0])

    def target(self, position: int, kind: int, op: int) -> list[int]:
        """The container an opcode changes: of ``kind``, never referenced yet."""
        if position < self.fence() or position >= len(self.stack):
            raise _Stopped(Stop.STACK, op)
        value = self.stack[position]
        if value[3] != kind:
            raise _Stopped(Stop.STACK, op)
        if value[4]:
            raise _Stopped(Stop.CHANGED, op)
        return value

    def keys(self, items: list[list[int]], op: int, pairs: bool) -> None:
        if pairs and len(items) % 2:
            raise _Stopped(Stop.STACK, op)
        if any(key[3] != KEY for key in items[:: 2 if pairs else 1]):
            raise _Stopped(Stop.KEY, op)

    def get(self, index: int) -> None:
        if index >= len(self.memo):
            raise _Stopped(Stop.MEMO, index)
        self.push_reference(self.memo[index])

    def push_reference(self, value: list[int]) -> None:
        value[4] = 1  # referenced twice now: its weight is final
        self.stack.append(value)

    def put(self, index: int, op: int) -> None:
        self.need(1, op)
        if index > len(self.memo):
            raise _Stopped(Stop.MEMO, index)
        if index == len(self.memo):
            self.memo.append(self.stack[-1])
        else:
            self.memo[index] = self.stack[-1]

    # -- the opcodes

    def run(self) -> None:
        data = self.data
        pos = 0
        while True:
            self.at = pos
            if pos >= len(data):
                raise _Stopped(Stop.TRUNCATED, 1)
            op = data[pos]
            pos += 1
            if op == 0x2E:  # STOP
                self.need(1, op)
                return
            if op in _GLOBALS:
                return
            if op in _NOT_DATA:
                raise _Stopped(Stop.NOT_DATA, op)
            pos = self.step(op, pos)

    def step(self, op: int, pos: int) -> int:
        """Runs one opcode whose arguments start at ``pos``; where the next one starts."""
        stack = self.stack
        if op == 0x68:  # BINGET
            self.get(self.take(pos, 1)[0])
            return pos + 1
        if op == 0x6A:  # LONG_BINGET
            self.get(int.from_bytes(self.take(pos, 4), "little"))
            return pos + 4
        if op == 0x94:  # MEMOIZE
            self.put(len(self.memo), op)
            return pos
        if op == 0x71:  # BINPUT
            self.put(self.take(pos, 1)[0], op)
            return pos + 1
        if op == 0x72:  # LONG_BINPUT
            self.put(int.from_bytes(self.take(pos, 4), "little"), op)
            return pos + 4
        if op == 0x28:  # MARK
            self.marks.append(len(stack))
            return pos
        if op in (0x4B, 0x4D, 0x4A):  # BININT1, BININT2, BININT
            width = {0x4B: 1, 0x4D: 2, 0x4A: 4}[op]
            end = self.skip(pos, width)
            self.scalar(width, KEY)
            return end
        if op in (0x4E, 0x88, 0x89):  # NONE, NEWTRUE, NEWFALSE
            self.scalar(0, KEY)
            return pos
        if op in (0x8C, 0x55, 0x43, 0x58, 0x54, 0x42, 0x8D, 0x8E, 0x96):
            # SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES, BINUNICODE, BINSTRING,
            # BINBYTES, BINUNICODE8, BINBYTES8, BYTEARRAY8: a length, then as many bytes
            width = 1 if op in (0x8C, 0x55, 0x43) else 4 if op in (0x58, 0x54, 0x42) else 8
            count = int.from_bytes(self.take(pos, width), "little", signed=op == 0x54)
            if count < 0:
                raise _Stopped(Stop.OPCODE, op)
            end = self.skip(pos + width, count)
            self.scalar(count, SCALAR if op == 0x96 else KEY)
            return end
        if op in (0x8A, 0x8B):  # LONG1, LONG4: a length, then the int's bytes
            width = 1 if op == 0x8A else 4
            count = int.from_bytes(self.take(pos, width), "little", signed=op == 0x8B)
            if count < 0:
                raise _Stopped(Stop.OPCODE, op)
            end = self.skip(pos + width, count)
            if count > _LONG_BYTES:
                raise _Stopped(Stop.NUMBER, count)
            self.scalar(count, KEY if count <= 7 else SCALAR)
            return end
        if op == 0x47:  # BINFLOAT
            end = self.skip(pos, 8)
            self.scalar(0, SCALAR)
            return end
        if op in (0x5D, 0x7D, 0x8F):  # EMPTY_LIST, EMPTY_DICT, EMPTY_SET
            stack.append(self.new(1, 0, 1, {0x5D: LIST, 0x7D: DICT, 0x8F: SET}[op]))
            return pos
        if op == 0x29:  # EMPTY_TUPLE
            stack.append(self.new(1, 0, 1, TUPLE))
            return pos
        if op in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
            count = op - 0x84
            self.need(count, op)
            items = stack[-count:]
            del stack[-count:]
            stack.append(self.container(items, TUPLE))
            return pos
        if op == 0x74:  # TUPLE
            stack.append(self.container(self.pop_mark(op), TUPLE))
            return pos
        if op == 0x6C:  # LIST
            stack.append(self.container(self.pop_mark(op), LIST))
            return pos
        if op == 0x64:  # DICT
            items = self.pop_mark(op)
            self.keys(items, op, pairs=True)
            stack.append(self.container(items, DICT))
            return pos
        if op == 0x91:  # FROZENSET
            items = self.pop_mark(op)
            self.keys(items, op, pairs=False)
            stack.append(self.container(items, FROZENSET))
            return pos
        if op == 0x61:  # APPEND
            self.need(2, op)
            target = self.target(len(stack) - 2, LIST, op)
            self.add(target, [stack.pop()])
            return pos
        if op == 0x73:  # SETITEM
            self.need(3, op)
            target = self.target(len(stack) - 3, DICT, op)
            items = stack[-2:]
            self.keys(items, op, pairs=True)
            del stack[-2:]
            self.add(target, items)
            return pos
        if op in (0x65, 0x75, 0x90):  # APPENDS, SETITEMS, ADDITEMS
            items = self.pop_mark(op)
            target = self.target(len(stack) - 1, {0x65: LIST, 0x75: DICT, 0x90: SET}[op], op)
            if op != 0x65:
                self.keys(items, op, pairs=op == 0x75)
            self.add(target, items)
            return pos
        if op == 0x30:  # POP: the item on top, or a mark with nothing above it
            if self.marks and self.marks[-1] == len(stack):
                self.marks.pop()
            else:
                self.need(1, op)
                stack.pop()
            return pos
        if op == 0x31:  # POP_MARK
            self.pop_mark(op)
            return pos
        if op == 0x32:  # DUP
            self.need(1, op)
            self.push_reference(stack[-1])
            return pos
        if op == 0x95:  # FRAME: how many bytes the next opcodes take
            self.skip(pos + 8, int.from_bytes(self.take(pos, 8), "little"))
            return pos + 8
        if op == 0x80:  # PROTO
            if self.take(pos, 1)[0] > 5:
                raise _Stopped(Stop.OPCODE, self.data[pos])
            return pos + 1
        if op in (0x67, 0x70):  # GET, PUT: a decimal index on a line
            text = self.line(pos)
            if not (text.isdigit() and text.isascii() and len(text) <= _SHORT_DIGITS):
                raise _Stopped(Stop.OPCODE, op)
            if op == 0x67:
                self.get(int(text))
            else:
                self.put(int(text), op)
            return pos + len(text) + 1
        if op in (0x49, 0x4C):  # INT, LONG: a decimal number on a line ("01" is True)
            text = self.line(pos)
            self.number(text[:-1] if op == 0x4C and text.endswith(b"L") else text)
            return pos + len(text) + 1
        if op in (0x46, 0x53, 0x56):  # FLOAT, STRING, UNICODE: the value on a line
            text = self.line(pos)
            self.scalar(0 if op == 0x46 else len(text), SCALAR if op == 0x46 else KEY)
            return pos + len(text) + 1
        raise _Stopped(Stop.OPCODE, op)


try:
    from nccldoctor.forensics._pickscan import scan as _scan_c  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler: the Python definition serves
    _scan_c = None

NATIVE = _scan_c is not None  # which one ``scan`` runs: the tests say so


def scan(
    data: bytes, max_objects: int, max_bytes: int, max_depth: int
) -> tuple[Stop, int, int] | None:
    """``scan_python``'s answer, in C when the package was built with it."""
    if _scan_c is None:
        return scan_python(data, max_objects, max_bytes, max_depth)
    found = _scan_c(data, max_objects, max_bytes, max_depth)
    return None if found is None else (Stop(found[0]), found[1], found[2])
