"""Replay: memory-lean uint8 buffers, online + demo mixing (RLPD symmetric sampling)."""

from robot_rl.replay.buffer import MixedReplay, ReplayBuffer

__all__ = ["MixedReplay", "ReplayBuffer"]
