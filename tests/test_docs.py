"""The docs (README.md, docs/*.md) match the repository a user has: every file they name is shipped,
nothing points outside the repository, and every argument of every ``hourglass`` subcommand is in the
command reference (docs/cli.md).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_reference import documented_sections, option_strings, section, subcommands
from tests.support.paths import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
#: Extensions of the file names checked when a doc names one without a directory.
FILE_EXTENSIONS = (".csv", ".yaml", ".yml", ".py", ".md", ".json", ".sh", ".toml", ".tpl", ".png")
#: Names that are not files of this repository, by doc: placeholders in a usage line, files a command
#: writes, files in an error message's example, and paths in KAI's or the Kubernetes client's repository.
NOT_OURS = {
    ("README.md", "pod.yaml"),  # `check -f pod.yaml`: the user's file
    ("eta.md", "pod.yaml"),
    ("fairshare.md", "fs.yaml"),  # an error message naming the user's file
    ("replay.md", "engine.yaml"),  # the user's --engine-config
    ("report.md", "report.json"),  # written by the command shown
    ("simulate.md", "run.png"),
    ("simulate.md", "summary.json"),
    ("simulate.md", "s.yaml"),  # error messages naming the user's scenario
    ("simulate.md", "tenants.yaml"),
    ("kube-apiserver.md", "rest.py"),  # the kubernetes client's module
    ("kai-compatibility.md", "docs/queues"),  # KAI's repository
    ("kai-compatibility.md", "docs/numa"),
    ("kai-compatibility.md", "docs/metrics/METRICS.md"),
    ("kai-compatibility.md", "examples/topology-aliases"),
    ("kai-compatibility.md", "gpu-imex-pod.yaml"),
    ("metrics.md", "docs/metrics/grafana-dashboard.json"),  # KAI's repository
}
#: A run of sg-01 .. sg-15: the scenarios' files start with these names.
PREFIXES = {("topology.md", "scheduler/conformance/scenarios/hourglass/real-nodes/subgroups/sg-01")}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def _named_paths(text: str) -> list[str]:
    """Tokens of the doc's inline code, links and code blocks that look like file paths."""
    chunks = re.finditer(r"`([^`\n]+)`|\]\(([^)]+)\)|^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    tokens = []
    for m in chunks:
        for tok in re.split(r"[\s,;:()=\[\]\"'|]+", m.group(1) or m.group(2) or m.group(3)):
            tok = tok.strip().rstrip(".").split("#")[0]
            # URLs, flags and templated paths (<release>, *, {a,b}, …) are not checked.
            if tok and "://" not in tok and not tok.startswith("-") and not set(tok) & set("*<>{}…$%"):
                tokens.append(tok)
    return tokens


def missing_paths(doc: Path, text: str, tracked: list[str]) -> list[str]:
    """The paths ``text`` names that the repository does not have (``doc`` names the file for NOT_OURS)."""
    names = {Path(t).name for t in tracked}
    tops = {t.split("/")[0] for t in tracked}
    missing = []
    for tok in _named_paths(text):
        key = (doc.name, tok)
        first = tok.split("/")[0]
        if "/" in tok.rstrip("/") and (first in tops or first == ".."):
            path = (doc.parent / tok) if first == ".." else REPO_ROOT / tok
            if key in PREFIXES:
                found = any(p.name.startswith(path.name) for p in path.parent.iterdir())
            else:
                found = path.exists() and (first != ".." or REPO_ROOT in path.resolve().parents)
            if not found and key not in NOT_OURS:
                missing.append(tok)
        elif (
            # A bare name refers to a file in the directory the text is about: it must exist somewhere.
            "/" not in tok
            and tok.endswith(FILE_EXTENSIONS)
            and not tok.startswith(".")
            and tok not in names
            and key not in NOT_OURS
        ):
            missing.append(tok)
    return sorted(set(missing))


#: Docs about another repository (the FGD simulator's files are named as that repository has them).
OTHER_REPOSITORIES = {"fgd-protocol.md"}


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name not in OTHER_REPOSITORIES], ids=lambda d: d.name)
def test_every_file_a_doc_names_is_shipped(doc: Path) -> None:
    assert missing_paths(doc, doc.read_text(), _tracked()) == []


def test_the_check_finds_a_file_that_is_not_shipped() -> None:
    text = (
        "Run `hourglass simulate --trace-nodes small-nodes.csv` or `examples/nope.yaml`, see `docs/eta.md`."
    )
    assert missing_paths(REPO_ROOT / "docs" / "x.md", text, _tracked()) == [
        "examples/nope.yaml",
        "small-nodes.csv",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_no_doc_points_outside_the_repository(doc: Path) -> None:
    # Users have the repository, not the workspace it was written in.
    text = doc.read_text()
    outside = re.findall(r"(?:\.\./|/work/)[\w./-]+|(?<![\w/.-])shared/[\w./-]+", text)
    assert outside == []


def test_every_subcommand_argument_is_in_the_cli_reference() -> None:
    sections = documented_sections((REPO_ROOT / "docs" / "cli.md").read_text())
    assert sorted(sections) == subcommands()
    for name in subcommands():
        undocumented = [
            o
            for o in option_strings(name)
            if not re.search(rf"^\| `[^`]*(?<![\w-]){re.escape(o)}(?![\w-])", sections[name], re.M)
        ]
        assert undocumented == [], (
            f"docs/cli.md: `hourglass {name}` lacks {undocumented}; the parser describes it as:\n{section(name)}"
        )


def test_readme_setup_says_to_use_a_virtual_environment() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    setup = readme[readme.index("## Setup") : readme.index("```bash", readme.index("## Setup"))]
    assert "python3 -m venv" in setup


def test_readme_helm_install_says_how_the_image_is_built_and_uses_it() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    start = readme.index("```bash", readme.index("## Deploying it"))
    block = readme[start : readme.index("```", start + 3)]
    assert (REPO_ROOT / "compose" / "Dockerfile").is_file()
    built = re.search(r"docker build -f compose/Dockerfile -t (\S+):\S+ \.", block)
    assert built, block
    assert f"--set image.repository={built.group(1)}" in block
