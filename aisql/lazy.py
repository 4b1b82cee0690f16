"""Names a package exports but loads on first use (PEP 562 module `__getattr__`), so importing the
package stays cheap: `aisql --version`, a fully cached rerun and the SQL front end import only
what they touch."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` loading `name` from `exports[name]` (a module path) on first use
    and keeping it in the package's `namespace`, so the next use is a plain attribute."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
