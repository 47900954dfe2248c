import ast
import inspect
import os
import pathlib
import subprocess
import sys

import pytest

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _stub_names(body):
    names = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            names.update((t.id, node) for t in node.targets)
        elif isinstance(node, ast.ImportFrom):
            names.update((a.asname or a.name, node) for a in node.names)
    return names


def _stub(path):
    return _stub_names(ast.parse((ROOT / "python/kiln" / path).read_text()).body)


# Each stub file and the module it describes (python/CMakeLists.txt installs them).
STUBS = [("__init__.pyi", kiln._kiln), ("nn/__init__.pyi", kiln.nn),
         ("nn/models.pyi", kiln.nn.models), ("optim.pyi", kiln.optim)]


@pytest.mark.parametrize("path,mod", STUBS, ids=[p for p, _ in STUBS])
def test_the_stub_names_every_binding(path, mod):
    public = {n for n in dir(mod) if not n.startswith("_")}
    assert public - set(_stub(path)) == set(), f"bound but missing from python/kiln/{path}"


def _split_top_level(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()] if cur.strip() else parts


def _bound_signature(fn):
    """(name, kind, default) per parameter, from pybind11's docstring: kind "pos" (pybind's
    unnamed argN: positional only), "kw" (after *), "*" or "**"; default a Python value, or
    ... where pybind11 shows a C++ value."""
    if inspect.isfunction(fn):  # written in Python (kiln/__init__.py)
        return _python_signature(fn)
    doc = (fn.__doc__ or "").lstrip().splitlines()
    if not doc or ") ->" not in doc[0]:
        return None  # no signature line (an overloaded function)
    inner = doc[0][doc[0].index("(") + 1:doc[0].rindex(") ->")]
    out, kw = [], False
    for p in _split_top_level(inner):
        if p == "*":
            kw = True
            continue
        if p.startswith("**"):
            out.append((p[2:].split(":")[0], "**", None))
            continue
        if p.startswith("*"):
            out.append((p[1:].split(":")[0], "*", None))
            kw = True
            continue
        name, _, default = p.partition(" = ")
        name = name.split(":")[0].strip()
        if name == "self":
            continue
        if default:
            try:
                default = ast.literal_eval(default)
            except (ValueError, SyntaxError):
                default = ...
        else:
            default = None if not default else default
        has_default = " = " in p
        kind = "kw" if kw else ("pos" if name.startswith("arg") and name[3:].isdigit() else "any")
        out.append((name, kind, default if has_default else "<required>"))
    return out


def _python_signature(fn):
    P = inspect.Parameter
    kinds = {P.POSITIONAL_ONLY: "pos", P.POSITIONAL_OR_KEYWORD: "any", P.KEYWORD_ONLY: "kw",
             P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        default = "<required>" if p.default is p.empty else p.default
        out.append((p.name, kinds[p.kind], None if kinds[p.kind] in ("*", "**") else default))
    return out


def _stub_signature(node):
    a = node.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + a.defaults
    for i, (arg, d) in enumerate(zip(positional, defaults)):
        if arg.arg == "self":
            continue
        kind = "pos" if i < len(a.posonlyargs) else "any"
        out.append((arg.arg, kind, _stub_default(d)))
    if a.vararg:
        out.append((a.vararg.arg, "*", None))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, "kw", _stub_default(d)))
    if a.kwarg:
        out.append((a.kwarg.arg, "**", None))
    return out


def _stub_default(d):
    if d is None:
        return "<required>"
    try:
        return ast.literal_eval(d)
    except ValueError:
        return ...  # a name (kiln.bfloat16) or ...: not compared


def _same_signature(bound, stub):
    if len(bound) != len(stub):
        return False
    for (bn, bk, bd), (sn, sk, sd) in zip(bound, stub):
        if bk != sk or (bk in ("any", "kw") and bn != sn):  # callers use these names
            return False
        if (bd == "<required>") != (sd == "<required>"):
            return False
        if bd not in ("<required>", ...) and sd is not ... and bd != sd:
            return False
    return True


_DUNDERS = {"__init__", "__call__", "__len__", "__getitem__", "__enter__", "__exit__",
            "__bool__"}


def _check_class(qualname, cls, node, problems):
    stubbed = _stub_names(node.body)
    bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
    runtime_bases = [b.__name__ for b in cls.__bases__ if b.__name__ != "pybind11_object"]
    if bases != runtime_bases:
        problems.append(f"{qualname}: bases {bases} in the stub, {runtime_bases} bound")
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in _DUNDERS:
            continue
        if name == "__init__" and (member.__doc__ or "").startswith("Initialize self"):
            continue  # pybind11's stand-in of a class made only by functions (no constructor)
        if name not in stubbed:
            problems.append(f"{qualname}.{name}: bound but not in the stub")
            continue
        _check_member(f"{qualname}.{name}", member, stubbed[name], problems)
    for name in stubbed:
        if not hasattr(cls, name):
            problems.append(f"{qualname}.{name}: in the stub but not bound")


def _check_member(qualname, obj, node, problems):
    if isinstance(obj, type):
        if not isinstance(node, ast.ClassDef):
            problems.append(f"{qualname}: a class, not one in the stub")
        else:
            _check_class(qualname, obj, node, problems)
        return
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return  # an attribute or a @property in the stub: both read as one
    if not callable(obj):
        return
    if not isinstance(node, ast.FunctionDef):
        problems.append(f"{qualname}: a function, not one in the stub")
        return
    bound = _bound_signature(obj)
    if bound is not None and not _same_signature(bound, _stub_signature(node)):
        problems.append(f"{qualname}: bound as {bound}, stubbed as {_stub_signature(node)}")


# The stubs of nn and optim are checked in full (members, parameter names, kinds and
# defaults); of __init__.pyi, the mixed-precision names.
FULL = [("nn/__init__.pyi", kiln.nn, None), ("nn/models.pyi", kiln.nn.models, None),
        ("optim.pyi", kiln.optim, None),
        ("__init__.pyi", kiln._kiln, {"autocast", "is_autocast_enabled", "get_autocast_dtype"})]


@pytest.mark.parametrize("path,mod,only", FULL, ids=[p for p, _, _ in FULL])
def test_the_stub_matches_the_signatures(path, mod, only):
    stubbed, problems = _stub(path), []
    for name in (only or {n for n in dir(mod) if not n.startswith("_")}):
        obj = getattr(mod, name)
        if name in stubbed and not isinstance(obj, type(kiln)):
            _check_member(f"{mod.__name__}.{name}", obj, stubbed[name], problems)
    assert problems == []


def test_the_stub_checker_sees_a_mismatch():
    node = ast.parse("def sgd(params, lr=1e-2, momentum=0.0, dampening=0.0, weight_decay=0.0, "
                     "nesterov=False): ...").body[0]
    problems = []
    _check_member("sgd", kiln.optim.sgd, node, problems)
    assert problems and "sgd: bound as" in problems[0]


def test_tour_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(ROOT / "examples/python/tour.py"), "cpu:0"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kernel 'scale' applied: [ 0. 10. 20." in out.stdout
    assert "accuracy" in out.stdout
