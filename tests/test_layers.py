"""The layer rules (.importlinter, checked by scripts/lint_imports.py) hold on the tree, and a
planted violation breaks the contract it violates: the check can fail."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.errors import UserFacingError

REPO = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("lint_imports", REPO / "scripts" / "lint_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lint_imports = _load_script()

CORE = "The core never imports ROS, drivers, teleop, commands or benchmarks"
SIM = "The sim twin never imports the learner side, ROS, drivers, teleop, commands or benchmarks"
NODES = "Drivers and teleop never import commands or benchmarks"
CONFIG = "The configuration builds nothing: robot_rl.config imports no envs, runtime, networks, sim, data or commands"


@pytest.fixture
def tree(tmp_path):
    return lint_imports.assemble(tmp_path)


def test_assembled_tree_is_the_installed_layout(tree):
    package = tree / "robot_rl"
    for folder, installed in [("robot_rl", package), ("sim", package / "sim"),
                              ("drivers", package / "drivers"), ("teleop", package / "teleop")]:
        sources = {p.relative_to(REPO / folder) for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts}
        assert sources, folder
        assert sources <= {p.relative_to(installed) for p in installed.rglob("*.py")}, folder
    assert (package / "sim" / "env.py").read_bytes() == (REPO / "sim" / "env.py").read_bytes()


def test_contracts_kept_on_the_tree(tree):
    result = lint_imports.lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in (CORE, SIM, NODES, CONFIG):
        assert f"{name} KEPT" in result.stdout
    assert "4 kept, 0 broken" in result.stdout


def test_script_checks_the_checkout():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "lint_imports.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module, line, contract, chain", [
    ("agents/sac.py", "import robot_rl.commands.train", CORE, "robot_rl.agents.sac -> robot_rl.commands.train"),
    ("replay/buffer.py", "import rclpy", CORE, "robot_rl.replay.buffer -> rclpy"),
    ("envs.py", "from robot_rl.drivers import topics", CORE, "robot_rl.envs -> robot_rl.drivers.topics"),
    ("sim/env.py", "import robot_rl.replay.buffer", SIM, "robot_rl.sim.env -> robot_rl.replay.buffer"),
    ("sim/tasks.py", "from robot_rl.agents import sac", SIM, "robot_rl.sim.tasks -> robot_rl.agents.sac"),
    ("teleop/console.py", "import robot_rl.bench.hil", NODES, "robot_rl.teleop.console -> robot_rl.bench.hil"),
    ("drivers/camera_node.py", "import robot_rl.commands.cli", NODES,
     "robot_rl.drivers.camera_node -> robot_rl.commands.cli"),
    ("config.py", "from robot_rl.envs import obs_spec", CONFIG, "robot_rl.config -> robot_rl.envs"),
    ("config.py", "import robot_rl.agents.sac", CONFIG, "robot_rl.config -> robot_rl.agents.sac"),
])
def test_planted_violation_breaks_its_contract(tree, module, line, contract, chain):
    with (tree / "robot_rl" / module).open("a") as f:
        f.write(f"\n{line}\n")
    result = lint_imports.lint(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{contract} BROKEN" in result.stdout
    assert chain in result.stdout


def test_contracts_on_mapped_packages_never_pass_vacuously():
    # Without the assembly, lint-imports sees robot_rl/ only: it must error, not pass.
    result = lint_imports.lint(REPO)
    assert result.returncode != 0
    assert "does not exist" in result.stdout + result.stderr


def _fake_repo(root: Path, package_dir: str) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text(f"[tool.setuptools.package-dir]\n{package_dir}\n")
    for folder in ("robot_rl", "sim"):
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")
    return root


@pytest.mark.parametrize("package_dir, message", [
    ("", 'must map "robot_rl" to its folder'),
    ('"robot_rl" = "robot_rl"\n"robot_rl.sim" = "nowhere"', 'maps "robot_rl.sim" to'),
    ('"robot_rl" = "robot_rl"\n"sim" = "sim"', 'maps "sim", which is outside robot_rl'),
])
def test_bad_package_dir_is_one_clear_error(tmp_path, package_dir, message):
    repo = _fake_repo(tmp_path / "repo", package_dir)
    with pytest.raises(lint_imports.LayoutError, match=message) as err:
        lint_imports.assemble(tmp_path / "out", repo=repo)
    assert isinstance(err.value, UserFacingError)
    assert "pyproject.toml" in str(err.value) and "\n" not in str(err.value)


def test_two_folders_providing_one_module_is_an_error(tmp_path):
    repo = _fake_repo(tmp_path / "repo", '"robot_rl" = "robot_rl"\n"robot_rl.sim" = "sim"')
    (repo / "robot_rl" / "sim").mkdir()
    (repo / "robot_rl" / "sim" / "__init__.py").write_text("")
    with pytest.raises(lint_imports.LayoutError, match="both provide"):
        lint_imports.assemble(tmp_path / "out", repo=repo)


def test_missing_import_linter_is_one_clear_error(tree, monkeypatch):
    monkeypatch.setattr(lint_imports, "LINTER", "importlinter_not_installed")
    with pytest.raises(lint_imports.LinterMissing, match=r"install the dev extra") as err:
        lint_imports.lint(tree)
    assert isinstance(err.value, UserFacingError) and "\n" not in str(err.value)


def _top_level_imports(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):  # a relative import keeps its dots: never allowed
            names.add("." * node.level + (node.module or "") if node.level else node.module.split(".")[0])
    return names


@pytest.mark.parametrize("script, peers", [
    # runs in the env's own interpreter (--env-python), which has gymnasium and numpy but not robot_rl
    ("robot_rl/foreign/worker.py", {"numpy", "gymnasium"}),
    # runs in LeRobot's venv (ROBOT_RL_LEROBOT_PYTHON, bench learner), which has lerobot but not robot_rl
    ("robot_rl/bench/lerobot_sac_worker.py", {"numpy", "torch", "lerobot"}),
])
def test_a_worker_run_by_another_interpreter_imports_nothing_of_robot_rl(script, peers):
    """A worker script run by another interpreter imports the standard library and its peers only
    (not even a relative import: it is run by path, not as a module)."""
    names = _top_level_imports(REPO / script)
    allowed = set(sys.stdlib_module_names) | peers | {"__future__"}
    assert names and names <= allowed, names - allowed
