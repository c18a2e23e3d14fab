"""The README's and docs' generated parts, made from the code: `make docs` writes them, and
tests/unit/test_docs.py fails when one has drifted from what the code prints.

Three kinds of part, each after a marker line in the Markdown:

    <!-- make docs: options -->          the options table (tfslurm_entry/options.py)
    | option | ... |
    <!-- make docs: end -->

    <!-- make docs: run VAR=VALUE ... -->   an example: the fenced block that follows keeps
    ```console                              its `$ ...` command; what follows it is what
    $ srun ... tfslurm-entry --explain      `tfslurm-entry ARGS` prints with those variables
    ...                                     (ARGS: the words after tfslurm-entry or the SIF)
    ```

    <!-- make docs: file PATH -->           a file of the repository, whole: the fenced block
    ```bash                                 that follows is its text (a batch script the
    ...                                     e2e tests run as the page shows it)
    ```
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys

from bench.repo import ROOT
from tfslurm_entry import cli, options

# The Markdown that may hold generated parts (and that the docs test reads for make targets).
PAGES = sorted([ROOT / "README.md", *ROOT.glob("CONTRIBUTING.md"), *(ROOT / "docs").glob("*.md")])

_OPTIONS = re.compile(r"(<!-- make docs: options -->\n)(.*?)(<!-- make docs: end -->\n)", re.S)
_RUN = re.compile(r"(<!-- make docs: run (.*?) -->\n```\w*\n\$ (.*?)\n)(.*?)(```\n)", re.S)
_FILE = re.compile(r"(<!-- make docs: file (\S+) -->\n```\w*\n)(.*?)(```\n)", re.S)


def options_table() -> str:
    return options.markdown_table(cli.OPTIONS)


def entry_args(words: list[str]) -> list[str] | None:
    """The words a command line gives tfslurm-entry: those after `tfslurm-entry` or the SIF
    (whose runscript it is); None when the line runs neither."""
    entry = next(
        (i for i, w in enumerate(words) if w == "tfslurm-entry" or w.endswith(".sif")), None
    )
    return None if entry is None else words[entry + 1 :]


def run_example(variables: str, command: str) -> str:
    """What `tfslurm-entry ARGS` prints (stdout, then stderr) with only these variables set."""
    argv = entry_args(shlex.split(command))
    if argv is None:
        raise ValueError(f"an example's command must run tfslurm-entry or a SIF: {command!r}")
    environ = dict(pair.split("=", 1) for pair in shlex.split(variables))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cli.main(argv, environ)
    return out.getvalue() + err.getvalue()


def generated(text: str) -> str:
    """The page with every generated part made again from the code."""
    text = _OPTIONS.sub(lambda m: m[1] + options_table() + m[3], text)
    text = _FILE.sub(lambda m: m[1] + (ROOT / m[2]).read_text() + m[4], text)
    return _RUN.sub(lambda m: m[1] + run_example(m[2], m[3]) + m[5], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the pages that drifted")
    args = parser.parse_args(argv)
    drifted = []
    for page in PAGES:
        text = page.read_text()
        new = generated(text)
        if new != text:
            drifted.append(page.relative_to(ROOT))
            if args.write:
                page.write_text(new)
    verb = "rewrote" if args.write else "drifted (make docs rewrites them)"
    print(f"docs: {verb}: {', '.join(map(str, drifted))}" if drifted else "docs: up to date")
    return 1 if drifted and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
