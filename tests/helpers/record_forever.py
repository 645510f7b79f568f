"""Test helper: append synthetic episodes to a store until killed, reporting each commit.

usage: python record_forever.py STORE   (creates the store if needed, else appends)
Episode i is ``synthetic_episode(i)``, so a reader can check any committed episode bit for bit.
Every file Zarr writes is reported (``wrote KEY``) and waits for ``go`` on stdin (write_gate.py),
so the test kills it right after a write of its choosing. Prints ``ready N`` once the store is
open (N episodes in it) and ``committed I`` after each ``add_episode`` returns.
"""

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import synthetic_episode as random_episode  # noqa: E402
from write_gate import install  # noqa: E402

from robot_rl.data.store import EpisodeStore  # noqa: E402

FIELDS = {"state": ((20,), np.float32), "action": ((7,), np.float32), "front": ((48, 48, 3), np.uint8),
          "wrist": ((48, 48, 3), np.uint8)}
CAMERAS = {"front": (48, 48), "wrist": (48, 48)}


def synthetic_episode(index: int) -> dict:
    """Episode ``index`` of this store's fields (a random front camera, a smooth wrist one)."""
    return random_episode(index, state_dim=20, cameras={"front": (48, 48)}, smooth_cameras={"wrist": (48, 48)},
                          privileged=(), lengths=(5, 40))


def main(path: str) -> None:
    install()
    if Path(path).exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a cut-off episode from the last kill is expected
            store = EpisodeStore.open(path, mode="a")
    else:
        store = EpisodeStore.create(path, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras=CAMERAS)
    print("ready", len(store), flush=True)
    while True:
        index = store.add_episode(synthetic_episode(len(store)))
        print("committed", index, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
