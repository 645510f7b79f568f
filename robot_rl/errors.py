"""Errors a user can cause; the CLI prints them as one line and exits with status 2."""


class UserFacingError(RuntimeError):
    """Base for errors whose message names the fix (bad checkpoint, stopped training, ...)."""
