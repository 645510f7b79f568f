"""Run by a LeRobot venv's Python (``ROBOT_RL_LEROBOT_PYTHON``): write a tiny, untrained ACT policy
as LeRobot saves one (``config.json``, ``model.safetensors`` and its pre- and post-processors with
normalisation statistics) into FOLDER, for tests/test_base_policy.py's LeRobot base. Also writes
FOLDER/expected.npz: one observation and the chunk LeRobot's own ``predict_action_chunk`` gives
for it, through the processors, so the test compares what our worker answers with LeRobot's; and
the same for images twice the size, resized to the policy's (bilinear, antialiased) before the
policy reads them (a base map's ``resize``).

    python tests/helpers/make_act_policy.py FOLDER STATE_WIDTH IMAGE_SIZE CAMERA...
"""

import sys
from pathlib import Path

import numpy as np
import torch
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import make_pre_post_processors

folder, width, size, cameras = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
torch.manual_seed(0)
inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (width,))}
inputs.update({f"observation.images.{cam}": PolicyFeature(FeatureType.VISUAL, (3, size, size)) for cam in cameras})
config = ACTConfig(input_features=inputs, output_features={"action": PolicyFeature(FeatureType.ACTION, (7,))},
                   chunk_size=5, n_action_steps=5, dim_model=32, dim_feedforward=64, n_heads=2, n_encoder_layers=1,
                   n_decoder_layers=1, latent_dim=8, pretrained_backbone_weights=None, device="cpu",
                   normalization_mapping={"VISUAL": NormalizationMode.MEAN_STD, "STATE": NormalizationMode.MEAN_STD,
                                          "ACTION": NormalizationMode.MEAN_STD})
policy = ACTPolicy(config)
stats = {"observation.state": {"mean": np.linspace(-0.2, 0.2, width), "std": np.full(width, 0.5)},
         "action": {"mean": np.full(7, 0.1), "std": np.full(7, 0.3)}}
for cam in cameras:
    stats[f"observation.images.{cam}"] = {"mean": np.full((3, 1, 1), 0.4), "std": np.full((3, 1, 1), 0.2)}
pre, post = make_pre_post_processors(config, dataset_stats=stats)
folder.mkdir(parents=True, exist_ok=True)
policy.save_pretrained(folder)
pre.save_pretrained(folder)
post.save_pretrained(folder)

rng = np.random.default_rng(1)
obs = {"state": rng.normal(size=width).astype(np.float32)}
obs.update({cam: rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for cam in cameras})
batch = {"observation.state": torch.from_numpy(obs["state"])[None], "task": [""]}
for cam in cameras:
    batch[f"observation.images.{cam}"] = torch.from_numpy(obs[cam]).permute(2, 0, 1)[None].float() / 255.0
policy.eval()
with torch.inference_mode():
    chunk = post(policy.predict_action_chunk(pre(batch)))[0].numpy()
big = {f"{cam}_big": rng.integers(0, 256, (2 * size, 2 * size, 3), dtype=np.uint8) for cam in cameras}
for cam in cameras:
    image = torch.from_numpy(big[f"{cam}_big"]).permute(2, 0, 1)[None].float() / 255.0
    batch[f"observation.images.{cam}"] = torch.nn.functional.interpolate(image, size=(size, size), mode="bilinear",
                                                                          antialias=True, align_corners=False)
policy.reset()
with torch.inference_mode():
    chunk_resized = post(policy.predict_action_chunk(pre(batch)))[0].numpy()
np.savez(folder / "expected.npz", chunk=chunk, chunk_resized=chunk_resized, **obs, **big)
print(folder)
