"""How to install an optional part of aisql, said the same way everywhere.

The distribution is `aisql-engine` (`aisql` on PyPI is somebody else's project: a hint naming it
would install the wrong software); the import name and the command are `aisql`.
"""

DISTRIBUTION = "aisql-engine"


def install_hint(extra: str) -> str:
    """The command that installs `extra`, from PyPI and from a clone of the repository."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (from a clone: pip install -e '.[{extra}]')"
