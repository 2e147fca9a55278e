"""Output files written whole or not at all: a bad trace must not leave a half-written file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO, TextIO

from ground.errors import AmdgpuError


@contextlib.contextmanager
def atomic_text_file(path: str | os.PathLike) -> Iterator[TextIO]:
    """A text file at `path` that appears (by rename) only when the block ends without error.

    On an error the temporary file is removed and whatever was at `path` before is kept.
    """
    with _atomic_file(path, "w") as f:
        yield f


@contextlib.contextmanager
def atomic_binary_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """`atomic_text_file` for bytes."""
    with _atomic_file(path, "wb") as f:
        yield f


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike, mode: str):
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=folder)
    except OSError as e:
        raise AmdgpuError(f"cannot write {path}: {e.strerror} ({folder}); "
                          "create the folder or choose another output path") from None
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() would not
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
