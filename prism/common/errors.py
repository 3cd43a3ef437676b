"""Exceptions for problems the user can act on; the CLI prints the message
on one line instead of a traceback, and exits 2 for a usage error (bad
arguments or input, nothing done, as argparse does) and 1 for a failure
while working (a build, a boot, a download)."""


class PrismError(Exception):
    pass


class UsageError(PrismError):
    pass
