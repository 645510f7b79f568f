"""Write tests/fixtures/lerobot_v3_pick: a tiny LeRobotDataset v3.0 made by LeRobot's own writer,
in the layout a LeRobot HIL-SERL user records (gym_hil's PandaPickCube: an end-effector delta
action with a gripper command, two cameras, a state vector, next.reward / next.done), for the
import tests of robot_rl (tests/test_interchange.py). Also writes expected.npz beside it: the
arrays the writer was given, so a test can compare what it imports with what LeRobot wrote.

LeRobot needs Python >= 3.12 and torch < 2.12, so it lives in a venv of its own, never in
robot_rl's (made once, about 5 GB):

    ~/.pyenv/versions/3.12.1/bin/python -m venv /work/venvs/lerobot
    /work/venvs/lerobot/bin/pip install "lerobot[dataset]==0.6.1"
    /work/venvs/lerobot/bin/python scripts/make_lerobot_fixture.py tests/fixtures/lerobot_v3_pick

It runs offline (nothing from the Hub). Deterministic inputs; the mp4 bytes depend on the
encoder build, so the committed folder is the reference.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

SIZE = 32
LENGTHS = (9, 12, 7)  # frames per episode
SUCCESS = (True, False, True)  # the middle episode times out without the cube lifted
TASK = "Pick up the cube"


def frame_image(episode: int, t: int, camera: int) -> np.ndarray:
    """A smooth synthetic scene: a bright square moving across a gradient, one per camera."""
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    image = np.stack([(x * 6 + camera * 40) % 256, (y * 6 + episode * 30) % 256,
                      np.full_like(x, 90 + 40 * camera)], -1).astype(np.uint8)
    r, c = 4 + 2 * t % (SIZE - 10), 6 + 3 * episode + camera * 5
    image[r:r + 6, c:c + 6] = (250, 240, 30)
    return image


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    features = {
        "observation.state": {"dtype": "float32", "shape": (5,), "names": ["x", "y", "z", "gripper_width", "cube_z"]},
        "observation.images.front": {"dtype": "video", "shape": (SIZE, SIZE, 3), "names": ["height", "width", "channels"]},
        "observation.images.wrist": {"dtype": "video", "shape": (SIZE, SIZE, 3), "names": ["height", "width", "channels"]},
        "action": {"dtype": "float32", "shape": (4,), "names": ["delta_x", "delta_y", "delta_z", "gripper"]},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        "complementary_info.is_intervention": {"dtype": "bool", "shape": (1,), "names": None},
    }
    dataset = LeRobotDataset.create("robot_rl/fixture_pick", fps=10, features=features, root=out,
                                    robot_type="panda", use_videos=True)
    rng = np.random.default_rng(0)
    expected: dict[str, list] = {k: [] for k in ("state", "action", "reward", "done", "intervention", "front",
                                                 "wrist", "episode_index")}
    for episode, (length, success) in enumerate(zip(LENGTHS, SUCCESS)):
        for t in range(length):
            last = t == length - 1
            state = rng.normal(size=5).astype(np.float32)
            action = np.concatenate([rng.uniform(-1, 1, 3), [float(rng.integers(0, 3))]]).astype(np.float32)
            frame = {"observation.state": state, "observation.images.front": frame_image(episode, t, 0),
                     "observation.images.wrist": frame_image(episode, t, 1), "action": action,
                     "next.reward": np.array([1.0 if last and success else 0.0], np.float32),
                     "next.done": np.array([last], bool),
                     "complementary_info.is_intervention": np.array([episode == 0 and 2 <= t < 5], bool),
                     "task": TASK}
            dataset.add_frame(frame)
            for key, value in (("state", state), ("action", action), ("reward", frame["next.reward"][0]),
                               ("done", last), ("intervention", frame["complementary_info.is_intervention"][0]),
                               ("front", frame["observation.images.front"]),
                               ("wrist", frame["observation.images.wrist"]), ("episode_index", episode)):
                expected[key].append(value)
        dataset.save_episode()
    dataset.finalize()
    np.savez_compressed(out / "expected.npz", **{k: np.asarray(v) for k, v in expected.items()})
    print(f"wrote {out}: {sum(LENGTHS)} frames in {len(LENGTHS)} episodes")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
