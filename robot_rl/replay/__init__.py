"""Replay: memory-lean uint8 buffers, online + demo mixing (RLPD symmetric sampling)."""

from robot_rl.replay.buffer import MixedReplay, ReplayBuffer, spec_from_json, spec_to_json

__all__ = ["MixedReplay", "ReplayBuffer", "spec_from_json", "spec_to_json"]
