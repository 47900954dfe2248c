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


def test_sum_of_a_map_is_one_kernel(cpu):
    x = kiln.tensor(np.arange(10, dtype=np.float32), device=cpu)
    assert kiln.query(x).map(kiln.sqrt(_1) * 2).sum() == pytest.approx(
        (np.sqrt(np.arange(10)) * 2).sum(), rel=1e-5)
    assert kiln.last_tensor_stats()["kernel_launches"] == 1


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
