"""Image encoders for pixel-based SAC/RLPD, in the style of DrQ-v2's drqv2.py.

Everything here takes camera images the way the robot produces them: uint8,
channels-last ``[B, H, W, 3]``. Conversion to float NCHW happens inside each
encoder, so replay buffers can keep storing compact uint8 frames.

* ``random_shift``            DrQ random-shift augmentation (pad + random crop).
* ``SpatialLearnedEmbeddings`` HIL-SERL's learned spatial pooling.
* ``DrQConvEncoder``          the small 4-layer conv net of DrQ/DrQ-v2.
* ``ResNet18Encoder``         a ResNet-18 trunk whose parameter names match
                              torchvision's ``resnet18`` so locally saved
                              weights load (nothing is ever downloaded).
* ``FeatureHead``             the trainable head over a frozen backbone's cached feature
                              maps (``frozen.py``): spatial embeddings and projection.
* ``make_image_encoder``      factory over the three.
* ``MultiCameraEncoder``      one encoder per camera, features concatenated.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch
import torch.nn as nn

from robot_rl.errors import InputError, MissingFileError

__all__ = [
    "random_shift",
    "SpatialLearnedEmbeddings",
    "DrQConvEncoder",
    "BasicBlock",
    "ResNet18Trunk",
    "ResNet18Encoder",
    "load_resnet18_weights",
    "FeatureHead",
    "make_image_encoder",
    "MultiCameraEncoder",
    "ENCODER_KINDS",
    "DRQ_STRIDES",
    "ImagePreprocess",
]

ENCODER_KINDS = ("drq", "resnet18", "frozen")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# DrQ's conv strides, the CPU-friendly variant (about 6x fewer FLOPs at 64x64 than DrQ-v2's
# (2, 1, 1, 1), which a GPU user can pass for the original)
DRQ_STRIDES = (2, 2, 2, 1)


# --------------------------------------------------------------------------- #
# Preprocessing: the one way camera images enter a network
# --------------------------------------------------------------------------- #
class ImagePreprocess(nn.Module):
    """uint8 images ``[B, H, W, 3]`` -> float32 ``[B, 3, H, W]``: ``x / 255 - 0.5`` for DrQ's
    convs, ImageNet's mean/std normalisation (``imagenet=True``) for a ResNet trunk. Shared by the
    trainable encoders and the frozen backbones, so a feature cache and the network that reads
    images see the same numbers."""

    def __init__(self, imagenet: bool = False):
        super().__init__()
        self.imagenet = imagenet
        if imagenet:
            self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
            self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0
        return (x - self.mean) / self.std if self.imagenet else x - 0.5


# --------------------------------------------------------------------------- #
# Augmentation
# --------------------------------------------------------------------------- #
def random_shift(
    images: torch.Tensor, pad: int = 4, generator: torch.Generator | None = None
) -> torch.Tensor:
    """DrQ random shift: replicate-pad by ``pad`` then crop a random HxW window.

    ``images`` is a batch ``[B, H, W, C]`` (NHWC) of any dtype (uint8 or float).
    Each sample gets its own integer shift ``(dy, dx)`` in ``[-pad, pad]``.
    Implemented as a single gather with clamped indices, which is exactly
    replicate padding followed by cropping, without materialising the padded
    batch and without any interpolation, so dtype and values are preserved.
    The gather takes whole pixels (rows of C values) by one flat index, 3.6x
    faster on a CPU than indexing batch, row and column at once (the same result).
    """
    if images.ndim != 4:
        raise InputError(f"random_shift expects [B, H, W, C] images, got shape {tuple(images.shape)}")
    if pad < 0:
        raise InputError(f"pad must be >= 0, got {pad}")
    if pad == 0:
        return images
    b, h, w, _ = images.shape
    device = images.device
    # Crop offsets in the padded image are in [0, 2*pad]; as shifts, minus pad.
    shifts = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator, device=device) - pad
    rows = (torch.arange(h, device=device)[None, :] + shifts[:, 0:1]).clamp_(0, h - 1)  # [B, H]
    cols = (torch.arange(w, device=device)[None, :] + shifts[:, 1:2]).clamp_(0, w - 1)  # [B, W]
    pixel = torch.arange(b, device=device)[:, None, None] * (h * w) + rows[:, :, None] * w + cols[:, None, :]
    return images.reshape(b * h * w, images.shape[3]).index_select(0, pixel.reshape(-1)).reshape(images.shape)


# --------------------------------------------------------------------------- #
# Building blocks
# --------------------------------------------------------------------------- #
def weight_init(m: nn.Module) -> None:
    """DrQ-v2 initialisation: orthogonal weights, zero biases."""
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        if m.bias is not None:
            m.bias.data.fill_(0.0)
    elif isinstance(m, nn.Conv2d):
        nn.init.orthogonal_(m.weight.data, nn.init.calculate_gain("relu"))
        if m.bias is not None:
            m.bias.data.fill_(0.0)


def _check_image_size(image_size) -> tuple[int, int]:
    try:
        h, w = (int(s) for s in image_size)
    except (TypeError, ValueError):
        raise InputError(f"image_size must be (height, width), got {image_size!r}") from None
    if h <= 0 or w <= 0:
        raise InputError(f"image_size must be positive, got {image_size!r}")
    return h, w


def _check_images(x: torch.Tensor, image_size: tuple[int, int], who: str) -> None:
    if x.ndim != 4 or x.shape[-1] != 3 or tuple(x.shape[1:3]) != tuple(image_size):
        raise InputError(
            f"{who} expects uint8 images [B, {image_size[0]}, {image_size[1]}, 3] (NHWC), "
            f"got shape {tuple(x.shape)}"
        )


class SpatialLearnedEmbeddings(nn.Module):
    """HIL-SERL spatial pooling: a learned weighting of every feature-map location.

    With a kernel ``K`` of shape ``[H, W, C, num_features]`` and NCHW features
    ``x``, ``out[b, c, f] = sum_{h,w} x[b, c, h, w] * K[h, w, c, f]``, flattened
    to ``[B, C * num_features]`` (index ``c * num_features + f``).
    """

    def __init__(self, height: int, width: int, channels: int, num_features: int = 8):
        super().__init__()
        self.height, self.width, self.channels = height, width, channels
        self.num_features = num_features
        self.kernel = nn.Parameter(torch.empty(height, width, channels, num_features))
        # LeCun-normal (truncated), fan_in = H*W*C, as flax's default in HIL-SERL.
        std = math.sqrt(1.0 / (height * width * channels)) / 0.87962566103423978
        nn.init.trunc_normal_(self.kernel, std=std, a=-2 * std, b=2 * std)

    @property
    def out_dim(self) -> int:
        return self.channels * self.num_features

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        expected = (self.channels, self.height, self.width)
        if features.ndim != 4 or tuple(features.shape[1:]) != expected:
            raise InputError(f"expected features [B, {', '.join(map(str, expected))}], got {tuple(features.shape)}")
        # one batched matmul per channel with the batch as the wide axis ([C, F, HW] @ [C, HW, B]):
        # the same sum as einsum("bchw,hwcf->bcf"), about 1.3x faster forward and backward on a CPU
        # than einsum's [C, B, HW] @ [C, HW, F], whose output axis is only num_features wide
        b, c = features.shape[:2]
        # one copy into the [C, HW, B] layout, as float32 (cached float16 feature maps included)
        x = features.permute(1, 2, 3, 0).to(torch.float32, memory_format=torch.contiguous_format).reshape(c, -1, b)
        k = self.kernel.reshape(-1, c, self.num_features).permute(1, 2, 0).contiguous()  # [C, F, HW]
        return torch.bmm(k, x).permute(2, 0, 1).reshape(b, -1)  # [B, C * F], index c * F + f


def _projection(in_dim: int, out_dim: int) -> nn.Sequential:
    """Linear -> LayerNorm -> tanh bottleneck (DrQ-v2 trunk / HIL-SERL bottleneck)."""
    return nn.Sequential(nn.Linear(in_dim, out_dim), nn.LayerNorm(out_dim), nn.Tanh())


# --------------------------------------------------------------------------- #
# DrQ conv encoder
# --------------------------------------------------------------------------- #
def drq_convnet(channels: int = 32, strides: tuple[int, ...] = DRQ_STRIDES) -> nn.Sequential:
    """DrQ's conv stack: 3x3 convs + ReLU, ``channels`` wide, at torch's default init (its users
    then apply ``weight_init``: the trainable encoder after building its head, so that the random
    draws keep their order)."""
    layers: list[nn.Module] = []
    for i, stride in enumerate(strides):
        layers += [nn.Conv2d(3 if i == 0 else channels, channels, 3, stride=stride), nn.ReLU()]
    return nn.Sequential(*layers)


def drq_feature_size(image_size, strides: tuple[int, ...]) -> tuple[int, int]:
    """Height and width of ``drq_convnet``'s feature map (< 1 when the image is too small)."""
    h, w = (int(n) for n in image_size)
    for stride in strides:
        h, w = (h - 3) // stride + 1, (w - 3) // stride + 1
    return h, w


class DrQConvEncoder(nn.Module):
    """DrQ(-v2) encoder: 4 conv3x3 (+ReLU), pooling, projection.

    ``strides``: ``DRQ_STRIDES`` by default.

    Input: uint8 ``[B, H, W, 3]`` (``ImagePreprocess``: ``x / 255 - 0.5``, NCHW).
    ``pooling="spatial"`` uses ``SpatialLearnedEmbeddings``; ``"flatten"``
    flattens the feature map as DrQ-v2 does. Output ``[B, out_dim]`` in (-1, 1).
    """

    def __init__(
        self,
        image_size: tuple[int, int],
        channels: int = 32,
        out_dim: int = 64,
        pooling: str = "spatial",
        num_spatial_features: int = 8,
        strides: tuple[int, ...] = DRQ_STRIDES,
    ):
        super().__init__()
        if len(strides) != 4:
            raise InputError(f"strides must have 4 entries, got {strides}")
        if pooling not in ("spatial", "flatten"):
            raise InputError(f"pooling must be 'spatial' or 'flatten', got {pooling!r}")
        self.image_size = _check_image_size(image_size)
        self.out_dim = out_dim
        self.pooling = pooling

        self.preprocess = ImagePreprocess()
        self.convnet = drq_convnet(channels, strides)
        fh, fw = drq_feature_size(self.image_size, strides)
        if fh < 1 or fw < 1:
            raise InputError(f"image_size {self.image_size} is too small for DrQConvEncoder with strides {strides}")
        self.feature_shape = (channels, fh, fw)

        if pooling == "spatial":
            self.pool = SpatialLearnedEmbeddings(fh, fw, channels, num_spatial_features)
            pooled_dim = self.pool.out_dim
        else:
            self.pool = nn.Flatten()
            pooled_dim = channels * fh * fw
        self.projection = _projection(pooled_dim, out_dim)
        self.convnet.apply(weight_init)
        self.projection.apply(weight_init)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images(images, self.image_size, type(self).__name__)
        return self.projection(self.pool(self.convnet(self.preprocess(images))))


# --------------------------------------------------------------------------- #
# ResNet-18 (torchvision-compatible parameter names)
# --------------------------------------------------------------------------- #
class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock (same submodule names)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18Trunk(nn.Module):
    """ResNet-18 without avgpool/fc; ``state_dict`` keys match torchvision's resnet18."""

    out_channels = 512

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, 64, stride=1)
        self.layer2 = self._make_layer(64, 128, stride=2)
        self.layer3 = self._make_layer(128, 256, stride=2)
        self.layer4 = self._make_layer(256, 512, stride=2)
        # torchvision's init.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _make_layer(inplanes: int, planes: int, stride: int) -> nn.Sequential:
        return nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes, 1))

    @staticmethod
    def feature_size(height: int, width: int) -> tuple[int, int]:
        """Spatial size of the layer4 output for an input of ``height x width``."""
        # conv1, maxpool, layer2, layer3, layer4 each map n -> floor((n - 1) / 2) + 1.
        for _ in range(5):
            height, width = (height - 1) // 2 + 1, (width - 1) // 2 + 1
        return height, width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


def load_resnet18_weights(trunk: ResNet18Trunk, path: str | Path) -> None:
    """Load torchvision-style resnet18 weights from a local ``.pt``/``.pth``/``.safetensors``.

    ``fc.*`` keys are ignored; missing ``num_batches_tracked`` buffers are
    tolerated (torchvision's published checkpoints predate them). Any other
    missing/unexpected key or shape mismatch raises ``ValueError``.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(
            f"pretrained weights file not found: {str(path)!r}. Pretrained ResNet-18 weights are "
            "loaded only from a local file you provide (e.g. a saved torchvision resnet18 "
            "state_dict as .pt/.pth/.safetensors); nothing is downloaded."
        )
    suffix = path.suffix.lower()
    if suffix in (".pt", ".pth"):
        state = torch.load(path, map_location="cpu", weights_only=True)
    elif suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path), device="cpu")
    else:
        raise InputError(f"unsupported weights file {str(path)!r}: expected .pt, .pth or .safetensors")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(f"{str(path)!r} does not contain a flat state_dict of tensors")

    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    own = trunk.state_dict()
    unexpected = sorted(set(state) - set(own))
    missing = sorted(k for k in set(own) - set(state) if not k.endswith("num_batches_tracked"))
    mismatched = sorted(
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(state) & set(own)
        if state[k].shape != own[k].shape
    )
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"missing keys {missing}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected}")
        if mismatched:
            parts.append(f"shape mismatches {mismatched}")
        raise InputError(f"{str(path)!r} is not a torchvision resnet18 state_dict: " + "; ".join(parts))
    trunk.load_state_dict(state, strict=False)


class ResNet18Encoder(nn.Module):
    """ResNet-18 trunk -> SpatialLearnedEmbeddings -> Linear/LayerNorm/tanh.

    Input: uint8 ``[B, H, W, 3]``, normalised with ImageNet mean/std.
    ``pretrained_path`` loads a local torchvision resnet18 state_dict into
    ``self.trunk``. ``freeze=True`` stops gradients to the trunk and keeps it in
    eval mode whatever ``train()`` is called with, so BatchNorm stats stay put.
    """

    def __init__(
        self,
        image_size: tuple[int, int],
        out_dim: int = 64,
        pretrained_path: str | Path | None = None,
        freeze: bool = False,
        num_spatial_features: int = 8,
    ):
        super().__init__()
        self.image_size = _check_image_size(image_size)
        self.out_dim = out_dim
        self.freeze = freeze
        self.trunk = ResNet18Trunk()
        if pretrained_path is not None:
            load_resnet18_weights(self.trunk, pretrained_path)
        elif freeze:
            warnings.warn("ResNet18Encoder(freeze=True) without pretrained_path freezes random weights", stacklevel=2)
        if freeze:
            self.trunk.requires_grad_(False)
            self.trunk.eval()

        self.preprocess = ImagePreprocess(imagenet=True)
        fh, fw = ResNet18Trunk.feature_size(*self.image_size)
        self.pool = SpatialLearnedEmbeddings(fh, fw, ResNet18Trunk.out_channels, num_spatial_features)
        self.projection = _projection(self.pool.out_dim, out_dim)
        self.projection.apply(weight_init)

    def train(self, mode: bool = True) -> ResNet18Encoder:
        super().train(mode)
        if self.freeze:
            self.trunk.eval()
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images(images, self.image_size, type(self).__name__)
        return self.projection(self.pool(self.trunk(self.preprocess(images))))


# --------------------------------------------------------------------------- #
# Head over cached features of a frozen backbone
# --------------------------------------------------------------------------- #
class FeatureHead(nn.Module):
    """Cached feature maps ``[B, h, w, C]`` (float16 or float32, channels last) ->
    SpatialLearnedEmbeddings -> Linear/LayerNorm/tanh ``[B, out_dim]``: all that trains when the
    backbone is frozen (see ``frozen.py``)."""

    def __init__(self, feature_shape: tuple[int, int, int], out_dim: int = 64, num_spatial_features: int = 8):
        super().__init__()
        self.feature_shape = tuple(int(n) for n in feature_shape)
        h, w, c = self.feature_shape
        self.out_dim = out_dim
        self.pool = SpatialLearnedEmbeddings(h, w, c, num_spatial_features)
        self.projection = _projection(self.pool.out_dim, out_dim)
        self.projection.apply(weight_init)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.ndim != 4 or tuple(features.shape[1:]) != self.feature_shape:
            raise InputError(f"FeatureHead expects cached features [B, {', '.join(map(str, self.feature_shape))}], "
                             f"got shape {tuple(features.shape)}")
        return self.projection(self.pool(features.permute(0, 3, 1, 2)))  # the pool makes them float32


# --------------------------------------------------------------------------- #
# Factory and multi-camera wrapper
# --------------------------------------------------------------------------- #
def make_image_encoder(
    kind: str,
    image_size: tuple[int, int],
    out_dim: int = 64,
    pretrained_path: str | Path | None = None,
    freeze: bool = False,
    feature_shape: tuple[int, int, int] | None = None,
) -> nn.Module:
    """Build an image encoder: ``"drq"`` (DrQConvEncoder), ``"resnet18"`` or ``"frozen"`` (a
    ``FeatureHead`` over cached features of shape ``feature_shape``)."""
    if kind == "frozen":
        if feature_shape is None:
            raise InputError("kind 'frozen' needs the cached features' shape (feature_shape)")
        return FeatureHead(feature_shape, out_dim=out_dim)
    if kind == "drq":
        if pretrained_path is not None:
            raise InputError("pretrained_path is only supported for kind 'resnet18', not 'drq'")
        if freeze:
            raise InputError("freeze=True is only supported for kind 'resnet18' (with pretrained weights)")
        return DrQConvEncoder(image_size, out_dim=out_dim)
    if kind == "resnet18":
        return ResNet18Encoder(image_size, out_dim=out_dim, pretrained_path=pretrained_path, freeze=freeze)
    raise InputError(f"unknown encoder kind {kind!r}; choose one of {list(ENCODER_KINDS)}")


class MultiCameraEncoder(nn.Module):
    """One image encoder per camera; their features concatenated.

    ``forward(obs)`` reads ``obs[camera]`` (uint8 ``[B, H, W, 3]``, or cached features with
    kind ``"frozen"``) for every camera and
    returns ``[B, out_dim * len(cameras)]`` (cameras in the given order). The robot state is
    the caller's (``ObservationEncoder`` appends it).
    """

    def __init__(
        self,
        cameras: list[str],
        image_size: tuple[int, int],
        kind: str = "drq",
        out_dim: int = 64,
        pretrained_path: str | Path | None = None,
        freeze: bool = False,
        feature_shape: tuple[int, int, int] | None = None,
    ):
        super().__init__()
        cameras = list(cameras)
        if not cameras:
            raise InputError("MultiCameraEncoder needs at least one camera")
        if len(set(cameras)) != len(cameras):
            raise InputError(f"duplicate camera names in {cameras}")
        for cam in cameras:
            if not cam or "." in cam or cam == "state":
                raise InputError(f"invalid camera name {cam!r} (must be non-empty, no '.', not 'state')")
        self.cameras = cameras
        self.encoders = nn.ModuleDict(
            {cam: make_image_encoder(kind, image_size, out_dim, pretrained_path, freeze, feature_shape) for cam in cameras}
        )
        self.out_dim = out_dim * len(cameras)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([self.encoders[cam](obs[cam]) for cam in self.cameras], dim=-1)
