"""A frozen image backbone whose features are computed once per frame and cached in the replay.

HIL-SERL freezes a pretrained ResNet-10 and trains only a small head. With the backbone frozen,
a frame's feature map never changes, so it is computed once (when the frame enters the replay,
and when the actor acts on it) instead of once per sample per update: the learner's updates see
float16 feature maps, ``[h, w, C]`` per camera, and train only the head (spatial learned
embeddings, projection, MLPs). Shifting the cached feature map by a cell is the augmentation.

An encoder folder (``robot-rl encoder pretrain`` writes one) holds ``encoder.safetensors``: one
backbone per camera (``<camera>.<layer>...``) and its description in the file's metadata
(``meta``: backbone, cameras, image size, conv channels/strides, the objective that trained it,
``sha``: a hash of the weights). The hash follows the weights into agent checkpoints and replay
files, so features of one encoder are never read by a head trained on another's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.agents.encoders import (DRQ_STRIDES, ImagePreprocess, ResNet18Trunk, drq_convnet, drq_feature_size,
                                      load_resnet18_weights, weight_init)
from robot_rl.errors import UserFacingError

BACKBONES = ("drq", "resnet18")
DRQ_BACKBONE = {"backbone": "drq", "channels": 32, "strides": list(DRQ_STRIDES)}  # the trainable encoder's conv stack
ENCODER_FILE = "encoder.safetensors"


class FrozenEncoderError(UserFacingError):
    """An encoder folder that cannot be used, or features / a checkpoint of another encoder."""


def conv_backbone(channels: int = 32, strides: tuple[int, ...] = DRQ_STRIDES) -> nn.Sequential:
    """DrQ's conv stack (3x3 convs + ReLU), the trainable encoder's own trunk."""
    net = drq_convnet(channels, strides)
    net.apply(weight_init)
    return net


def feature_shape(meta: dict) -> tuple[int, int, int]:
    """``[h, w, C]`` of one camera's cached features."""
    h, w = (int(n) for n in meta["image_size"])
    if meta["backbone"] == "resnet18":
        h, w = ResNet18Trunk.feature_size(h, w)
        return h, w, ResNet18Trunk.out_channels
    h, w = drq_feature_size((h, w), meta["strides"])
    if h < 1 or w < 1:
        raise FrozenEncoderError(f"image size {meta['image_size']} is too small for strides {meta['strides']}")
    return h, w, int(meta["channels"])


class Backbone(nn.Module):
    """uint8 ``[B, H, W, 3]`` -> float feature map ``[B, h, w, C]`` (channels last, like the images)."""

    def __init__(self, meta: dict):
        super().__init__()
        self.kind = meta["backbone"]
        if self.kind == "drq":
            self.net = conv_backbone(int(meta["channels"]), tuple(meta["strides"]))
        elif self.kind == "resnet18":
            self.net = ResNet18Trunk()
        else:
            raise FrozenEncoderError(f"unknown backbone {self.kind!r}; choose one of {list(BACKBONES)}")
        self.preprocess = ImagePreprocess(imagenet=self.kind == "resnet18")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(self.preprocess(images)).permute(0, 2, 3, 1)


def weights_sha(state: dict[str, torch.Tensor]) -> str:
    """A hash of the weights alone (names, shapes, values), whatever file holds them."""
    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


class FrozenEncoder(nn.Module):
    """One frozen backbone per camera; ``features`` turns a flat observation's camera images into
    cached float16 feature maps. ``meta`` describes it (see the module docstring)."""

    def __init__(self, meta: dict):
        super().__init__()
        self.meta = dict(meta)
        self.cameras = tuple(meta["cameras"])
        self.image_size = tuple(int(n) for n in meta["image_size"])
        self.feature_shape = feature_shape(meta)
        self.backbones = nn.ModuleDict({cam: Backbone(meta) for cam in self.cameras})
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> "FrozenEncoder":
        return super().train(False)  # frozen: BatchNorm statistics never move

    @property
    def sha(self) -> str:
        return self.meta.get("sha") or weights_sha(self.backbones.state_dict())

    def describe(self) -> str:
        h, w = self.image_size
        return f"{self.meta['backbone']} backbone on {h}x{w} frames of {list(self.cameras)}, sha {self.sha[:12]}"

    @torch.no_grad()
    def features(self, images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """uint8 ``[B, H, W, 3]`` per camera -> float16 ``[B, h, w, C]`` per camera."""
        out = {}
        for cam, img in images.items():
            if img.ndim != 4 or tuple(img.shape[1:]) != (*self.image_size, 3):
                raise FrozenEncoderError(f"the frozen encoder ({self.describe()}) got {cam} images of shape "
                                         f"{tuple(img.shape[1:])}, not {(*self.image_size, 3)}")
            out[cam] = self.backbones[cam](img).to(torch.float16)
        return out

    # ---- files -------------------------------------------------------------------------
    def save(self, folder: str | Path, **extra) -> Path:
        """Write ``<folder>/encoder.safetensors`` (weights + meta with their sha); returns the file."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.backbones.state_dict().items()}
        self.meta = {**self.meta, **extra, "sha": weights_sha(state)}
        path = folder / ENCODER_FILE
        tmp = folder / (ENCODER_FILE + ".tmp")
        save_file(state, str(tmp), metadata={"meta": json.dumps(self.meta)})
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "FrozenEncoder":
        """An encoder folder (or its ``encoder.safetensors``); its weights must match their sha."""
        meta = read_encoder_meta(folder)
        path = encoder_file(folder)
        try:
            state = load_file(str(path))
        except (OSError, SafetensorError) as err:
            raise FrozenEncoderError(f"encoder file {path} does not load ({err})") from err
        encoder = cls(meta)
        try:
            encoder.backbones.load_state_dict(state)
        except RuntimeError as err:
            raise FrozenEncoderError(f"encoder file {path} does not match its own description: "
                                     f"{str(err).splitlines()[0]}") from err
        if weights_sha(encoder.backbones.state_dict()) != meta["sha"]:
            raise FrozenEncoderError(f"encoder file {path}: the weights do not match their sha {meta['sha'][:12]} "
                                     "(the file was changed or damaged); run robot-rl encoder pretrain again")
        return encoder

    @classmethod
    def from_torchvision(cls, weights: str | Path, cameras, image_size) -> "FrozenEncoder":
        """A user's pretrained ResNet-18 (torchvision names, a local file) as the frozen backbone of every camera."""
        meta = {"backbone": "resnet18", "cameras": list(cameras), "image_size": [int(n) for n in image_size],
                "objective": "pretrained", "source": str(weights)}
        encoder = cls(meta)
        for backbone in encoder.backbones.values():
            try:
                load_resnet18_weights(backbone.net, weights)
            except (FileNotFoundError, ValueError) as err:
                raise FrozenEncoderError(str(err)) from err
        return encoder


def encoder_file(folder: str | Path) -> Path:
    folder = Path(folder)
    return folder if folder.suffix == ".safetensors" else folder / ENCODER_FILE


def read_encoder_meta(folder: str | Path) -> dict:
    """The description of an encoder folder, without reading its weights."""
    path = encoder_file(folder)
    if not path.is_file():
        raise FrozenEncoderError(f"frozen encoder {folder}: no {ENCODER_FILE} there (make one with robot-rl encoder "
                                 "pretrain --data STORE --out DIR)")
    try:
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = json.loads((f.metadata() or {})["meta"])
        for key in ("backbone", "cameras", "image_size", "sha"):
            meta[key]
        feature_shape(meta)  # and what its backbone needs (a drq backbone's channels and strides)
    except (OSError, SafetensorError, KeyError, ValueError, TypeError) as err:
        raise FrozenEncoderError(f"encoder file {path} is not a robot-rl encoder ({type(err).__name__}: {err})") from err
    return meta


def check_encoder_fits(meta: dict, cameras, image_size, source: str) -> None:
    """The encoder ``meta`` describes must read ``cameras`` at ``image_size``."""
    missing = [cam for cam in cameras if cam not in meta["cameras"]]
    if missing:
        raise FrozenEncoderError(f"frozen encoder {source} has backbones for cameras {meta['cameras']}, not {missing}")
    if [int(n) for n in image_size] != [int(n) for n in meta["image_size"]]:
        h, w = meta["image_size"]
        raise FrozenEncoderError(f"frozen encoder {source} was trained on {h}x{w} frames, not "
                                 f"{image_size[0]}x{image_size[1]}: use --image-size {h} {w} or pretrain another")


def features_of(encoder: FrozenEncoder, obs: dict, cameras, device: torch.device | str = "cpu") -> dict:
    """A flat observation batch (numpy or tensors) with each camera's images replaced by its cached
    float16 features (numpy); other keys pass through."""
    images = {cam: torch.as_tensor(np.asarray(obs[cam])).to(device) for cam in cameras}
    feats = encoder.features(images)
    return {**obs, **{cam: feats[cam].cpu().numpy() for cam in cameras}}
