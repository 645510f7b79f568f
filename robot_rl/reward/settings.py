"""How the success classifier trains and is calibrated: each default written once, read by the
library (``reward.training.train_classifier``) and by ``robot-rl classifier train``'s options.
A plain dataclass with no torch behind it, so the command line reads it without loading torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClassifierTraining:
    steps: int = 1500  # gradient steps
    batch_size: int = 64
    lr: float = 3e-4
    target_fpr: float = 0.01  # the false-positive rate on held-out frames the threshold is set for
    min_threshold: float = 0.5  # floor under the calibrated threshold (the classifier's own decision boundary)
    consecutive: int = 1  # positive frames in a row to call success
    val_fraction: float = 0.25  # share of episodes held out for calibration
    seed: int = 0
    encoder: str = "drq"  # drq or resnet18


CLASSIFIER_TRAINING = ClassifierTraining()
