import sys

import numpy as np
import pytest

import kiln
from kiln import _1, _2


def test_placeholder_chain_over_a_numpy_array(dev):
    a = np.arange(100, dtype=np.float32)
    q = kiln.query(a, device=dev).map(_1 * 2 + 1).filter(_1 > 50)
    kept = a * 2 + 1
    kept = kept[kept > 50]
    assert q.sum() == pytest.approx(kept.sum())
    assert q.count() == len(kept)
    assert q.max() == kept.max() and q.min() == kept.min()
    np.testing.assert_array_equal(q.to_numpy(), kept)


def test_sum_of_a_map_runs_as_a_query(cpu):
    x = kiln.tensor(np.arange(10, dtype=np.float32), device=cpu)
    assert kiln.query(x).map(kiln.sqrt(_1) * 2).sum() == pytest.approx(
        (np.sqrt(np.arange(10)) * 2).sum(), rel=1e-5)
    assert 1 <= kiln.last_query_stats()["kernel_launches"] <= 2  # partials, then their sum


def test_zip_and_index(cpu):
    a, b = np.arange(5.0), np.arange(5.0)[::-1].copy()
    assert kiln.zip(a, b, device=cpu).map(_1 * _2).sum() == pytest.approx((a * b).sum())
    assert kiln.query(a, device=cpu).map(_1 * kiln._i).sum() == pytest.approx((a * a).sum())


def test_empty_results_and_bad_input(cpu):
    q = kiln.query([1, 2, 3], device=cpu).filter(_1 > 10)
    assert q.count() == 0 and q.max() is None and q.mean() is None
    with pytest.raises(kiln.invalid_argument):
        kiln.zip([1, 2], [1, 2, 3], device=cpu)
    with pytest.raises(kiln.invalid_argument):
        kiln.zip([1, 2], [3, 4], device=cpu).sum()  # two components: map them first
    with pytest.raises(TypeError):
        bool(_1 > 2)
    assert repr(_1 * 2 + 1) == "((_1 * 2) + 1)"


def test_elementwise_chains_run_as_one_kiln_query_kernel(dev):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(5000).astype(np.float32)
    q = kiln.query(a, device=dev).map(kiln.relu(_1) * 3 - 1).filter(_1 > 0.5)
    kept = np.maximum(a, 0) * 3 - 1
    kept = kept[kept > 0.5]
    assert q._native() is not None  # white box: kiln::query's path
    assert q.sum() == pytest.approx(kept.sum(), rel=1e-4)
    stats = kiln.last_query_stats()
    assert stats["kernel_launches"] >= 1 and stats["device"] == dev.id
    assert q.count() == len(kept)
    assert q.mean() == pytest.approx(kept.mean(), rel=1e-5)
    # The filter compacts on the device: a kiln.tensor of the survivors, in order.
    out = q.tensor()
    assert out.device == dev and out.dtype == kiln.float32
    np.testing.assert_allclose(out.numpy(), kept, rtol=1e-6)  # a fused multiply-add rounds once
    assert kiln.last_query_stats()["bytes_written"] == kept.nbytes


def test_functions_of_tensors_run_as_queries_too(cpu):
    a = np.arange(1, 200, dtype=np.int32)
    q = kiln.query(a, device=cpu).map(lambda x: x * x - 7 * x).filter(lambda x: x != 0)
    expect = (a * a - 7 * a)[(a * a - 7 * a) != 0]
    assert q.sum() == expect.sum() and isinstance(q.sum(), int)
    assert kiln.last_query_stats()["kernel_launches"] >= 1
    assert q.max() == expect.max() and q.min() == expect.min()


def test_index_placeholder_and_integer_sums(dev):
    a = np.arange(1000, dtype=np.int64)[::-1].copy()
    q = kiln.query(a, device=dev).map(_1 * kiln._i).filter(kiln._i < 700)
    idx = np.arange(1000)
    expect = (a * idx)[idx < 700]
    assert q.sum() == int(expect.sum())
    np.testing.assert_array_equal(q.to_numpy(), expect)


def test_a_stage_that_is_not_elementwise_falls_back_to_the_tensor_engine(cpu):
    a = np.random.default_rng(3).standard_normal(300).astype(np.float64)
    x = kiln.tensor(a, device=cpu)
    q = kiln.query(x).map(lambda v: v - v.sum() / len(a)).filter(_1 > 0)  # a reduction inside
    centred = a - a.mean()
    assert q._native() is None  # white box: the tensor engine's path
    assert q.sum() == pytest.approx(centred[centred > 0].sum())
    assert q.count() == int((centred > 0).sum())
    np.testing.assert_allclose(q.to_numpy(), centred[centred > 0])
    # Branches of one query do not disturb each other.
    base = kiln.query(x).map(_1 * 2)
    assert base.filter(_1 > 0).count() == int((a > 0).sum())
    assert base.filter(_1 < 0).count() == int((a < 0).sum())
    assert base.sum() == pytest.approx((a * 2).sum())


def test_zip_of_several_types_and_empty_survivors(dev):
    a = np.arange(64, dtype=np.int32)
    b = np.linspace(0, 1, 64).astype(np.float32)
    q = kiln.zip(a, b, device=dev).map(_1 * _2).filter(_1 > 100)
    assert q.count() == 0 and q.sum() == 0 and q.max() is None and q.mean() is None
    assert len(q.to_numpy()) == 0
    with pytest.raises(kiln.invalid_argument):
        kiln.zip(a, b, device=dev).tensor()  # two components: map them first


def test_bfloat16_inputs_take_the_tensor_engine_path(cpu):
    a = np.arange(1, 65, dtype=np.float32)
    x = kiln.tensor(a, device=cpu).to(kiln.bfloat16)
    q = kiln.query(x).map(_1 * 2).filter(_1 > 40)
    assert q._native() is None  # kiln::query has no 16-bit elements yet
    assert q.sum() == pytest.approx((a * 2)[a * 2 > 40].sum(), rel=1e-2)
    assert q.count() == int((a * 2 > 40).sum())


def test_sort_and_order_by_run_on_the_device(dev):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(3001).astype(np.float32)
    a[::97] = np.nan
    q = kiln.query(a, device=dev).map(_1 * 2).filter(_1 > -1)
    kept = (a * 2)[(a * 2) > -1]  # the comparison drops the NaNs
    np.testing.assert_array_equal(q.sort().to_numpy(), np.sort(kept, kind="stable"))
    np.testing.assert_array_equal(q.sort(descending=True).to_numpy(),
                                  -np.sort(-kept, kind="stable"))
    # NaN last in both directions.
    both = kiln.query(a, device=dev).sort(descending=True).to_numpy()
    assert np.isnan(both[-31:]).all() and not np.isnan(both[:-31]).any()
    assert both[0] == np.nanmax(a)
    # order_by: values in their keys' order, stable among equal keys; the key is not kept.
    k = (np.arange(1000) * 7919 % 13).astype(np.int32)
    v = np.arange(1000, dtype=np.int64)
    got = kiln.zip(k, v, device=dev).order_by(_1, descending=True).map(_2).to_numpy()
    np.testing.assert_array_equal(got, v[np.argsort(-k, kind="stable")])
    rev = kiln.zip(k, v, device=dev).order_by(lambda kk, vv: -vv).map(_2)  # a function key
    np.testing.assert_array_equal(rev.to_numpy(), v[::-1])
    assert rev.sum() == int(v.sum())  # a reduction after the sort sees every element once
    assert kiln.zip(k, v, device=dev).order_by(_1).map(_2).tensor().device == dev


def test_sort_needs_the_kiln_query_path(cpu):
    x = kiln.tensor(np.arange(5.0), device=cpu)
    with pytest.raises(kiln.unsupported):
        kiln.query(x).map(lambda t: t - t.sum()).sort().to_numpy()
    with pytest.raises(kiln.invalid_argument):
        kiln.zip(x, x).sort().to_numpy()  # two components: order_by a key instead


def test_group_by_aggregate_against_numpy(dev):
    rng = np.random.default_rng(5)
    k = rng.integers(-20, 20, 3000).astype(np.int32)
    v = rng.uniform(-100, 100, 3000).astype(np.float32)
    keys, total, count, top, mean = kiln.zip(k, v, device=dev).filter(_2 > -90).group_by(_1) \
        .aggregate(kiln.agg.sum(_2), kiln.agg.count(), kiln.agg.max(_2), kiln.agg.mean(_2)) \
        .to_numpy()
    keep = v > -90
    want = np.unique(k[keep])
    np.testing.assert_array_equal(keys, want)
    assert keys.dtype == np.int32 and count.dtype == np.uint64 and mean.dtype == np.float32
    for i, key in enumerate(want):
        sel = v[keep & (k == key)]
        assert count[i] == sel.size
        np.testing.assert_allclose(total[i], sel.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
        assert top[i] == sel.max()
        np.testing.assert_allclose(mean[i], sel.astype(np.float64).mean(), rtol=1e-4, atol=1e-4)
    # Stages after the groups see (key, aggregates...).
    big = kiln.zip(k, v, device=dev).group_by(_1 * 2).aggregate(kiln.agg.count()) \
        .filter(_2 > 75).map(_1).to_numpy()
    u, c = np.unique(k * 2, return_counts=True)
    np.testing.assert_array_equal(big, u[c > 75])


def test_distinct_top_k_and_runs(dev):
    rng = np.random.default_rng(6)
    x = rng.integers(0, 50, 2000).astype(np.int64)
    np.testing.assert_array_equal(kiln.query(x, device=dev).distinct().to_numpy(), np.unique(x))
    f = rng.standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(kiln.query(f, device=dev).top_k(7).to_numpy(),
                                  np.sort(f)[::-1][:7])
    with pytest.raises(kiln.invalid_argument):
        kiln.query(f, device=dev).filter(_1 > 0).top_k(1001).to_numpy()
    runs = np.repeat(np.array([3, 1, 3, 3, 2], dtype=np.int32), [4, 1, 2, 5, 3])
    vals = np.arange(runs.size, dtype=np.float64)
    k, m = kiln.zip(runs, vals, device=dev).reduce_by_key(_1, kiln.agg.max(_2)).to_numpy()
    np.testing.assert_array_equal(k, [3, 1, 3, 2])
    np.testing.assert_array_equal(m, [3, 4, 11, 14])
    k, v = kiln.zip(runs, vals, device=dev).unique_by_key(_1).to_numpy()
    np.testing.assert_array_equal(v, [0, 4, 5, 12])
    k, v = kiln.zip(runs, vals, device=dev).distinct_by(_1).to_numpy()
    np.testing.assert_array_equal(k, [1, 2, 3])
    np.testing.assert_array_equal(v, [4, 12, 0])
    assert kiln.zip(runs, vals, device=dev).distinct_by(_1).count() == 3


def test_join_and_left_join_against_the_nested_loop(dev):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 30, 400).astype(np.int32)
    av = rng.uniform(0, 1, 400).astype(np.float32)
    b = rng.integers(0, 30, 50).astype(np.int32)
    bv = np.arange(50, dtype=np.int64)
    rows = [(x, y, z, w) for x, y in zip(a, av) for z, w in zip(b, bv) if x == z]
    got = kiln.zip(a, av, device=dev).join(kiln.zip(b, bv, device=dev), _1, _1).to_numpy()
    assert len(got) == 4 and got[0].size == len(rows)
    for c in range(4):
        np.testing.assert_array_equal(got[c], [r[c] for r in rows])
    left = kiln.zip(a, av, device=dev).left_join(kiln.query(b, device=dev), _1, _1).to_numpy()
    assert len(left) == 4  # (a, av, b, matched)
    matched = left[3]
    want = [any(x == z for z in b) for x in a for _ in range(max(1, int(np.sum(b == x))))]
    np.testing.assert_array_equal(matched, want)
    with pytest.raises(kiln.invalid_argument):
        kiln.query(a, device=dev).group_by(_1).aggregate("sum")


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_placeholder_trees_lowered_in_one_call_match_the_python_operators(dev, dtype):
    # Every node kind of a placeholder tree (query.py, _expr._node) lowered by the module in one
    # call (_tensor_query.stage), against the same expression applied through kiln.tensor's
    # Python operators (a function stage) and NumPy: the same values and dtypes.
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(777) * 20).astype(dtype)
    b = (rng.standard_normal(777) * 20).astype(dtype)
    exprs = [
        2 - _1 * 3 + 0.5,                  # reflected arithmetic, a float beside ints
        -abs(_1) / 4 + _2 ** 2,            # neg, abs, true division, power
        kiln.sqrt(kiln.abs(_1) + 1) * kiln._i,  # kiln math, the index
        (_1 > 3) * 1 + (2 < _2) + (_1 == _1) - (_2 != 7),  # comparisons, the number on the left
        (_1 >= -2) * (_2 <= 5) * True,     # bool constants
    ]
    for e in exprs:
        tree = kiln.zip(a, b, device=dev).map(e)
        python_path = kiln.zip(a, b, device=dev).map(lambda x, y, e=e: e(x, y))
        assert tree._native() is not None  # (the function form of _i is the tensor engine's)
        got, want = tree.to_numpy(), python_path.to_numpy()
        assert got.dtype == want.dtype, repr(e)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=repr(e))
    # NumPy scalars keep their Python path (the module takes Python numbers only): same result.
    q = kiln.query(a, device=dev).map(_1 * np.float32(2)).filter(_1 > np.int64(0))
    expect = a.astype(np.float32) * 2
    np.testing.assert_allclose(q.to_numpy(), expect[expect > 0], rtol=1e-6)
    with pytest.raises(kiln.invalid_argument, match="_3 names component 3"):
        kiln.zip(a, b, device=dev).map(_1 + kiln._3).sum()


def test_a_query_stage_is_one_call_into_the_module(cpu, monkeypatch):
    # White box: a placeholder stage reaches the module once, without kiln.tensor operators.
    calls = []
    real = kiln.tensor.__mul__
    monkeypatch.setattr(kiln.tensor, "__mul__", lambda *a: calls.append(a) or real(*a))
    x = kiln.arange(10, dtype=kiln.float32, device=cpu)
    assert kiln.query(x).map(_1 * 2 + 1).filter(_1 > 5).sum() == pytest.approx(
        sum(v * 2 + 1 for v in range(10) if v * 2 + 1 > 5))
    assert calls == []


def test_a_chain_run_again_reuses_its_lowered_stages_over_new_inputs(dev, monkeypatch):
    # kiln.query keeps a chain of placeholder stages lowered, without its inputs, keyed by the
    # stages (query.py, _prepared): run again over other inputs, it must give what a fresh
    # lowering gives, and keep neither the old inputs nor results of another chain.
    kq = sys.modules["kiln.query"]
    monkeypatch.setattr(kq, "_prepared", {})
    rng = np.random.default_rng(11)

    def chain(x, c=1.5):
        return kiln.query(x).map(_1 * 2 + 1).filter(_1 > c).filter(kiln._i >= 3)

    for n in (1000, 4097, 0, 33):
        a = rng.standard_normal(n).astype(np.float32)
        m = a * 2 + 1
        kept = m[m > 1.5][3:]  # _i after a filter: the position among the survivors
        x = kiln.tensor(a, device=dev)
        assert chain(x).sum() == pytest.approx(float(kept.sum(dtype=np.float64)), rel=1e-4,
                                               abs=1e-3)
        np.testing.assert_array_equal(chain(x).to_numpy(), kept)
    assert len(kq._prepared) == 1  # one chain, lowered once
    # Another constant, or the same value of another type, is another chain.
    x = kiln.tensor(np.arange(-5, 5, dtype=np.int32), device=dev)
    assert kiln.query(x).map(_1 + 1).to_numpy().dtype == np.int32
    assert kiln.query(x).map(_1 + 1.0).to_numpy().dtype == (x + 1.0).dtype.numpy
    assert kiln.query(x).map(_1 + True).to_numpy().dtype == np.int32
    assert chain(x, 2).count() == int((np.arange(-5, 5) * 2 + 1 > 2).sum()) - 3
    # 0.0 == -0.0 and they hash alike, but x * -0.0 is not x * 0.0.
    f = kiln.tensor(np.array([1.0, -2.0, 3.0], np.float32), device=dev)
    assert not np.signbit(kiln.query(f).map(_1 * 0.0).to_numpy()[0])
    assert np.signbit(kiln.query(f).map(_1 * -0.0).to_numpy()[0])
    assert not np.signbit(kiln.query(f).map(_1 * 0.0).to_numpy()[0])
    # Inputs of another type take their own lowering: int32 keys after float32 ones.
    assert chain(x).to_numpy().dtype == np.int32
    assert chain(kiln.tensor(np.ones(8, np.float32), device=dev)).to_numpy().dtype == np.float32
    # A NumPy array as a constant is not hashable: the chain runs, unkept.
    before = len(kq._prepared)
    assert kiln.query(f).map(_1 * np.ones(3, np.float32)).sum() == pytest.approx(2.0)
    assert len(kq._prepared) == before


def test_kept_chains_hold_no_input_memory(cpu, monkeypatch):
    # A kept chain has no inputs: memory shared with NumPy is released when its last Kiln
    # tensor goes (the DLPack deleter drops Kiln's reference to the array).
    import gc
    kq = sys.modules["kiln.query"]
    monkeypatch.setattr(kq, "_prepared", {})
    a = np.arange(1 << 16, dtype=np.float32)
    base = sys.getrefcount(a)
    x = kiln.from_dlpack(a)
    assert x.data_ptr() == a.ctypes.data and sys.getrefcount(a) > base
    for _ in range(2):  # lowered, then run from the kept chain
        assert kiln.query(x).map(_1 * 2).filter(_1 > 3).count() == (1 << 16) - 2
    assert len(kq._prepared) == 1
    del x
    gc.collect()
    assert sys.getrefcount(a) == base
