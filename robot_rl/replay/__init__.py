"""Replay: memory-lean uint8 buffers, online + demo mixing (RLPD symmetric sampling)."""

from robot_rl.replay.buffer import (BatchStaging, FeatureMismatch, MixedReplay, ReplayBuffer, spec_from_json,
                                    spec_to_json)

__all__ = ["BatchStaging", "FeatureMismatch", "MixedReplay", "ReplayBuffer", "spec_from_json", "spec_to_json"]
