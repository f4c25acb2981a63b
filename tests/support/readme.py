"""Reading the project's Markdown as the tests that keep it true need it: links, the anchors of
headings (as GitHub makes them), and the commands of the README's code blocks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = sorted([README, ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")])
LOCAL_URL = "http://127.0.0.1:8080"
"""The frontend's URL as the README writes it (`scripts/up`'s default port)."""

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```+|~~~+)\s*(\S*)")


@dataclass(frozen=True)
class CodeBlock:
    language: str
    lines: list[str]
    heading: str
    """The heading of the section it is in."""

    def commands(self) -> list[str]:
        """Its shell commands: comments dropped, continued lines joined."""
        commands: list[str] = []
        pending = ""
        for line in self.lines:
            text = re.sub(r"\s+#\s.*$", "", line).rstrip()
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            if text.endswith("\\"):
                pending += text[:-1]
                continue
            commands.append((pending + text).strip())
            pending = ""
        return commands


def text_outside_code(path: Path) -> list[str]:
    """The document's lines that are not in a fenced code block."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def code_blocks(path: Path) -> list[CodeBlock]:
    blocks: list[CodeBlock] = []
    heading, language = "", None
    body: list[str] = []
    for line in path.read_text().splitlines():
        fence = _FENCE.match(line)
        if language is None:
            if fence:
                language, body = fence.group(2), []
            elif line.startswith("#"):
                heading = line.lstrip("#").strip()
        elif fence:
            blocks.append(CodeBlock(language, body, heading))
            language = None
        else:
            body.append(line)
    return blocks


def links(path: Path) -> list[str]:
    """Every link and image target outside code, in order."""
    found = []
    for line in text_outside_code(path):
        # Inline code may show brackets that are no link.
        line = re.sub(r"`[^`]*`", "", line)
        for match in _LINK.finditer(line):
            found.append(match.group(1) or match.group(2))
    return found


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of every heading of a Markdown document (a repeated one gets -1, -2, ...)."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in text_outside_code(path):
        if line.startswith("#"):
            slug = anchor(line.lstrip("#"))
            count = counts.get(slug, 0)
            found.add(f"{slug}-{count}" if count else slug)
            counts[slug] = count + 1
    return found


def make_home(directory: Path) -> Path:
    """`directory` made a place to take the README's tour from: `examples` there, and the
    region's directory to be `.tether` in it (returned)."""
    (directory / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return directory / ".tether"


def tour_blocks() -> list[CodeBlock]:
    """The README tour's bash blocks, in order: the CLI's, curl's, and curl's over TLS."""
    return [
        block
        for block in code_blocks(README)
        if block.heading == "A five-minute tour" and block.language == "bash"
    ]


def run_shell(commands: list[str], cwd: Path, url: str, timeout_s: float = 300) -> str:
    """Runs README commands as a user would, one after the other in one shell (an assignment
    holds for the commands after it), in `cwd` (which holds the region's `.tether` and
    `examples`), against the frontend at `url` where the README names the local one; curl
    fails on an HTTP error status. Returns the output; fails with it on the first command that
    fails."""
    script = "\n".join(["set -euo pipefail", *commands])
    script = script.replace(LOCAL_URL, url).replace(LOCAL_URL.replace("http:", "https:"), url)
    script = script.replace("curl -s ", "curl -sS --fail-with-body ")
    environment = {
        **{name: value for name, value in os.environ.items() if not name.startswith("TETHER_")},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-xc", script],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout
