"""How much of a stranger's attachment nccldoctor reads: every bound of its readers, in one place.

`explain` and `report show` read what a ticket's reporter attached; a file of a few hundred bytes
can claim gigabytes once decompressed, nested or referenced many times over. Each reader stops
at these bounds and says what it left out (a ``ticket.not-read`` or ``*.truncated`` finding), so
a hostile file ends in a report, never in a traceback or an exhausted machine. Each bound sits
far above what a real job writes: the reason is given beside it.
"""

from __future__ import annotations

# -- numbers and nesting --------------------------------------------------------------------------

# Python refuses to turn more decimal digits than this into an int (a ValueError, CVE-2020-10735)
# and takes quadratic time below it; no count NCCL, nccl-tests or torch prints is over 20 digits.
MAX_DIGITS = 4300
# How deep a JSON document (a report, ncclras -f json, nccl-tests -J, a Flight Recorder dump) may
# nest: a report nests about 8 deep; Python's own parser and every walk over the document
# recurse, and a thousand levels end in RecursionError.
MAX_JSON_DEPTH = 64
# Lists and objects in one JSON document, and its bytes: a 64-node report holds some 20k and a
# few MB; each empty list costs 60 bytes parsed (a 58 KB zip of 60M of them took 5 GB).
MAX_JSON_CONTAINERS = 2_000_000
MAX_JSON_BYTES = 128 << 20

# -- Flight Recorder dumps (forensics/frload.py) --------------------------------------------------

# Bytes of one dump: torch's default buffer of 2000 entries with their frames is under 1 MB, and
# each pickle byte may build 45 bytes of objects (two bytes make an empty list: 90 bytes).
MAX_DUMP_BYTES = 16 << 20
# Objects a dump may hold, each reference counted again (a list referenced twice is counted
# twice, as any walk over it visits it twice), and objects its pickle builds: 2000 entries with
# 3 frames each are 144k, with 20 frames about 400k; a 700-byte pickle that references one list
# ten times per level holds 10^40. Told from the pickle's opcodes before it is unpickled
# (forensics/pickscan.py).
MAX_DUMP_OBJECTS = 4_000_000
# Bytes of the strings, bytes and ints of a dump, each reference counted again: 2000 entries with
# 3 frames each hold 1.2 MB (torch's pickler writes each string once and refers to it after);
# 4M objects of 64 bytes. One 100 KB string referred to 10^5 times is 10 GB to any walk.
MAX_DUMP_TEXT_BYTES = 256 << 20
# Levels of nesting in a dump: an entry's frames are 5 deep; repr and the analysis recurse.
MAX_DUMP_DEPTH = 64
# Bytes of one entry's sizes and dtypes as the matching prints them (a real one is under 1 KB),
# and of all the entries of one dump: the count of objects does not see one long string that
# every entry refers to, and printing it 2000 times took 30 s.
MAX_SIGNATURE_BYTES = 64 << 10
MAX_DUMP_SIGNATURE_BYTES = 64 << 20

# -- a ticket's files and archives (ticket.py) ----------------------------------------------------

# What a file's kind is told by: its first bytes, never the whole of it (a 2 GiB file of NUL
# bytes was read whole by the tar and xz probes, minutes).
HEAD_BYTES = 64 << 10
# Decompressed bytes of one archive member or one .gz log: the largest rank log seen in a ticket
# is a few hundred MB; a 12 MB gzip can unpack to 12 GB and take minutes to parse.
MAX_MEMBER_BYTES = 1 << 30
# Decompressed bytes of all the archives of one ticket together.
MAX_TICKET_BYTES = 2 << 30
# Members of all the archives of one ticket, folders, links and refused names included (each
# costs memory in the archive's index): a 1024-rank job's logs and dumps are about 2000 files.
MAX_MEMBERS = 20_000
# Rows of files not read that a ticket lists by name; the rest are counted.
MAX_SKIPPED_NAMED = 200

# -- what the readers keep -------------------------------------------------------------------------

# Processes (host:pid) one set of logs may hold: each costs a record; the largest jobs have some
# 100k ranks, a log holds one node's or a few (16 per node, 1024 nodes' worth).
MAX_PROCESSES = 16_384
# Ranks one RAS output may list: ncclras of the largest jobs; each is a row of every view.
MAX_RAS_RANKS = 16_384
# Rows of one nccl-tests run: a sweep from 8 B to 16 GB by factor 2 is 32 rows.
MAX_TEST_ROWS = 4096

# -- what the views print ---------------------------------------------------------------------------

# Characters of one evidence line or title: NCCL's own lines are under 1 KiB; a 64 KiB line is
# read (and cut, logs.lines-cut) but not quoted whole.
MAX_EVIDENCE_CHARS = 2000
# Evidence lines of one finding: the rest are counted in one line.
MAX_EVIDENCE_LINES = 50
# Findings a terminal or a page shows, worst first (the JSON holds them all): each is a few
# lines and, on the page, its field guide page; 20,000 unreadable dumps were 20,000 findings.
MAX_SHOWN_FINDINGS = 200
