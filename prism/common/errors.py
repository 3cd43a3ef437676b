"""Exceptions for problems the user can act on; the CLI prints the message
on one line instead of a traceback, and exits 2 for a usage error (bad
arguments or input, nothing done, as argparse does) and 1 for a failure
while working (a build, a boot, a download)."""


class PrismError(Exception):
    pass


class UsageError(PrismError):
    pass


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (see prism.cli.stop_on_signals): raised in
    the main thread so that every finally block runs, as for Ctrl-C, and
    the guest and the disk server go with prism. A BaseException, so that
    no handler of ordinary errors takes it for one."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
