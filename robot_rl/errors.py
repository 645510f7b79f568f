"""Errors a user can cause; the CLI prints them as one line and exits with status 2."""


class UserFacingError(RuntimeError):
    """Base for errors whose message names the fix (bad checkpoint, stopped training, ...)."""


class InputError(UserFacingError, ValueError):
    """A value given to robot_rl (an option, a config field, a file's content) that cannot be used;
    the message names it and what would do. A ``ValueError`` as well, for callers that catch those."""


class MissingFileError(UserFacingError, FileNotFoundError):
    """A file or folder given to robot_rl that is not there; the message names it."""


class TrainingError(UserFacingError):
    """Training stopped; the message says why and where the last good checkpoint is."""


def is_disk_full(error: BaseException) -> bool:
    """The filesystem is out of space (or the user's quota is spent)."""
    import errno

    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(UserFacingError):
    """A write ran out of space; the message names what was being written and what is kept."""
