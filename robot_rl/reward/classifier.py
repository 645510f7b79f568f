"""The success classifier: camera frames -> P(task solved), and its calibrated decision rule.

    model       : one image encoder per camera (the policy's family: small DrQ conv by
                  default, a local pretrained ResNet-18 optionally), features concatenated,
                  a LayerNorm MLP head, one logit.
    augment     : random shift (pad 4) and per-image brightness/contrast jitter while training.
    calibrate   : the decision threshold is chosen on held-out episodes for a target false-
                  positive rate (default 1%): a policy learns to exploit false positives, so
                  they are what we bound; ``consecutive`` positive frames debounce it further.
    metrics     : precision, recall, false-positive rate, ROC-AUC (numpy, no extra deps).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.agents.encoders import MultiCameraEncoder, random_shift
from robot_rl.agents.networks import mlp
from robot_rl.errors import InputError, UserFacingError


class ClassifierError(UserFacingError):
    """Bad classifier data or a classifier file that cannot be used here."""


@dataclass
class ClassifierConfig:
    cameras: tuple[str, ...] = ("front", "wrist")
    image_size: tuple[int, int] = (64, 64)
    encoder: str = "drq"  # "drq" or "resnet18"
    features: int = 64
    hidden: tuple[int, ...] = (256,)
    pretrained_path: str | None = None
    freeze_backbone: bool = False
    augment_pad: int = 4
    color_jitter: float = 0.2  # +- brightness and contrast (fraction) per image while training
    task: str | None = None  # the task its training stores recorded (None: a classifier from before it was kept)


class SuccessClassifier(nn.Module):
    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.config = config
        self.encoder = MultiCameraEncoder(list(config.cameras), tuple(config.image_size), config.encoder,
                                          config.features, config.pretrained_path, config.freeze_backbone)
        self.head = mlp(self.encoder.out_dim, tuple(config.hidden), 1)

    def forward(self, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """uint8 [B, H, W, 3] per camera -> logits [B]."""
        return self.head(self.encoder(images)).squeeze(-1)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def augment(self, images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        out = {}
        for cam, img in images.items():
            img = random_shift(img, c.augment_pad) if c.augment_pad else img
            if c.color_jitter > 0:
                x = img.float()
                b = x.shape[0]
                gain = 1 + (torch.rand(b, 1, 1, 1, device=x.device) * 2 - 1) * c.color_jitter
                offset = (torch.rand(b, 1, 1, 1, device=x.device) * 2 - 1) * c.color_jitter * 64
                mean = x.mean(dim=(1, 2, 3), keepdim=True)
                img = ((x - mean) * gain + mean + offset).clamp(0, 255).to(torch.uint8)
            out[cam] = img
        return out

    @torch.no_grad()
    def probability(self, images: dict[str, np.ndarray], batch_size: int = 256) -> np.ndarray:
        """P(success) for frames given as uint8 arrays [N, H, W, 3] per camera (computed on the model's device)."""
        self.eval()
        n = len(next(iter(images.values())))
        out = np.empty(n, np.float32)
        for start in range(0, n, batch_size):
            chunk = {cam: torch.as_tensor(np.asarray(images[cam][start:start + batch_size])).to(self.device)
                     for cam in self.config.cameras}
            out[start:start + len(chunk[self.config.cameras[0]])] = torch.sigmoid(self(chunk)).cpu().numpy()
        return out


# ------------------------------------------------------------------------------------ metrics
def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve = P(score of a random positive > a random negative), ties half."""
    labels = np.asarray(labels, bool)
    pos, neg = np.asarray(scores)[labels], np.asarray(scores)[~labels]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    values = np.concatenate([pos, neg])[order]
    # average ranks over ties
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def binary_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    labels = np.asarray(labels, bool)
    predicted = np.asarray(scores, np.float64) >= threshold
    tp = int((predicted & labels).sum())
    fp = int((predicted & ~labels).sum())
    fn = int((~predicted & labels).sum())
    tn = int((~predicted & ~labels).sum())
    return {
        "threshold": float(threshold), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "fpr": fp / (fp + tn) if fp + tn else float("nan"),
        "roc_auc": roc_auc(scores, labels),
    }


def threshold_for_fpr(negative_scores: np.ndarray, target_fpr: float) -> float:
    """The lowest threshold whose false-positive rate on these negatives is <= target_fpr
    (a frame is positive when score >= threshold)."""
    if not 0 <= target_fpr < 1:
        raise InputError(f"target false-positive rate must be in [0, 1), got {target_fpr}")
    neg = np.asarray(negative_scores)
    if not np.issubdtype(neg.dtype, np.floating):
        neg = neg.astype(np.float64)
    neg = np.sort(neg)[::-1]  # high to low
    if not len(neg):
        raise ClassifierError("calibration needs negative frames")
    allowed = int(np.floor(target_fpr * len(neg)))  # negatives that may score at or above it
    # the next representable score above the (allowed+1)-th highest negative, in the scores' own
    # precision (float32 probabilities compared against a float64 threshold would round)
    return float(np.nextafter(neg[allowed], neg.dtype.type(np.inf)))


# -------------------------------------------------------------------------------- save / load
@dataclass
class Calibration:
    threshold: float
    target_fpr: float
    consecutive: int = 1
    validation: dict = field(default_factory=dict)  # metrics at the threshold on held-out episodes


def save_classifier(path: str | Path, model: SuccessClassifier, calibration: Calibration, extra: dict | None = None) -> Path:
    """``<path>/classifier.safetensors`` with the config, calibration and ``extra`` as metadata."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = {"config": json.dumps(asdict(model.config)), "calibration": json.dumps(asdict(calibration)),
            "extra": json.dumps(extra or {})}
    tmp = path / "classifier.safetensors.tmp"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp), metadata=meta)
    tmp.replace(path / "classifier.safetensors")
    return path / "classifier.safetensors"


def _classifier_file(path: str | Path) -> Path:
    path = Path(path)
    file = path / "classifier.safetensors" if path.is_dir() else path
    if not file.is_file():
        raise ClassifierError(f"no classifier at {path} (expected classifier.safetensors)")
    return file


def _read_header(file: Path) -> tuple[ClassifierConfig, Calibration]:
    """The config and calibration a classifier file records (its header: no weights are read)."""
    try:
        with safe_open(str(file), "pt") as f:
            meta = f.metadata() or {}
        config = ClassifierConfig(**{k: tuple(v) if isinstance(v, list) else v
                                     for k, v in json.loads(meta["config"]).items()})
        config.pretrained_path = None  # the weights are in the file
        return config, Calibration(**json.loads(meta["calibration"]))
    except (KeyError, ValueError, OSError, TypeError, SafetensorError) as e:
        raise ClassifierError(f"{file} is not a robot_rl success classifier: {e}") from e


def read_classifier_config(path: str | Path) -> ClassifierConfig:
    """A saved classifier's config (cameras, image size, ...) without loading its weights."""
    return _read_header(_classifier_file(path))[0]


def load_classifier(path: str | Path, device: str = "cpu") -> tuple[SuccessClassifier, Calibration]:
    """A saved classifier on ``device`` (a resolved name), whatever device it was trained on."""
    file = _classifier_file(path)
    config, calibration = _read_header(file)
    try:
        tensors = load_file(str(file), device="cpu")
    except (ValueError, OSError, SafetensorError) as e:
        raise ClassifierError(f"{file} is not a robot_rl success classifier: {e}") from e
    model = SuccessClassifier(config)
    model.load_state_dict(tensors)
    model.to(device)
    model.eval()
    return model, calibration
