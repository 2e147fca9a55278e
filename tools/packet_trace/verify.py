"""Reading a trace so that what a command prints was verified by a checksum record.

`Records(path)` iterates a trace's records like `packets.read_trace` and knows how far the
checksum records have vouched for the bytes (`verified(offset)`). A command that prints as
it reads holds its rows until the checksum record after them has been checked; one that
stops early (`--limit N`) calls `finish(offset)`, which reads on to the checksum record
covering the last record it used. A trace without checksum records (an older writer) cannot
be verified: `finish` returns False and the command says so.
"""

from __future__ import annotations

import os
import sys

from packets import trace


class Records:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close() / the with block
        try:
            self.reader = trace.TraceReader(self._file)
        except BaseException:
            self._file.close()
            raise
        self._records = iter(self.reader)

    def __iter__(self):
        return self._records

    def verified(self, offset: int) -> bool:
        """True when a checksum record has vouched for the record at byte `offset`."""
        return offset < self.reader.verified

    def finish(self, offset: int) -> bool:
        """Read on until a checksum record covers the record at byte `offset` (raising
        TraceFormatError when it shows damage). False: the trace has no checksum records."""
        if self.verified(offset):
            return True
        for _ in self._records:
            if self.verified(offset):
                return True
        return self.reader.checksummed  # the end: the reader checked the last span

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def say_unverified(path, what: str) -> None:
    """One line on stderr: what was used early from a trace without checksum records."""
    print(f"packet-trace: note: {path} has no checksum records (an older writer): {what} "
          "not verified", file=sys.stderr)
