"""Every option of tfslurm-entry, defined once: as a field of the dataclass it configures.

resolve's Options and task.run's Settings declare each of their fields with option(): its
default, how its text is read, its help. From those fields this module makes everything else:
the parser's flags, the TFSLURM_* variable that sets each when its flag is absent, --help's text,
and the options table in README.md (`make docs` writes it; a unit test compares). A setting
that was renamed keeps its old variable for now, which still works and says its new name.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

PREFIX = "TFSLURM_"


class Spec(NamedTuple):
    """What option() records on a field, besides its default."""

    parse: Callable[[str], Any]
    """text (a flag's value or a variable's) -> value; raises ValueError naming what is wrong"""
    help: str
    metavar: str | None = None
    flag: str | None = None
    """default: the field's name with dashes"""
    default_text: str | None = None
    """the default in words, where the value alone says too little (or is computed)"""
    choices: tuple[str, ...] = ()
    switch: bool = False
    """a flag without a value; its variable takes 1 or 0"""
    old_vars: tuple[str, ...] = ()


def option(default: Any, parse: Callable[[str], Any], help: str, **spec: Any) -> Any:
    """A dataclass field that is also an option of the command line."""
    return dataclasses.field(default=default, metadata={"option": Spec(parse, help, **spec)})


class Option(NamedTuple):
    """One option: its field's name and default with what option() recorded."""

    name: str
    default: Any
    spec: Spec

    @property
    def flag(self) -> str:
        return self.spec.flag or "--" + self.name.replace("_", "-")

    @property
    def var(self) -> str:
        return PREFIX + self.name.upper()

    @property
    def default_text(self) -> str:
        if self.spec.default_text is not None:
            return self.spec.default_text
        return {None: "none", False: "off"}.get(self.default, str(self.default))

    def read(self, text: str) -> Any:
        value = self.spec.parse(text)
        if self.spec.choices and value not in self.spec.choices:
            raise ValueError(f"{text!r} is not one of {', '.join(self.spec.choices)}")
        return value


def options_of(*classes: type) -> list[Option]:
    """The options among the classes' fields, in declaration order."""
    return [
        Option(f.name, f.default, f.metadata["option"])
        for cls in classes
        for f in dataclasses.fields(cls)
        if "option" in f.metadata
    ]


# ---------------------------------------------------------------------------- parsers


def count(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{text!r} is not a whole number >= 0")
    return int(text)


def switch(text: str) -> bool:
    if text.lower() in ("1", "yes", "true", "on"):
        return True
    if text.lower() in ("0", "no", "false", "off"):
        return False
    raise ValueError(f"{text!r} is not 1 or 0 (yes or no)")


# ---------------------------------------------------------------------------- what is made


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse shows an ArgumentTypeError's own words; a ValueError it would hide."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    read.__name__ = parse.__name__
    return read


def help_text(opt: Option) -> str:
    """--help's line: the help, the default when it says something, the variable."""
    said = opt.default is not None or opt.spec.default_text is not None
    default = f" (default: {opt.default_text})" if said and not opt.spec.switch else ""
    var = f"{opt.var}=1" if opt.spec.switch else opt.var
    return f"{opt.spec.help}{default} [{var}]"


def add_arguments(parser: argparse.ArgumentParser, opts: Iterable[Option]) -> None:
    """One flag per option; each defaults to None, so that its variable can stand in."""
    for opt in opts:
        if opt.spec.switch:
            parser.add_argument(
                opt.flag, dest=opt.name, action="store_const", const=True, help=help_text(opt)
            )
            continue
        parser.add_argument(
            opt.flag,
            dest=opt.name,
            type=_argparse_type(opt.spec.parse),
            choices=opt.spec.choices or None,
            metavar=None if opt.spec.choices else opt.spec.metavar,
            help=help_text(opt),
        )


class BadVariable(Exception):
    """A variable's value that its option cannot read: (variable, value, why)."""


def chosen(
    flags: Mapping[str, Any],
    opts: Iterable[Option],
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The options the user chose: each flag given, else its variable (else an old name of it,
    which says the new one). Options chosen neither way are left out: their defaults apply."""
    values = {}
    for opt in opts:
        value = flags.get(opt.name)
        if value is None:
            var = next((v for v in (opt.var, *opt.spec.old_vars) if environ.get(v)), None)
            if var is None:
                continue
            if var != opt.var:
                say(f"{var} is now {opt.var}; it still works for now: rename it in the job")
            try:
                value = opt.read(environ[var])
            except ValueError as err:
                raise BadVariable(var, environ[var], str(err)) from None
        values[opt.name] = value
    return values


def markdown_table(opts: Iterable[Option]) -> str:
    """The README's options table."""
    rows = [
        "| option | variable (the flag wins) | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for opt in opts:
        var = f"`{opt.var}`"
        if opt.spec.switch:
            flag, var = opt.flag, f"{var} (`1`/`0`)"
        elif opt.spec.choices:
            flag = f"{opt.flag} {{{','.join(opt.spec.choices)}}}"
        else:
            flag = f"{opt.flag} {opt.spec.metavar}"
        rows.append(f"| `{flag}` | {var} | {opt.default_text} | {opt.spec.help} |")
    return "\n".join(rows) + "\n"
