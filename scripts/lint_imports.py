"""Check the import contracts in .importlinter (the layer rules in docs/ARCHITECTURE.md).

    .venv/bin/python scripts/lint_imports.py      # exit status 0: every contract is kept

robot_rl.sim, robot_rl.drivers and robot_rl.teleop live in the top-level folders sim/,
drivers/ and teleop/ (``[tool.setuptools.package-dir]`` in pyproject.toml), but
lint-imports (grimp) only walks the folder of the root package, robot_rl/. So this script
copies the .py files into the layout that gets installed (robot_rl/sim/, robot_rl/drivers/,
...) in a temporary folder and runs ``lint-imports --no-cache`` there.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from robot_rl.errors import UserFacingError

REPO = Path(__file__).resolve().parent.parent
ROOT_PACKAGE = "robot_rl"
LINTER = "importlinter"  # the module of PyPI's import-linter (the dev extra)


class LayoutError(UserFacingError):
    """pyproject.toml does not describe a layout this script can assemble."""


class LinterMissing(UserFacingError):
    """import-linter is not installed in this environment."""


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """The package-dir map of pyproject.toml: import name -> source folder."""
    pyproject = repo / "pyproject.toml"
    with pyproject.open("rb") as f:
        mapping = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    if mapping.get(ROOT_PACKAGE) is None:
        raise LayoutError(f'{pyproject}: [tool.setuptools.package-dir] must map "{ROOT_PACKAGE}" to its folder')
    dirs = {name: repo / folder for name, folder in mapping.items()}
    for name, folder in dirs.items():
        if name != ROOT_PACKAGE and not name.startswith(ROOT_PACKAGE + "."):
            raise LayoutError(f'{pyproject}: package-dir maps "{name}", which is outside {ROOT_PACKAGE}')
        if not (folder / "__init__.py").is_file():
            raise LayoutError(f'{pyproject}: package-dir maps "{name}" to {folder}, which has no __init__.py')
    return dirs


def _copy_sources(src: Path, dest: Path, package: str) -> None:
    """Copy ``src``'s .py files to where package ``package`` is installed under ``dest``."""
    for path in src.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        target = dest.joinpath(*package.split("."), path.relative_to(src))
        if target.exists():
            raise LayoutError(f"{path} and another mapped folder both provide {target.relative_to(dest)}: "
                              "fix [tool.setuptools.package-dir] in pyproject.toml")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def assemble(dest: Path, repo: Path = REPO) -> Path:
    """Copy the package's .py files into ``dest`` as they are installed; return ``dest``.

    ``dest/robot_rl`` then holds robot_rl/'s modules plus sim/ as robot_rl/sim/, drivers/ as
    robot_rl/drivers/ and teleop/ as robot_rl/teleop/."""
    # the root package first, then the mapped subpackages (parents before children)
    for name, folder in sorted(package_dirs(repo).items(), key=lambda item: item[0].count(".")):
        _copy_sources(folder, dest, name)
    return dest


def lint(tree: Path, config: Path = REPO / ".importlinter") -> subprocess.CompletedProcess:
    """Run lint-imports on an assembled ``tree``; its output is in ``stdout``.

    It runs with ``tree`` as the working directory and first on the path, so that
    ``robot_rl`` is the assembled copy, not the checkout or the editable install."""
    if importlib.util.find_spec(LINTER) is None:
        raise LinterMissing(f"{LINTER} is not importable by {sys.executable}: install the dev extra "
                            "(pip install -e '.[dev]', or bash scripts/setup.sh)")
    command = [
        sys.executable, "-c", f"from {LINTER}.cli import lint_imports_command; lint_imports_command()",
        "--config", str(Path(config).resolve()), "--no-cache", "--no-logo",
    ]
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="200", NO_COLOR="1")
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="robot_rl-layers-") as tmp:
        try:
            result = lint(assemble(Path(tmp)))
        except UserFacingError as e:
            print(f"lint_imports: error: {e}", file=sys.stderr)
            return 2
    print(result.stdout, end="")
    print(result.stderr, end="", file=sys.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
