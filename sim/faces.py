"""A package's face: its public names, imported from their modules when first asked for (PEP 562).

A face keeps ``import sim`` (and ``import sim.training``) light for the command line: naming a
package imports none of its modules until one of its public names is used::

    __getattr__, __dir__ = lazy_face(__name__, {"simulate_step": "sim.training.step"}, globals())
"""
from __future__ import annotations

import importlib


def lazy_face(package: str, public: dict[str, str], namespace: dict):
    """The ``__getattr__`` and ``__dir__`` of a package whose name ``n`` in ``public`` lives in module
    ``public[n]``; a name is imported once, then kept in the package's ``namespace``."""
    def __getattr__(name: str):
        if name in public:
            value = getattr(importlib.import_module(public[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
