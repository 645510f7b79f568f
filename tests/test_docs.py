"""The README is the user's whole manual: it stands alone in a clone (no links out of the
repository) and documents every environment variable the scripts, the package and the tests
read."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("robot_rl", "drivers", "teleop", "sim", "launch", "tests")

# os.environ.get("X") / os.environ["X"] / os.environ.setdefault("X") / os.getenv("X") / NAME_ENV = "X"
PYTHON_READS = re.compile(r"""environ(?:\.get|\.setdefault|\.pop)?\s*[\(\[]\s*["']([A-Z][A-Z0-9_]*)["']"""
                          r"""|getenv\(\s*["']([A-Z][A-Z0-9_]*)["']"""
                          r"""|_ENV\s*=\s*["']([A-Z][A-Z0-9_]*)["']""")
# ${X:-default} / ${X-default}: a variable the caller may set
SHELL_READS = re.compile(r"\$\{([A-Z][A-Z0-9_]*):?-")


def environment_variables_read() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for script in sorted((ROOT / "scripts").glob("*.sh")) + [ROOT / ".ci" / "run"]:
        if script.is_file():
            for name in SHELL_READS.findall(script.read_text()):
                found.setdefault(name, set()).add(str(script.relative_to(ROOT)))
    for folder in CODE_DIRS:
        for source in sorted((ROOT / folder).rglob("*.py")):
            if source == Path(__file__).resolve():  # its own patterns' examples
                continue
            for groups in PYTHON_READS.findall(source.read_text()):
                name = next(g for g in groups if g)
                found.setdefault(name, set()).add(str(source.relative_to(ROOT)))
    return found


def readme_table_variables() -> set[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Environment variables", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])}


def test_the_scan_finds_the_variables_we_know_of():
    """The scan is not vacuous: it finds variables from each kind of source."""
    found = environment_variables_read()
    for name in ("MUJOCO_GL", "STEPS", "CLASSIFIER_STEPS", "PYTHON", "ROBOT_RL_CONSOLE_TOKEN", "CI",
                 "ROBOT_RL_KEEP_LAUNCH_FILES", "ROBOT_RL_GYM_HIL_PYTHON", "ROBOT_RL_SYSTEM_ROS"):
        assert name in found, name


def test_every_environment_variable_read_is_in_the_readme_table():
    documented = readme_table_variables()
    missing = {name: sorted(where) for name, where in environment_variables_read().items() if name not in documented}
    assert not missing, f"add these to the README's 'Environment variables' table: {missing}"


def test_the_readme_and_docs_stay_inside_the_repository():
    """A clone has no ../shared (or any folder beside it): links point inside the repository."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text()
        assert "../shared" not in text, doc
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (doc.parent / target).resolve().is_relative_to(ROOT), (doc, target)
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is not in the repository"
