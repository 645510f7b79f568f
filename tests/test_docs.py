"""The documentation: README.md (the first ten minutes) and the site in docs/ (mkdocs.yml), which
stand alone in a clone (no links out of the repository), resolve every link (the site is built
with --strict here, so CI fails on a broken link or anchor), and document every environment
variable the scripts, the package and the tests read (docs/setup.md)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("robot_rl", "drivers", "teleop", "sim", "launch", "tests")
README_MAX_LINES = 250
ENV_TABLE_PAGE = ROOT / "docs" / "setup.md"
ENV_TABLE_HEADING = "## Environment variables"

# os.environ.get("X") / os.environ["X"] / os.environ.setdefault("X") / os.getenv("X") / NAME_ENV = "X"
PYTHON_READS = re.compile(r"""environ(?:\.get|\.setdefault|\.pop)?\s*[\(\[]\s*["']([A-Z][A-Z0-9_]*)["']"""
                          r"""|getenv\(\s*["']([A-Z][A-Z0-9_]*)["']"""
                          r"""|_ENV\s*=\s*["']([A-Z][A-Z0-9_]*)["']""")
# ${X:-default} / ${X-default}: a variable the caller may set; or a `for pair in X:--option ...` list
# whose names are read by indirection (${!variable}) and passed on as the option
SHELL_READS = re.compile(r"\$\{([A-Z][A-Z0-9_]*):?-|(?:(?<=\s)|^)([A-Z][A-Z0-9_]*):--[a-z]", re.M)
# [text](target) and ![alt](target); the target up to a space or the closing parenthesis
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def environment_variables_read() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for script in sorted((ROOT / "scripts").glob("*.sh")) + [ROOT / ".ci" / "run"]:
        if script.is_file():
            for groups in SHELL_READS.findall(script.read_text()):
                name = next(g for g in groups if g)
                found.setdefault(name, set()).add(str(script.relative_to(ROOT)))
    for folder in CODE_DIRS:
        for source in sorted((ROOT / folder).rglob("*.py")):
            if source == Path(__file__).resolve():  # its own patterns' examples
                continue
            for groups in PYTHON_READS.findall(source.read_text()):
                name = next(g for g in groups if g)
                found.setdefault(name, set()).add(str(source.relative_to(ROOT)))
    return found


def documented_variables() -> set[str]:
    text = ENV_TABLE_PAGE.read_text()
    assert ENV_TABLE_HEADING in text, f"{ENV_TABLE_PAGE.relative_to(ROOT)} has no '{ENV_TABLE_HEADING}' section"
    section = text.split(ENV_TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])}


def outside_code(text: str) -> str:
    """The Markdown without its fenced code blocks (a `# comment` in a bash block is no heading)."""
    kept, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            kept.append(line)
    return "\n".join(kept)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs (Python-Markdown's toc) make it, for the headings
    these pages have: the text without Markdown markup, lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(2)) for m in re.finditer(r"^(#{1,6})\s+(.+?)\s*#*\s*$", outside_code(page.read_text()), re.M)}


def relative_links(page: Path) -> list[str]:
    return [target for target in MARKDOWN_LINK.findall(outside_code(page.read_text()))
            if "://" not in target and not target.startswith("mailto:")]


def test_the_scan_finds_the_variables_we_know_of():
    """The scan is not vacuous: it finds variables from each kind of source."""
    found = environment_variables_read()
    for name in ("MUJOCO_GL", "STEPS", "CLASSIFIER_STEPS", "PYTHON", "ROBOT_RL_CONSOLE_TOKEN", "CI",
                 "ROBOT_RL_KEEP_LAUNCH_FILES", "ROBOT_RL_GYM_HIL_PYTHON", "ROBOT_RL_SYSTEM_ROS"):
        assert name in found, name


def test_every_environment_variable_read_is_in_the_setup_page_table():
    documented = documented_variables()
    missing = {name: sorted(where) for name, where in environment_variables_read().items() if name not in documented}
    assert not missing, f"add these to the 'Environment variables' table of docs/setup.md: {missing}"


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


def test_the_readme_is_read_in_ten_minutes():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): move the details "
                                       "to a page under docs/ and link to it")


def test_every_link_in_the_readme_resolves_on_github():
    """README.md is outside the site, so the strict build does not check it: each relative link
    names a file of the repository and, with #anchor, a heading of that file (or of the README)."""
    readme = ROOT / "README.md"
    links = relative_links(readme)
    assert any(target.startswith("docs/") and "#" in target for target in links), "the scan found no links"
    broken = []
    for target in links:
        path, _, anchor = target.partition("#")
        page = (readme.parent / path).resolve() if path else readme
        if not page.is_relative_to(ROOT) or not page.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            broken.append(f"{target}: {page.relative_to(ROOT)} has no heading #{anchor}")
    assert not broken, "README.md links that do not resolve:\n" + "\n".join(broken)


def test_the_slugs_are_githubs():
    assert slug("What the report's figures mean") == "what-the-reports-figures-mean"
    assert slug("LeRobotDataset v3.0, in and out") == "lerobotdataset-v30-in-and-out"
    assert slug("rosbag2 (MCAP), in and out") == "rosbag2-mcap-in-and-out"
    assert slug("Stacks and `robot-rl launch`") == "stacks-and-robot-rl-launch"
    assert "the-main-job" in anchors(ROOT / "docs" / "training.md")


def test_every_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert pages and not [p for p in pages if f": {p}" not in nav], "add these pages to mkdocs.yml's nav"


def test_the_site_builds_with_strict_link_checks(tmp_path):
    """mkdocs build --strict: a link to a page, file or heading that does not exist (the
    validation: settings of mkdocs.yml make each a warning, and --strict an error) fails."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs and mkdocs-material are missing: scripts/setup.sh installs them (the docs extra)")
        pytest.skip("mkdocs / mkdocs-material not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    assert (site / "index.html").is_file() and (site / "training" / "index.html").is_file()
