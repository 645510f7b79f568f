"""``robot-rl data info|view|merge|split|export-video``: looking at and reshaping episode stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data.info import info  # noqa: F401 - robot_rl.data.tools.info, as before
from robot_rl.data.output import written_whole
from robot_rl.data.schema import FRAME_FIELDS
from robot_rl.data.store import EpisodeStore, StoreError


def parse_episodes(spec: str | None, n: int) -> list[int]:
    """"0,3,5-9" -> indices (all when None); errors name the valid range."""
    if spec is None:
        return list(range(n))
    chosen: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-"))
                if lo > hi:
                    raise StoreError(f"episode range {part!r} runs backwards; write it low to high ({hi}-{lo})")
                chosen.extend(range(lo, hi + 1))
            else:
                chosen.append(int(part))
        except ValueError:
            raise StoreError(f"episodes must look like '0,3,5-9', got {spec!r}") from None
    bad = [i for i in chosen if not 0 <= i < n]
    if bad:
        raise StoreError(f"episode {bad[0]} is past the end: the store has {n} episodes")
    return chosen


def format_episodes(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (what ``parse_episodes`` reads)."""
    parts: list[str] = []
    for i in sorted(indices):
        if parts and i == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts)


def new_output(out: str | Path) -> Path:
    out = Path(out)
    if out.exists():
        raise StoreError(f"{out} already exists; choose a new path for the output")
    return out


def create_like(store: EpisodeStore, out: str | Path) -> EpisodeStore:
    fields = {k: v for k, v in store.fields.items() if k not in FRAME_FIELDS}
    attrs = {k: v for k, v in store.attrs.items()
             if k not in ("format", "schema_version", "integrity", "task", "robot", "control_hz", "cameras",
                          "image_codec")}
    return EpisodeStore.create(out, fields, task=store.attrs["task"], robot=store.attrs["robot"],
                               control_hz=store.attrs["control_hz"], cameras=store.cameras,
                               images=store.attrs.get("image_codec", "lossless"), **attrs)


def merge(out: str | Path, inputs: list[str | Path]) -> dict:
    """Episodes of every input, in order, into a new store (fields and cameras must agree). The
    output appears at ``out`` only once complete."""
    if not inputs:
        raise StoreError("merge needs at least one input store")
    out = new_output(out)
    stores = [EpisodeStore.open(p) for p in inputs]
    first = stores[0]
    for other in stores[1:]:
        if other.fields != first.fields or other.cameras != first.cameras:
            raise StoreError(f"{other.path} has different fields or cameras than {first.path}; cannot merge")
        if other.attrs.get("task") != first.attrs.get("task"):
            raise StoreError(f"{other.path} holds {other.attrs.get('task')!r} episodes, {first.path} "
                             f"{first.attrs.get('task')!r}; cannot merge")
    with written_whole(out) as tmp:
        target = create_like(first, tmp)
        for store in stores:
            for episode in store:
                target.add_episode(episode)
    return {"path": str(out), "episodes": len(target)}


def split(path: str | Path, out: str | Path, episodes: str) -> dict:
    """The chosen episodes ("0,3,5-9") into a new store, which appears at ``out`` only once complete."""
    out = new_output(out)
    store = EpisodeStore.open(path)
    chosen = parse_episodes(episodes, len(store))
    with written_whole(out) as tmp:
        target = create_like(store, tmp)
        for i in chosen:
            target.add_episode(store.get_episode(i))
    return {"path": str(out), "episodes": len(target)}


def overlay(frame: np.ndarray, text: str, intervention: bool, reward: float) -> np.ndarray:
    """A status bar under the frame: episode/step text, red when a human was in control, the reward."""
    from PIL import Image, ImageDraw

    h, w = frame.shape[:2]
    bar = 14
    canvas = Image.new("RGB", (w, h + bar), (0, 0, 0))
    canvas.paste(Image.fromarray(frame), (0, 0))
    draw = ImageDraw.Draw(canvas)
    if intervention:
        draw.rectangle([0, 0, w - 1, h - 1], outline=(255, 40, 40), width=2)
    draw.text((2, h + 1), f"{text} r={reward:.2f}" + (" HUMAN" if intervention else ""),
              fill=(255, 80, 80) if intervention else (230, 230, 230))
    return np.asarray(canvas)


def export_video(path: str | Path, out: str | Path, episodes: str | None = None, fps: float | None = None) -> dict:
    """An MP4 (or GIF, by the suffix) of the chosen episodes, cameras side by side, with the
    reward and intervention flags drawn on every frame."""
    import imageio.v3 as iio

    store = EpisodeStore.open(path)
    cameras = list(store.cameras)
    if not cameras:
        raise StoreError(f"{path} has no cameras to make a video of (it was recorded without images)")
    out = Path(out)
    if out.suffix.lower() not in (".mp4", ".gif"):
        raise StoreError(f"video output must end in .mp4 or .gif, got {out.name!r}")
    chosen = parse_episodes(episodes, len(store))
    if not chosen:
        raise StoreError(f"{path} holds no complete episode")
    frames = []
    for i in chosen:
        ep = store.get_episode(i, cameras + ["reward", "is_intervention", "success"])
        for t in range(len(ep["reward"])):
            image = np.concatenate([ep[c][t] for c in cameras], axis=1)
            label = f"ep {i} t {t}" + (" success" if ep["success"][t] else "")
            frames.append(overlay(image, label, bool(ep["is_intervention"][t]), float(ep["reward"][t])))
    fps = fps or float(store.attrs.get("control_hz", 10))
    frames = np.stack(frames)
    with written_whole(out) as tmp:  # an existing video is replaced, never left half-written
        if out.suffix.lower() == ".gif":
            iio.imwrite(tmp, frames, duration=1000 / fps, loop=0)
        else:
            pad_h, pad_w = (-frames.shape[1]) % 2, (-frames.shape[2]) % 2  # yuv420p needs even sizes
            frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
            iio.imwrite(tmp, frames, fps=fps, plugin="pyav", codec="libx264")
    return {"path": str(out), "episodes": len(chosen), "frames": len(frames)}
