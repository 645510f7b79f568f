"""Test helper: a process that stops after every file Zarr writes or deletes until told to go on.

``install()`` makes each write (and delete) of Zarr's local store print ``wrote KEY`` (``deleted
KEY``) and then wait for a line ``go`` on stdin, so a test can SIGKILL the process right after
any write it chooses: kills are placed by events, never by timing, whatever the machine's load.

usage: python write_gate.py ARGS...   runs ``robot-rl ARGS...`` with the gate installed
"""

import subprocess
import sys
import threading


class GatedProcess:
    """The test's side: ``python ARGS`` with the gate installed in it (``install()`` called by the
    script); iterate ``lines()``, answer each write with ``go()``, or ``kill()`` right after it.
    A watchdog kills the process after ``timeout`` seconds as a failsafe against a hang."""

    def __init__(self, args: list[str], stderr, timeout: float = 120):
        self.proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr, text=True)
        self.watchdog = threading.Timer(timeout, self.proc.kill)
        self.watchdog.start()

    def lines(self):
        for line in self.proc.stdout:
            yield line.rstrip("\n")

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> int:
        self.proc.kill()
        return self.wait()

    def wait(self) -> int:
        code = self.proc.wait(60)
        self.watchdog.cancel()
        self.proc.stdin.close()
        self.proc.stdout.close()
        return code


def install() -> None:
    from zarr.storage import LocalStore

    write, delete = LocalStore._set, LocalStore.delete

    async def gated_write(self, key, value, exclusive=False):
        await write(self, key, value, exclusive)
        _wait("wrote", key)

    async def gated_delete(self, key):
        await delete(self, key)
        _wait("deleted", key)

    LocalStore._set, LocalStore.delete = gated_write, gated_delete  # noqa: SLF001


def _wait(what: str, key: str) -> None:
    print(what, key, flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit(3)  # the test closed the gate without killing us


if __name__ == "__main__":
    install()
    from robot_rl.commands.cli import main

    sys.exit(main(sys.argv[1:]))
