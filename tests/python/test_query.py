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
