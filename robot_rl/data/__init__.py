"""Episode stores (Zarr v3): ``EpisodeStore`` to create, open, append and read them;
``check_store`` to verify (and repair) one."""

from robot_rl.data.check import check_store
from robot_rl.data.store import EpisodeStore, StoreError

__all__ = ["EpisodeStore", "StoreError", "check_store"]
