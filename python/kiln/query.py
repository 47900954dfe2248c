"""Placeholder expressions over tensors and arrays, as kiln::placeholders in C++.

    kiln.query(x).map(kiln._1 * 2 + 1).filter(kiln._1 > 3).sum()
    kiln.zip(a, b).map(kiln._1 * kiln._2).sum()

C++'s kiln::query types its expressions at compile time, so Python cannot build them at run time.
Here an expression is applied to kiln.tensor operands instead: its elementwise work and the
terminal's reduction are lazy tensor operations, which Kiln fuses into one kernel per
evaluation (a filter becomes a mask: kiln.where for reductions, a count of the mask for count).
"""

import builtins as _builtins
from math import copysign as _copysign

import numpy as _np

from . import _kiln


class _expr:
    """A placeholder expression: _1 (the element, or a zip's first component), _2 ..., _i
    (the element's index), and arithmetic, comparisons and kiln.* math over them.

    It is a tree of tuples (_node): ("arg", k), ("index",), ("const", value, type(value)[, sign
    of a float]), (operator, a, b)
    with operator one of + - * / ** < <= > >= == !=, ("neg", a), ("abs", a) and
    ("call", name, a) for kiln.<name>. A native query lowers the tree in one call into the
    module (_tensor_query.stage); elsewhere _eval applies it to kiln.tensor operands. Equal trees
    give the same kernel over inputs of the same types (constants carry their type, and a float
    its sign, which 0.0 == -0.0 hides): kiln.query keys its cache of lowered chains by them."""

    __slots__ = ("_node",)
    __array_priority__ = 1000  # NumPy scalars on the left defer to these operators

    def __init__(self, node):
        self._node = node

    def __call__(self, *components):
        return _eval(self._node, components)

    def __repr__(self):
        return _text(self._node)

    # One closure per operator: the query's own cost is mostly Python calls like these.
    def _op(sym, reflected=False):
        def op(self, other):
            o = other._node if type(other) is _expr else _const(other)
            return _expr((sym, o, self._node) if reflected else (sym, self._node, o))
        return op

    __add__, __radd__ = _op("+"), _op("+", True)
    __sub__, __rsub__ = _op("-"), _op("-", True)
    __mul__, __rmul__ = _op("*"), _op("*", True)
    __truediv__, __rtruediv__ = _op("/"), _op("/", True)
    __pow__ = _op("**")
    __lt__, __le__, __gt__, __ge__ = _op("<"), _op("<="), _op(">"), _op(">=")
    __eq__, __ne__ = _op("=="), _op("!=")  # type: ignore[assignment]
    del _op

    def __neg__(self): return _expr(("neg", self._node))
    def __abs__(self): return _expr(("abs", self._node))
    __hash__ = None

    def __bool__(self):
        raise TypeError("a kiln placeholder expression has no truth value: use it in "
                        "map/filter (and & | ~ are not Kiln operators; use * for 'and')")


_FLOATS = frozenset((float, _np.float16, _np.float32, _np.float64, _np.longdouble))


def _const(v):
    t = type(v)
    if t in _FLOATS:
        return ("const", v, t, _copysign(1.0, v))
    return ("const", v, t)


_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "**": lambda a, b: a ** b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


def _eval(node, c):
    """The tree applied to the components c (kiln.tensor operands, or an _element)."""
    op = node[0]
    if op == "arg":
        k = node[1]
        if k >= len(c):
            raise _kiln.invalid_argument(
                f"kiln query: _{k + 1} names component {k + 1} of elements of {len(c)}")
        return c[k]
    if op == "const":
        return node[1]
    if op == "index":
        return _index_fn(c)
    if op == "neg":
        return -_eval(node[1], c)
    if op == "abs":
        return abs(_eval(node[1], c))
    if op == "call":
        return getattr(_kiln, node[1])(_eval(node[2], c))
    return _BINARY[op](_eval(node[1], c), _eval(node[2], c))


def _text(node):
    op = node[0]
    if op == "arg":
        return f"_{node[1] + 1}"
    if op == "const":
        return repr(node[1])
    if op == "index":
        return "_i"
    if op == "neg":
        return f"-{_text(node[1])}"
    if op == "abs":
        return f"abs({_text(node[1])})"
    if op == "call":
        return f"{node[1]}({_text(node[2])})"
    return f"({_text(node[1])} {op} {_text(node[2])})"


_1, _2, _3, _4 = (_expr(("arg", k)) for k in range(4))


def _index_fn(c):
    if isinstance(c, _element):
        return c.index
    first = c[0]
    return _kiln.arange(len(first), dtype=_kiln.int64, device=first.device)


_i = _expr(("index",))


def _math(name):
    f = getattr(_kiln, name)

    def apply(x):
        if isinstance(x, _expr):
            return _expr(("call", name, x._node))
        return f(x)
    apply.__name__ = name
    apply.__doc__ = f.__doc__
    return apply


class _element(tuple):
    """The components an expression is applied to, and the native query whose index tensor
    stands for _i (fetched only where _i is used: each fetch is a call into the module)."""

    def __new__(cls, components, tq):
        e = super().__new__(cls, components)
        e._tq = tq
        return e

    @property
    def index(self):
        return self._tq.index


class query:
    """A lazy pipeline over one or more equally long 1-D inputs (kiln.tensor, NumPy arrays,
    lists); nothing runs until a terminal (sum, count, max, min, mean, to_numpy, tensor).

    A terminal runs the chain as kiln::query does in C++, one generated kernel with a
    device-side filter, when every stage is elementwise (placeholder expressions, or functions
    of the components built from elementwise kiln operations); otherwise through the tensor
    engine (a filter becomes a mask)."""

    def __init__(self, *inputs, device=None):
        self._stages = ()
        self._run = None  # the _tensor_query, or False where the tensor engine evaluates
        self._key = ()  # the stages' key in _prepared; None where they are not kept
        if len(inputs) == 1 and device is None and type(inputs[0]) is _kiln.tensor:
            # The common case, kept short: a query's own cost is a few Python calls.
            if inputs[0].ndim != 1:
                raise _kiln.shape_error("kiln.query: inputs must be 1-D")
            self._inputs = inputs
            return
        if not inputs:
            raise _kiln.invalid_argument("kiln.query: needs at least one input")
        dev = device if device is not None else next(
            (x.device for x in inputs if isinstance(x, _kiln.tensor)), None)
        self._inputs = [x if isinstance(x, _kiln.tensor) and (device is None or x.device == dev)
                        else _kiln.tensor(x, device=dev) for x in inputs]
        lens = {len(x) for x in self._inputs}
        if len(lens) != 1:
            raise _kiln.invalid_argument(f"kiln.zip: inputs differ in length {sorted(lens)}")
        if _builtins.any(x.ndim != 1 for x in self._inputs):
            raise _kiln.shape_error("kiln.query: inputs must be 1-D")

    def _with(self, stage):
        q = object.__new__(query)
        q._inputs, q._stages, q._run = self._inputs, self._stages + (stage,), None
        key, f = self._key, stage[1]
        q._key = (key + ((stage[0], f._node if f is not None else None, stage[2]),)
                  if key is not None and stage[0] in _KEPT and (f is None or type(f) is _expr)
                  else None)
        return q

    def map(self, f):
        """Each element becomes f(element) (f: a placeholder expression or a function of
        kiln.tensor components)."""
        return self._with(("map", f, False))

    transform = map

    def filter(self, pred):
        """Keeps the elements for which pred holds."""
        return self._with(("filter", pred, False))

    def sort(self, descending=False):
        """The (single-valued) elements in order, stable: ascending, or descending; floats with
        every NaN last either way (C++: kiln::sort). Runs as kiln::query (device radix sort)."""
        return self._with(("sort", None, descending))

    def order_by(self, key, descending=False):
        """Every component reordered by key(element) (a placeholder expression or a function of
        the components), stable (C++: kiln::order_by):
        kiln.zip(k, v).order_by(_1).map(_2) is a sort by key."""
        return self._with(("order_by", key, descending))

    def group_by(self, key):
        """Groups by key(element), ascending; .aggregate(kiln.agg.sum(_2), kiln.agg.count(), ...)
        makes the groups: elements (key, aggregates...) (C++: kiln::group_by | aggregate)."""
        return _grouped(self, key)

    def reduce_by_key(self, key, *aggregates):
        """(key, aggregates...) per run of consecutive equal keys, no sort (C++:
        kiln::reduce_by_key)."""
        return self._with(("group", key, (_check_aggregates(aggregates), False)))

    def distinct(self):
        """The sorted unique values of a single-valued query (C++: kiln::distinct)."""
        return self._with(("distinct", None, None))

    def distinct_by(self, key):
        """The first element (every component) of each distinct key(element), ascending by key."""
        return self._with(("first_by", key, True))

    def unique_by_key(self, key):
        """The first element of each run of consecutive equal keys (C++: kiln::unique_by_key)."""
        return self._with(("first_by", key, False))

    def top_k(self, k):
        """The k largest elements, descending (NaN last); fewer than k is kiln.invalid_argument."""
        if not isinstance(k, int) or k < 0:
            raise _kiln.invalid_argument(f"kiln.query.top_k: k must be an int >= 0, got {k!r}")
        return self._with(("top_k", None, k))

    def join(self, other, key, other_key):
        """Pairs of equal keys with another query (or tensor): this element's components, then
        the other's, in the nested loop's order (C++: kiln::join)."""
        return self._with(("join", key, (_as_query(other), other_key, False)))

    def left_join(self, other, key, other_key):
        """As join, keeping unmatched elements (the other's components 0) with a last bool
        component, matched (C++: kiln::left_join)."""
        return self._with(("join", key, (_as_query(other), other_key, True)))

    def _native(self):
        """The chain as kiln::query runs it, or None where a stage is not elementwise."""
        if self._run is None:
            self._run = False
            key = self._key
            if key:  # stages of placeholder trees: lowered once per key and input types
                try:
                    kept = _prepared.get(key)
                except TypeError:  # a constant that is not hashable (a NumPy array)
                    key = kept = None
                if kept is not None and (tq := kept.over(self._inputs)) is not None:
                    self._run = tq
                    return tq
            try:
                tq = _kiln._tensor_query(self._inputs)
            except _kiln.unsupported:  # f16/bf16 inputs: the tensor engine's path
                tq = None
            if tq is not None:
                element = None  # the query's current components, fetched where a stage needs them
                for kind, f, extra in self._stages:
                    if kind in _BARRIERS:
                        ok = _barrier(tq, kind, f, extra, element or _components(tq))
                        if ok is None:
                            break
                        element = None
                        continue
                    if isinstance(f, _expr):
                        # The tree lowered in one call; None where a constant is not a Python
                        # number (NumPy scalars, arrays): the tensor operators below take those.
                        ok = tq.stage(kind, f._node, extra)
                        if ok is not None:
                            if not ok:
                                break
                            element = None if kind == "map" else element
                            continue
                    element = element or _components(tq)
                    out = _apply(f, element)
                    ok = (tq.map(out) if kind == "map" else tq.filter(out) if kind == "filter"
                          else tq.order_by(out, extra))
                    if not ok:
                        break
                    if kind == "map":
                        element = _element((out,), tq)
                else:
                    self._run = tq
                    if key:
                        if len(_prepared) >= _PREPARED_MAX:
                            _prepared.clear()
                        _prepared[key] = tq.unbound()
        return self._run or None

    def _evaluated(self):
        """(components, mask) as lazy tensors: the tensor engine's form of the chain."""
        components, mask = tuple(self._inputs), None
        for kind, f, _ in self._stages:
            if kind == "order_by" or kind in _BARRIERS:
                raise _kiln.unsupported(
                    f"kiln.query: {kind} runs as kiln::query only: every stage must be "
                    "elementwise (no reductions or other tensors inside) and the inputs not 16-bit")
            out = _apply(f, components)
            if kind == "map":
                components = (out,)
            else:
                mask = out if mask is None else _kiln.where(mask, out, False)
        return components, mask

    def _value(self):
        components, mask = self._evaluated()
        if len(components) != 1:
            raise _kiln.invalid_argument(
                "kiln.query: this step needs a single-valued element; map the components of a "
                "zip to one value first")
        return components[0], mask

    def _reduce(self, kind):
        tq = self._native()
        return None if tq is None else tq.reduce(kind)

    def sum(self):
        """The sum (int64 for integers) as a Python number; one kernel."""
        if (tq := self._native()) is not None:
            return tq.reduce("sum")
        v, mask = self._value()
        return (v if mask is None else _kiln.where(mask, v, 0)).sum().item()

    def count(self):
        """How many elements pass the filters."""
        if _builtins.all(st[0] in ("map", "sort", "order_by") for st in self._stages):
            return len(self._inputs[0])
        if (tq := self._native()) is not None:
            return tq.reduce("count")
        return self._evaluated()[1].sum().item()

    def _extreme(self, which):
        if (tq := self._native()) is not None:
            return tq.reduce(which)
        v, mask = self._value()
        if mask is None:
            return getattr(v, which)().item() if len(v) else None
        if mask.sum().item() == 0:
            return None
        dt = v.dtype.numpy
        info = _np.finfo(dt) if v.dtype.is_floating_point else _np.iinfo(dt)
        fill = info.min if which == "max" else info.max
        return getattr(_kiln.where(mask, v, fill.item()), which)().item()

    def max(self):
        """The largest element, or None when there is none (C++: std::optional)."""
        return self._extreme("max")

    def min(self):
        return self._extreme("min")

    def mean(self):
        """The average (in float64), or None when no element passes."""
        if (tq := self._native()) is not None:
            return tq.reduce("mean")
        n = self.count()
        return None if n == 0 else self.sum() / n

    def tensor(self):
        """The elements as a kiln.tensor on the inputs' device (after a filter, the kept ones,
        compacted on the device)."""
        if (tq := self._native()) is not None and tq.arity == 1:
            return tq.collect()
        v, mask = self._value()
        if mask is None:
            return v.eval()
        kept = v.numpy()[mask.numpy().astype(bool)]
        return _kiln.tensor(kept, device=v.device)

    def tensors(self):
        """Every component's values as a tuple of kiln.tensor (an element of several
        components: after zip, group_by or join). Runs as kiln::query."""
        tq = self._native()
        if tq is None:
            if _builtins.any(st[0] == "filter" for st in self._stages):
                components, mask = self._evaluated()
                keep = mask.numpy().astype(bool)
                return tuple(_kiln.tensor(c.numpy()[keep], device=c.device) for c in components)
            return tuple(c.eval() for c in self._evaluated()[0])
        return tuple(tq.collect_all())

    def to_numpy(self):
        """The elements as a NumPy array; a tuple of arrays for several components."""
        if (tq := self._native()) is not None and tq.arity != 1:
            return tuple(t.numpy() for t in tq.collect_all())
        return self.tensor().numpy()

    def __iter__(self):
        return iter(self.to_numpy().tolist())


class _grouped:
    """query.group_by(key): .aggregate(...) makes the groups."""

    def __init__(self, q, key):
        self._q, self._key = q, key

    def aggregate(self, *aggregates):
        return self._q._with(("group", self._key, (_check_aggregates(aggregates), True)))


class agg:
    """Aggregates of group_by(...).aggregate(...) and reduce_by_key (C++: kiln::agg::): sum
    (int64/uint64 for integers, the float type kept), min, max (NaN propagates), mean (float32
    for float32, else float64), count (uint64), first (the group's first in input order)."""

    @staticmethod
    def sum(e):
        return ("sum", e)

    @staticmethod
    def min(e):
        return ("min", e)

    @staticmethod
    def max(e):
        return ("max", e)

    @staticmethod
    def mean(e):
        return ("mean", e)

    @staticmethod
    def first(e):
        return ("first", e)

    @staticmethod
    def count():
        return ("count", None)


def _check_aggregates(aggregates):
    if not aggregates:
        raise _kiln.invalid_argument("kiln.query: give at least one kiln.agg aggregate")
    for a in aggregates:
        if not (isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str)):
            raise _kiln.invalid_argument(
                f"kiln.query: aggregates come from kiln.agg (sum, min, max, mean, count, first), "
                f"not {a!r}")
    return tuple(aggregates)


def _as_query(x):
    return x if isinstance(x, query) else query(x)


_BARRIERS = ("sort", "group", "first_by", "distinct", "top_k", "join")

# Chains of these stages (by placeholder trees) are kept lowered, without their inputs, keyed by
# the stages: a query run again over new inputs of the same types skips lowering (the module
# calls that build lazy tensors for each stage: half of a small query's Python cost).
_KEPT = frozenset(("map", "filter", "order_by", "sort"))
_PREPARED_MAX = 256
_prepared = {}


def _barrier(tq, kind, f, extra, element):
    """Adds a barrier stage to the native query; None where a key or value is not elementwise."""
    if kind == "sort":
        tq.sort(extra)
    elif kind == "distinct":
        tq.distinct()
    elif kind == "top_k":
        tq.top_k(extra)
    elif kind == "first_by":
        if not tq.first_by(_apply(f, element), extra):
            return None
    elif kind == "group":
        aggregates, sorted_ = extra
        values = [(k, None if e is None else _apply(e, element)) for k, e in aggregates]
        if not tq.group(_apply(f, element), values, sorted_):
            return None
    else:  # join
        other, other_key, left = extra
        otq = other._native()
        if otq is None:
            raise _kiln.unsupported("kiln.query.join: the other query must run as kiln::query "
                                    "(elementwise stages, inputs not 16-bit)")
        okey = _apply(other_key, _element(tuple(otq.components), otq))
        if not tq.join(otq, _apply(f, element), okey, left):
            return None
    return True


def _components(tq):
    return _element(tuple(tq.components), tq)


def _apply(f, components):
    # A placeholder expression sees the element itself (its _i is the element's index tensor).
    out = _eval(f._node, components) if isinstance(f, _expr) else f(*components)
    if not isinstance(out, _kiln.tensor):
        out = _kiln.full(list(components[0].shape), out, device=components[0].device)
    return out


def last_query_stats():
    """What this thread's last query run as kiln::query did: kernel_launches,
    programs_compiled, bytes_read, bytes_written (device memory) and device, as C++'s
    kiln::last_query_stats(). A query that fell back to the tensor engine is counted by
    kiln.last_tensor_stats() instead."""
    return _kiln._last_query_stats()


def zip(*inputs, device=None):  # noqa: A001 (kiln.zip, as in C++)
    """A query over several inputs of one length: elements are (_1, _2, ...)."""
    return query(*inputs, device=device)


for _name in ("sqrt", "exp", "log", "sin", "cos", "tanh", "abs", "relu", "sigmoid", "square",
              "floor", "ceil", "rsqrt", "tan"):
    globals()[_name] = _math(_name)
