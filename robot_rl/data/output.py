"""Outputs that appear whole or not at all: written under a temporary name next to the final
path and renamed into place once complete."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL = ".partial-"  # temporary names: .<stem>.partial-<pid><suffix>


@contextmanager
def written_whole(out: str | Path) -> Iterator[Path]:
    """A temporary path next to ``out`` to write to: renamed to ``out`` when the block
    completes, removed when it fails. A run killed outright leaves only its temporary, which
    the next run writing ``out`` removes. Callers check that ``out`` does not exist yet (a file
    is replaced, a folder is not)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(out)
    tmp = out.with_name(f".{out.stem}{PARTIAL}{os.getpid()}{out.suffix}")
    remove(tmp)
    try:
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        remove(tmp)
        raise


def remove_abandoned(out: Path) -> None:
    """Temporaries of ``out`` left by runs that were killed (their process is gone)."""
    for tmp in out.parent.glob(f".{out.stem}{PARTIAL}*{out.suffix}"):
        pid = tmp.name[len(f".{out.stem}{PARTIAL}"):len(tmp.name) - len(out.suffix)]
        if pid.isdigit() and not _alive(int(pid)):
            remove(tmp)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
