"""pytest-xdist's ``--dist load`` scheduling (the next pending test to whichever worker is free),
except that the tests of some modules all go to one worker (the first to take one of them):
tests/conftest.py's ONE_WORKER_MODULES, whose tests share a module-scoped server that only one
worker may run at a time (two workers each in such a module leave one waiting on the other's lock
for the whole module)."""

from __future__ import annotations

from xdist.scheduler import LoadScheduling


class OneWorkerModules(LoadScheduling):
    """A worker skips over the tests of a one-worker module that another worker has; once nothing
    is left but such tests, every other worker is sent home with what it holds."""

    def __init__(self, config, log=None, modules: tuple[str, ...] = ()):
        super().__init__(config, log)
        self.modules = modules
        self.owners: dict = {}  # module -> the worker that has its tests

    def _module_of(self, index: int) -> str | None:
        module = self.collection[index].split("::", 1)[0]
        return module if module in self.modules else None

    def _send_tests(self, node, num: int) -> None:
        # a worker that went down (crashed) gives its modules up
        self.owners = {module: owner for module, owner in self.owners.items() if owner in self.node2pending}
        chosen: list[int] = []
        for index in self.pending:
            if len(chosen) == num:
                break
            module = self._module_of(index)
            if module is None or self.owners.setdefault(module, node) is node:
                chosen.append(index)
        if chosen:
            self.pending[:] = [index for index in self.pending if index not in chosen]
            self.node2pending[node].extend(chosen)
            node.send_runtest_some(chosen)

    def check_schedule(self, node, duration: float = 0) -> None:
        super().check_schedule(node, duration)
        if node.shutting_down:
            return
        if self.pending and all(self.owners.get(self._module_of(i)) not in (None, node) for i in self.pending):
            node.shutdown()  # what is left belongs to another worker
