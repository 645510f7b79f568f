"""Errors a user can cause; the CLI prints them as one line and exits with status 2."""


class UserFacingError(RuntimeError):
    """Base for errors whose message names the fix (bad checkpoint, stopped training, ...)."""


class TrainingError(UserFacingError):
    """Training stopped; the message says why and where the last good checkpoint is."""


def is_disk_full(error: BaseException) -> bool:
    """The filesystem is out of space (or the user's quota is spent)."""
    import errno

    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(UserFacingError):
    """A write ran out of space; the message names what was being written and what is kept."""
