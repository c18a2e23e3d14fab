"""The one error type users see: it names what is wrong and what to do about it."""


class ConfigError(Exception):
    """Bad or inconsistent input; the CLI prints it as one line and exits with status 2."""

    exit_code = 2

    def __init__(self, what: str, hint: str = "") -> None:
        self.what = what
        self.hint = hint
        super().__init__(f"{what}; {hint}" if hint else what)


def bad_var(name: str, value: object, problem: str, hint: str) -> ConfigError:
    """An error about one environment variable, quoting its value so the user can find it."""
    return ConfigError(f"{name}={value!r} {problem}", hint)


class TransientError(ConfigError):
    """A failure of the moment, not of the input (a port another process holds right now): the
    same job may run when requeued or submitted again. Exit status 75, EX_TEMPFAIL of
    sysexits.h, which says just that."""

    exit_code = 75
