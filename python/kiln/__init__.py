"""Kiln from Python: tensors, fused queries, nn and raw kernels on GPUs and CPUs.

A thin layer over Kiln's C++ API (docs/python.md). Every kiln::error is raised as the Python
exception of the same name (kiln.shape_error, kiln.compile_error, ...).
"""

import functools as _functools
import sys as _sys

from . import _kiln
from ._kiln import *  # noqa: F401,F403
from ._kiln import __version__, nn, optim  # noqa: F401
from .query import _1, _2, _3, _4, _i, agg, last_query_stats, query, zip  # noqa: F401

# The elementwise functions also take placeholder expressions: kiln.sqrt(kiln._1) * 2.
from .query import (abs, ceil, cos, exp, floor, log, relu, rsqrt, sigmoid, sin,  # noqa: F401,A004
                    sqrt, square, tan, tanh)

# The extension's submodules, importable by name too (import kiln.nn as nn).
for _name, _mod in (("nn", _kiln.nn), ("optim", _kiln.optim), ("nn.models", _kiln.nn.models)):
    _sys.modules[f"{__name__}.{_name}"] = _mod

__all__ = [name for name in dir(_kiln) if not name.startswith("_")] + [
    "_1", "_2", "_3", "_4", "_i", "last_query_stats", "query", "zip", "__version__"]


def _module_setattr(self, name, value):
    """A module assigned to an attribute of a Python subclass of kiln.nn.module is registered
    as its child under that name (as torch.nn.Module does)."""
    if isinstance(value, _kiln.nn.module) and not name.startswith("_") and \
            self._is_python_subclass():
        self.register_module(name, value)
    object.__setattr__(self, name, value)


_kiln.nn.module.__setattr__ = _module_setattr


def _autocast_call(self, func):
    """`@kiln.autocast(...)` on a function: each call runs inside the block (torch.autocast's
    decorator form)."""
    @_functools.wraps(func)
    def wrapper(*args, **kwargs):
        with self:
            return func(*args, **kwargs)
    return wrapper


_kiln.autocast.__call__ = _autocast_call
