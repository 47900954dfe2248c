"""The transformer-era ops from Python (python/src/bind_transformer.cpp, bind_nn.cpp): each
compared with a NumPy reference on random inputs, gradients with central differences of that
reference; the tests at the end compare with PyTorch on the CPU and skip where `import torch`
fails."""

import math

import numpy as np
import pytest

import kiln

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: NumPy only")

RTOL, ATOL = 1e-4, 1e-5  # f32 against an f64 reference
GRAD_RTOL, GRAD_ATOL = 2e-3, 2e-4


def _rng(seed=0):
    return np.random.default_rng(seed)


def _t(a, dev, **kw):
    return kiln.tensor(np.asarray(a), device=dev, **kw)


def _torch_has(name):
    return torch is not None and hasattr(F, name)


# ---- NumPy references (f64) ----
_erf = np.vectorize(math.erf)


def _act(y, activation):
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "gelu":
        return 0.5 * y * (1 + _erf(y / math.sqrt(2)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3)))
    return y


def _linear(x, w, b=None, activation="none"):
    y = x @ w.T
    return _act(y if b is None else y + b, activation)


def _layer_norm(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(-k, 0))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return (y if w is None else y * w) + (0 if b is None else b)


def _rms_norm(x, k, w=None, eps=float(np.finfo(np.float32).eps)):
    axes = tuple(range(-k, 0))
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if w is None else y * w


def _sdpa(q, k, v, mask=None, causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        mask = np.tril(np.ones(s.shape[-2:], dtype=bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def _numeric_grads(f, arrays, upstream, h=1e-6):
    """d sum(f(*arrays) * upstream) / d arrays, by central differences in f64."""
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i][idx] += h
            minus[i][idx] -= h
            g[idx] = ((f(*plus) - f(*minus)) * upstream).sum() / (2 * h)
        grads.append(g)
    return grads


def _kiln_grads(f, arrays, upstream, dev):
    ts = [_t(a.astype(np.float32), dev, requires_grad=True) for a in arrays]
    (f(*ts) * _t(upstream.astype(np.float32), dev)).sum().backward()
    return [t.grad.numpy() for t in ts]


def _torch_grads(f, arrays, upstream):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    (f(*ts) * torch.tensor(upstream)).sum().backward()
    return [t.grad.numpy() for t in ts]


def _check_grads(kiln_f, np_f, arrays, dev, seed=9):
    """kiln's gradients against central differences of the NumPy reference np_f."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    upstream = _rng(seed).normal(size=np.shape(np_f(*arrays)))
    want = _numeric_grads(np_f, arrays, upstream)
    for g, r in zip(_kiln_grads(kiln_f, arrays, upstream, dev), want):
        np.testing.assert_allclose(g, r, rtol=GRAD_RTOL, atol=GRAD_ATOL)


def _check_torch_grads(kiln_f, torch_f, arrays, dev, seed=9):
    """kiln's gradients against torch's autograd in f64."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    shape = tuple(torch_f(*(torch.tensor(a) for a in arrays)).shape)
    upstream = _rng(seed).normal(size=shape)
    want = _torch_grads(torch_f, arrays, upstream)
    for g, r in zip(_kiln_grads(kiln_f, arrays, upstream, dev), want):
        np.testing.assert_allclose(g, r, rtol=GRAD_RTOL, atol=GRAD_ATOL)


# ---- linear ----
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "gelu_tanh"])
def test_linear_matches_numpy(dev, activation):
    rng = _rng(1)
    x = rng.normal(size=(2, 3, 5)).astype(np.float32)
    w = rng.normal(size=(4, 5)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    got = kiln.linear(_t(x, dev), _t(w, dev), _t(b, dev), activation)
    # CUDA (cuBLASLt) fuses the tail into the GEMM; the erf GELU keeps only the bias there.
    fused = "bias epilogue" if activation == "gelu" else "epilogue"
    assert kiln.last_linear_path() == (fused if dev.backend == "cuda" else "separate")
    np.testing.assert_allclose(got.numpy(), _linear(x, w, b, activation), rtol=RTOL, atol=ATOL)
    got = kiln.linear(_t(x, dev), _t(w, dev), activation=activation).numpy()  # no bias
    np.testing.assert_allclose(got, _linear(x, w, None, activation), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("activation", ["none", "gelu_tanh"])
def test_linear_gradients(dev, activation):
    rng = _rng(2)
    x, w, b = rng.normal(size=(3, 4)), rng.normal(size=(2, 4)), rng.normal(size=2)
    _check_grads(lambda x, w, b: kiln.linear(x, w, b, activation),
                 lambda x, w, b: _linear(x, w, b, activation), [x, w, b], dev)


def test_linear_bad_input(cpu):
    x, w = kiln.ones(2, 3, device=cpu), kiln.ones(4, 3, device=cpu)
    with pytest.raises(kiln.invalid_argument, match="activation"):
        kiln.linear(x, w, activation="swish")
    with pytest.raises(kiln.shape_error):
        kiln.linear(x, kiln.ones(4, 2, device=cpu))  # in features differ
    with pytest.raises(kiln.shape_error):
        kiln.linear(x, kiln.ones(4, 3, 1, device=cpu))  # w not 2-D
    with pytest.raises(kiln.shape_error):
        kiln.linear(x, w, kiln.ones(3, device=cpu))  # b not [out]
    with pytest.raises(kiln.dtype_error):
        kiln.linear(kiln.ones(2, 3, dtype="int32", device=cpu), kiln.ones(4, 3, dtype="int32",
                                                                          device=cpu))
    with pytest.raises(kiln.dtype_error):
        kiln.linear(x, kiln.ones(4, 3, dtype="float64", device=cpu))


# ---- layer and RMS norm ----
@pytest.mark.parametrize("shape", [6, [3, 6]], ids=["int", "two_dims"])
def test_layer_norm_matches_numpy(dev, shape):
    rng = _rng(3)
    dims = [shape] if isinstance(shape, int) else shape
    x = rng.normal(size=[2] + [3, 6][-len(dims):]).astype(np.float32) * 3 + 1
    w = rng.normal(size=dims).astype(np.float32)
    b = rng.normal(size=dims).astype(np.float32)
    k = len(dims)
    got = kiln.layer_norm(_t(x, dev), shape, _t(w, dev), _t(b, dev)).numpy()
    np.testing.assert_allclose(got, _layer_norm(x, k, w, b), rtol=RTOL, atol=ATOL)
    got = kiln.layer_norm(_t(x, dev), shape, eps=1e-3).numpy()
    np.testing.assert_allclose(got, _layer_norm(x, k, eps=1e-3), rtol=RTOL, atol=ATOL)
    got = kiln.rms_norm(_t(x, dev), shape, _t(w, dev)).numpy()
    np.testing.assert_allclose(got, _rms_norm(x, k, w), rtol=RTOL, atol=ATOL)
    got = kiln.rms_norm(_t(x, dev), shape, eps=0.5).numpy()
    np.testing.assert_allclose(got, _rms_norm(x, k, eps=0.5), rtol=RTOL, atol=ATOL)


def test_layer_norm_gradients(dev):
    rng = _rng(4)
    x, w, b = rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=5)
    _check_grads(lambda x, w, b: kiln.layer_norm(x, 5, w, b),
                 lambda x, w, b: _layer_norm(x, 1, w, b), [x, w, b], dev)
    _check_grads(lambda x, w: kiln.rms_norm(x, 5, w), lambda x, w: _rms_norm(x, 1, w), [x, w],
                 dev)


def test_norm_bad_input(cpu):
    x = kiln.ones(2, 4, device=cpu)
    with pytest.raises(kiln.shape_error):
        kiln.layer_norm(x, 3)  # not x's trailing dims
    with pytest.raises(kiln.shape_error):
        kiln.layer_norm(x, 4, kiln.ones(3, device=cpu))  # weight not normalized_shape
    with pytest.raises(kiln.shape_error):
        kiln.rms_norm(x, [])
    with pytest.raises(kiln.dtype_error):
        kiln.layer_norm(kiln.ones(2, 4, dtype="int32", device=cpu), 4)
    with pytest.raises(kiln.invalid_argument):
        kiln.layer_norm(x, 4, eps=0.0)
    with pytest.raises(TypeError):
        kiln.layer_norm(x, "4")


# ---- indexing ----
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_embedding_and_index_select(dev, index_dtype):
    rng = _rng(5)
    w = rng.normal(size=(7, 3)).astype(np.float32)
    ids = rng.integers(0, 7, size=(2, 4)).astype(index_dtype)
    np.testing.assert_array_equal(kiln.embedding(_t(ids, dev), _t(w, dev)).numpy(), w[ids])
    x = rng.normal(size=(3, 5, 2)).astype(np.float32)
    idx = np.array([4, 0, 4, 2], dtype=index_dtype)
    for dim in (1, -2):
        np.testing.assert_array_equal(kiln.index_select(_t(x, dev), dim, _t(idx, dev)).numpy(),
                                      np.take(x, idx, axis=dim))
    np.testing.assert_array_equal(_t(x, dev).index_select(0, _t(idx[:2] % 3, dev)).numpy(),
                                  x[idx[:2] % 3])


def test_embedding_gradient_sums_repeated_rows(dev):
    rng = _rng(6)
    w = rng.normal(size=(5, 3)).astype(np.float32)
    ids = np.array([[1, 3, 1], [4, 1, 0]])
    g = rng.normal(size=(2, 3, 3)).astype(np.float32)
    tw = _t(w, dev, requires_grad=True)
    (kiln.embedding(_t(ids, dev), tw) * _t(g, dev)).sum().backward()
    want = np.zeros_like(w)
    np.add.at(want, ids.reshape(-1), g.reshape(-1, 3))
    np.testing.assert_allclose(tw.grad.numpy(), want, rtol=1e-6, atol=1e-6)


def test_gather_and_scatter_add(dev):
    rng = _rng(7)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    index = rng.integers(0, 4, size=(3, 2))
    want = np.take_along_axis(x, index, axis=1)
    np.testing.assert_array_equal(kiln.gather(_t(x, dev), 1, _t(index, dev)).numpy(), want)
    np.testing.assert_array_equal(_t(x, dev).gather(-1, _t(index, dev)).numpy(), want)
    src = rng.normal(size=(3, 2)).astype(np.float32)
    want = x.copy()
    rows = np.repeat(np.arange(3)[:, None], 2, axis=1)
    np.add.at(want, (rows, index), src)  # duplicates summed
    got = kiln.scatter_add(_t(x, dev), 1, _t(index, dev), _t(src, dev)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got = _t(x, dev).scatter_add(1, _t(index, dev), _t(src, dev)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = kiln.scatter_add(_t(ints, dev), 0, _t([[1, 0, 1]], dev),
                           _t(np.array([[10, 20, 30]], dtype=np.int32), dev))
    np.testing.assert_array_equal(got.numpy(), [[0, 21, 2], [13, 4, 35]])


def test_gather_gradient(dev):
    index = np.array([[0, 2, 2], [1, 1, 0]])
    _check_grads(lambda x: kiln.gather(x, 1, _t(index, dev)),
                 lambda x: np.take_along_axis(x, index, axis=1),
                 [_rng(8).normal(size=(2, 3))], dev)


def test_masked_fill_tril_triu(dev):
    rng = _rng(10)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    mask = rng.random(size=(3, 4)) < 0.5  # broadcast over the batch
    got = kiln.masked_fill(_t(x, dev), _t(mask, dev), -np.inf).numpy()
    np.testing.assert_array_equal(got, np.where(mask, -np.inf, x))
    got = _t(x, dev).masked_fill(_t(mask, dev), np.float32(2.5))  # a NumPy scalar
    assert got.dtype == kiln.float32
    np.testing.assert_array_equal(got.numpy(), np.where(mask, np.float32(2.5), x))
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = kiln.masked_fill(_t(ints, dev), _t(mask, dev), -7)
    assert got.dtype == kiln.int32
    np.testing.assert_array_equal(got.numpy(), np.where(mask, -7, ints))
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(kiln.tril(_t(x, dev), k).numpy(), np.tril(x, k))
        np.testing.assert_array_equal(_t(x, dev).triu(diagonal=k).numpy(), np.triu(x, k))
    causal = kiln.triu(kiln.ones(4, 4, dtype="bool", device=dev), 1)
    assert causal.dtype == kiln.bool
    np.testing.assert_array_equal(causal.numpy(), np.triu(np.ones((4, 4), dtype=bool), 1))


def test_cat_stack_split(dev):
    rng = _rng(11)
    a, b = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(2, 5)).astype(np.float32)
    np.testing.assert_array_equal(kiln.cat([_t(a, dev), _t(b, dev)], 1).numpy(),
                                  np.concatenate([a, b], 1))
    np.testing.assert_array_equal(kiln.cat((_t(a, dev), _t(a, dev)), dim=-2).numpy(),
                                  np.concatenate([a, a], 0))
    np.testing.assert_array_equal(kiln.stack([_t(a, dev), _t(a * 2, dev)], 1).numpy(),
                                  np.stack([a, a * 2], 1))
    parts = kiln.split(_t(b, dev), 2, 1)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(2, 2), (2, 2), (2, 1)]
    for p, want in zip(parts, np.split(b, [2, 4], axis=1)):
        np.testing.assert_array_equal(p.numpy(), want)
    parts = _t(b, dev).split([1, 4], dim=-1)
    np.testing.assert_array_equal(parts[1].numpy(), b[:, 1:])


def test_cat_and_split_gradients(dev):
    _check_grads(lambda a, b: kiln.cat([a, b], 1) * kiln.cat([b, a], 1),
                 lambda a, b: np.concatenate([a, b], 1) * np.concatenate([b, a], 1),
                 [_rng(12).normal(size=(2, 2)), _rng(13).normal(size=(2, 2))], dev)
    _check_grads(lambda x: kiln.split(x, [1, 2], 1)[1] * 3, lambda x: x[:, 1:] * 3,
                 [_rng(14).normal(size=(2, 3))], dev)


def test_indexing_bad_input(cpu):
    x = kiln.ones(3, 4, device=cpu)
    w = kiln.ones(5, 2, device=cpu)
    with pytest.raises(kiln.invalid_argument, match="5"):
        kiln.embedding(_t([[1, 5]], cpu), w).numpy()  # out of range
    with pytest.raises(kiln.invalid_argument):
        kiln.index_select(x, 0, _t([-1], cpu)).numpy()
    with pytest.raises(kiln.invalid_argument):
        kiln.gather(x, 1, _t([[0], [4], [1]], cpu)).numpy()
    with pytest.raises(kiln.dtype_error):
        kiln.embedding(_t([1.0, 2.0], cpu), w)  # float indices
    with pytest.raises(kiln.dtype_error):
        kiln.gather(x, 1, _t([[0], [1], [1]], cpu).to(kiln.int16))
    with pytest.raises(kiln.shape_error):
        kiln.gather(x, 1, _t([0, 1], cpu))  # not x's rank
    with pytest.raises(kiln.axis_error):
        kiln.index_select(x, 2, _t([0], cpu))
    with pytest.raises(kiln.dtype_error):
        kiln.masked_fill(x, kiln.ones(3, 4, device=cpu), 0.0)  # mask not bool
    with pytest.raises(kiln.shape_error):
        kiln.masked_fill(x, kiln.ones(2, dtype="bool", device=cpu), 0.0)
    with pytest.raises(TypeError, match="number"):
        kiln.masked_fill(x, kiln.ones(4, dtype="bool", device=cpu), "zero")
    with pytest.raises(kiln.dtype_error):
        kiln.cat([x, x.to(kiln.float64)])
    with pytest.raises(kiln.shape_error):
        kiln.cat([x, kiln.ones(3, 2, device=cpu)], 0)
    with pytest.raises(kiln.shape_error):
        kiln.stack([x, kiln.ones(3, 2, device=cpu)])
    with pytest.raises(kiln.shape_error):
        kiln.split(x, [1, 2], 1)  # sizes do not sum to 4


# ---- attention ----
@pytest.mark.parametrize("variant", ["plain", "causal", "bool_mask", "additive_mask", "scale"])
def test_sdpa_matches_numpy(dev, variant):
    rng = _rng(15)
    q = rng.normal(size=(2, 2, 3, 4)).astype(np.float32)
    k = rng.normal(size=(2, 1, 5, 4)).astype(np.float32)  # heads broadcast
    v = rng.normal(size=(2, 1, 5, 6)).astype(np.float32)
    mask, kw = None, {}
    if variant == "causal":
        k, v = k[:, :, :3], v[:, :, :3]
        kw["is_causal"] = True
    elif variant == "bool_mask":
        mask = rng.random(size=(3, 5)) < 0.7
        mask[:, 0] = True  # no row without a key
    elif variant == "additive_mask":
        mask = rng.normal(size=(1, 3, 5)).astype(np.float32)
    elif variant == "scale":
        kw["scale"] = 0.3
    args = [_t(a, dev) for a in (q, k, v)]
    got = kiln.scaled_dot_product_attention(
        *args, attn_mask=None if mask is None else _t(mask, dev), **kw).numpy()
    want = _sdpa(q.astype(np.float64), k, v, mask, kw.get("is_causal", False), kw.get("scale"))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_sdpa_gradients(dev):
    rng = _rng(16)
    q, k, v = (rng.normal(size=(1, 2, 3, 4)) for _ in range(3))
    _check_grads(lambda q, k, v: kiln.scaled_dot_product_attention(q, k, v, is_causal=True),
                 lambda q, k, v: _sdpa(q, k, v, causal=True), [q, k, v], dev)


def test_sdpa_bad_input(cpu):
    q = kiln.ones(1, 3, 4, device=cpu)
    with pytest.raises(kiln.invalid_argument):
        kiln.scaled_dot_product_attention(q, q, q, kiln.ones(3, 3, dtype="bool", device=cpu),
                                          is_causal=True)
    with pytest.raises(kiln.shape_error):
        kiln.scaled_dot_product_attention(q, kiln.ones(1, 3, 5, device=cpu), q)  # E differs
    with pytest.raises(kiln.shape_error):
        kiln.scaled_dot_product_attention(q, q, q, kiln.ones(2, 2, dtype="bool", device=cpu))
    with pytest.raises(kiln.dtype_error):
        kiln.scaled_dot_product_attention(q, q.to(kiln.float64), q)
    with pytest.raises(kiln.dtype_error):
        kiln.scaled_dot_product_attention(q, q, q, kiln.ones(3, 3, dtype="int32", device=cpu))
    with pytest.raises(kiln.unsupported, match="dropout"):
        kiln.scaled_dot_product_attention(q, q, q, None, 0.1)


def test_bfloat16_ops(dev):
    """16-bit storage, f32 math: on CUDA the linear is one cuBLASLt GEMM with its epilogue."""
    rng = _rng(25)

    def bf16(shape):
        t = kiln.tensor(rng.normal(size=shape).astype(np.float32), dtype="bfloat16", device=dev)
        return t, t.to(kiln.float32).numpy().astype(np.float64)  # the rounded values

    (x, nx), (w, nw), (b, nb) = bf16((4, 8)), bf16((6, 8)), bf16(6)
    y = kiln.linear(x, w, b, "gelu_tanh")
    assert y.dtype == kiln.bfloat16
    if dev.backend == "cuda":
        assert kiln.last_linear_path() == "epilogue"
    np.testing.assert_allclose(y.to(kiln.float32).numpy(), _linear(nx, nw, nb, "gelu_tanh"),
                               rtol=2e-2, atol=2e-2)
    got = kiln.layer_norm(x, 8).to(kiln.float32).numpy()
    np.testing.assert_allclose(got, _layer_norm(nx, 1), rtol=2e-2, atol=2e-2)
    (q, nq), (k, nk), (v, nv) = bf16((2, 3, 4)), bf16((2, 3, 4)), bf16((2, 3, 4))
    got = kiln.scaled_dot_product_attention(q, k, v, is_causal=True).to(kiln.float32).numpy()
    np.testing.assert_allclose(got, _sdpa(nq, nk, nv, causal=True), rtol=2e-2, atol=2e-2)

# ---- nn modules ----
def test_norm_and_embedding_modules(dev):
    rng = _rng(17)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    ln = kiln.nn.layer_norm(4, device=dev)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert ln.normalized_shape == (4,) and ln.eps == 1e-5
    ln.load_state_dict({"weight": _t(np.arange(4, dtype=np.float32), dev),
                        "bias": _t(np.ones(4, dtype=np.float32), dev)})
    np.testing.assert_allclose(ln(_t(x, dev)).numpy(), _layer_norm(x, 1, np.arange(4), 1),
                               rtol=RTOL, atol=ATOL)
    plain = kiln.nn.layer_norm([3, 4], elementwise_affine=False, device=dev)
    assert plain.weight is None and plain.bias is None and plain.parameter_count() == 0
    assert kiln.nn.layer_norm(4, bias=False, device=dev).bias is None
    rn = kiln.nn.rms_norm(4, eps=1e-3, device=dev)
    assert rn.eps == 1e-3 and kiln.nn.rms_norm(4, device=dev).eps is None
    np.testing.assert_allclose(rn(_t(x, dev)).numpy(), _rms_norm(x, 1, eps=1e-3),
                               rtol=RTOL, atol=ATOL)
    emb = kiln.nn.embedding(6, 4, seed=3, device=dev)
    assert emb.weight.shape == (6, 4) and list(emb.state_dict()) == ["weight"]
    ids = np.array([[5, 0], [2, 2]])
    np.testing.assert_array_equal(emb(_t(ids, dev)).numpy(), emb.weight.numpy()[ids])
    model = kiln.nn.sequential(emb, kiln.nn.layer_norm(4, device=dev))
    assert model(_t(ids, dev)).shape == (2, 2, 4)


def _mha_reference(state, x_q, x_kv, heads, causal):
    e = x_q.shape[-1]
    w, b = state["in_proj_weight"], state.get("in_proj_bias", np.zeros(3 * e))
    q = x_q @ w[:e].T + b[:e]
    k = x_kv @ w[e:2 * e].T + b[e:2 * e]
    v = x_kv @ w[2 * e:].T + b[2 * e:]

    def heads_of(t):
        return t.reshape(t.shape[0], t.shape[1], heads, e // heads).transpose(0, 2, 1, 3)

    y = _sdpa(heads_of(q), heads_of(k), heads_of(v), causal=causal)
    y = y.transpose(0, 2, 1, 3).reshape(x_q.shape)
    return y @ state["out_proj.weight"].T + state.get("out_proj.bias", 0)


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_module(dev, causal):
    mha = kiln.nn.multi_head_attention(8, 2, causal=causal, seed=5, device=dev)
    assert mha.embed_dim == 8 and mha.num_heads == 2 and mha.causal == causal
    state = {k: v.numpy().astype(np.float64) for k, v in mha.state_dict().items()}
    assert list(state) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    assert mha.in_proj_weight.shape == (24, 8) and mha.out_proj.weight.shape == (8, 8)
    rng = _rng(18)
    x = rng.normal(size=(2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(mha(_t(x, dev)).numpy(),
                               _mha_reference(state, x, x, 2, causal), rtol=1e-3, atol=1e-4)
    kv = rng.normal(size=(2, 5, 8)).astype(np.float32)
    got = kiln.nn.multi_head_attention(8, 2, device=dev)
    got.load_state_dict({k: _t(v.astype(np.float32), dev) for k, v in state.items()})
    np.testing.assert_allclose(got.attend(_t(x, dev), _t(kv, dev), _t(kv, dev)).numpy(),
                               _mha_reference(state, x, kv, 2, False), rtol=1e-3, atol=1e-4)
    no_bias = kiln.nn.multi_head_attention(8, 2, bias=False, device=dev)
    assert no_bias.in_proj_bias is None and no_bias.parameter_count() == 24 * 8 + 8 * 8


def test_module_bad_input(cpu):
    with pytest.raises(kiln.invalid_argument):
        kiln.nn.multi_head_attention(8, 3, device=cpu)  # not a multiple of the heads
    emb = kiln.nn.embedding(4, 2, device=cpu)
    with pytest.raises(kiln.invalid_argument):
        emb(_t([4], cpu)).numpy()
    with pytest.raises(kiln.shape_error):
        kiln.nn.layer_norm(4, device=cpu)(kiln.ones(2, 3, device=cpu))
    with pytest.raises(AttributeError):
        kiln.nn.layer_norm(4, device=cpu).weight = kiln.ones(4, device=cpu)  # read-only


# ---- optim additions ----
def test_decay_split_and_adamw_without_decay(dev):
    lin = kiln.nn.linear(3, 2, device=dev, seed=1)
    ln = kiln.nn.layer_norm(2, device=dev)
    params = lin.parameters() + ln.parameters()
    exempt = kiln.optim.decay_split(params)
    assert [p.shape for p in exempt] == [(2,), (2,), (2,)]
    before = [p.numpy() for p in params]
    opt = kiln.optim.adamw(params, lr=0.1, weight_decay=0.5, no_weight_decay=exempt)
    opt.zero_grad()  # zero gradients: only the decoupled decay moves a parameter
    opt.step()
    np.testing.assert_allclose(params[0].numpy(), before[0] * (1 - 0.1 * 0.5), rtol=1e-6)
    for p, b in zip(params[1:], before[1:]):
        np.testing.assert_array_equal(p.numpy(), b)
    stranger = kiln.ones(2, device=dev, requires_grad=True)
    with pytest.raises(kiln.invalid_argument):
        kiln.optim.adamw(params, no_weight_decay=[stranger])


def test_warmup_cosine_lr(cpu):
    p = kiln.ones(2, device=cpu, requires_grad=True)
    opt = kiln.optim.adamw([p], lr=1.0)
    sched = kiln.optim.warmup_cosine_lr(opt, 3, 10, eta_min=0.1)

    def want(s):
        if s < 3:
            return (s + 1) / 3
        if s >= 10:
            return 0.1
        return 0.1 + 0.9 * (1 + math.cos(math.pi * (s - 3) / 7)) / 2

    assert sched.last_lr == pytest.approx(want(0)) and opt.lr == pytest.approx(want(0))
    for s in range(1, 13):
        sched.step()
        assert sched.last_step == s
        assert sched.last_lr == pytest.approx(want(s)) and opt.lr == pytest.approx(want(s))
    with pytest.raises(kiln.invalid_argument):
        kiln.optim.warmup_cosine_lr(opt, 5, 5)


@pytest.mark.parametrize("max_norm", [100.0, 1.0])
def test_clip_grad_norm(dev, max_norm):
    rng = _rng(19)
    a, b = rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    pa, pb = kiln.zeros(3, 2, device=dev, requires_grad=True), kiln.zeros(4, device=dev,
                                                                          requires_grad=True)
    opt = kiln.optim.sgd([pa, pb], lr=0.1)
    ((pa * _t(a, dev)).sum() + (pb * _t(b, dev)).sum()).backward()  # grads a and b
    norm = kiln.optim.clip_grad_norm_(opt, max_norm)
    total = math.sqrt((a.astype(np.float64) ** 2).sum() + (b.astype(np.float64) ** 2).sum())
    assert norm.shape == () and norm.dtype == kiln.float32
    assert norm.item() == pytest.approx(total, rel=1e-5)
    factor = min(1.0, max_norm / (total + 1e-6))
    np.testing.assert_allclose(pa.grad.numpy(), a * factor, rtol=1e-5)
    np.testing.assert_allclose(pb.grad.numpy(), b * factor, rtol=1e-5)
    with pytest.raises(kiln.invalid_argument):
        kiln.optim.clip_grad_norm_(opt, 0.0)


class _tiny_gpt(kiln.nn.module):
    """One pre-norm attention block over token embeddings: every new module in one model."""

    def __init__(self, dev, vocab=8, dim=16):
        super().__init__()
        self.tok = kiln.nn.embedding(vocab, dim, seed=1, device=dev)
        self.ln = kiln.nn.layer_norm(dim, device=dev)
        self.att = kiln.nn.multi_head_attention(dim, 2, causal=True, seed=2, device=dev)
        self.norm = kiln.nn.rms_norm(dim, device=dev)
        self.head_w = self.register_parameter("head_w", kiln.randn([vocab, dim], seed=3,
                                                                   device=dev) * 0.1)

    def forward(self, ids):
        h = self.tok(ids)
        h = h + self.att(self.ln(h))
        return kiln.linear(self.norm(h), self.head_w, activation="none")


def test_tiny_gpt_block_trains(dev):
    model = _tiny_gpt(dev)
    params = model.parameters()
    assert len(params) == 1 + 2 + 4 + 1 + 1
    opt = kiln.optim.adamw(params, lr=3e-2, no_weight_decay=kiln.optim.decay_split(params))
    sched = kiln.optim.warmup_cosine_lr(opt, 3, 40)
    seq = np.tile(np.arange(8), 5)  # predict the next token of 0 1 2 ... 7 0 1 ...
    x = _t(np.stack([seq[i:i + 8] for i in range(4)]), dev)
    y = _t(np.stack([seq[i + 1:i + 9] for i in range(4)]).reshape(-1), dev)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = kiln.nn.cross_entropy(model(x).reshape(32, 8), y)
        loss.backward()
        kiln.optim.clip_grad_norm_(opt, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses

# ---- against PyTorch (on the CPU; skipped where torch is not installed) ----
def _needs_f(name):
    if not _torch_has(name):
        pytest.skip(f"torch {torch.__version__} has no torch.nn.functional.{name}")


@needs_torch
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "gelu_tanh"])
def test_linear_against_torch(dev, activation):
    rng = _rng(20)
    x, w, b = rng.normal(size=(2, 3, 5)), rng.normal(size=(4, 5)), rng.normal(size=4)

    def torch_f(x, w, b):
        y = F.linear(x, w, b)
        if activation == "relu":
            return F.relu(y)
        if activation == "none":
            return y
        return F.gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")

    want = torch_f(*(torch.tensor(a) for a in (x, w, b))).numpy()
    got = kiln.linear(*(_t(a.astype(np.float32), dev) for a in (x, w, b)), activation).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    _check_torch_grads(lambda x, w, b: kiln.linear(x, w, b, activation), torch_f, [x, w, b], dev)


@needs_torch
def test_norms_against_torch(dev):
    rng = _rng(21)
    x, w, b = rng.normal(size=(2, 3, 6)) * 2 + 1, rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
    want = F.layer_norm(torch.tensor(x), [3, 6], torch.tensor(w), torch.tensor(b)).numpy()
    got = kiln.layer_norm(_t(x.astype(np.float32), dev), (3, 6),
                          *(_t(a.astype(np.float32), dev) for a in (w, b))).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    _check_torch_grads(lambda x, w, b: kiln.layer_norm(x, [3, 6], w, b),
                       lambda x, w, b: F.layer_norm(x, [3, 6], w, b), [x, w, b], dev)
    _needs_f("rms_norm")
    eps = float(np.finfo(np.float32).eps)  # Kiln's default for f32 (kiln::rms_norm's header)
    want = F.rms_norm(torch.tensor(x), [6], torch.tensor(w[0]), eps=eps).numpy()
    got = kiln.rms_norm(_t(x.astype(np.float32), dev), 6, _t(w[0].astype(np.float32), dev))
    np.testing.assert_allclose(got.numpy(), want, rtol=RTOL, atol=ATOL)
    _check_torch_grads(lambda x, w: kiln.rms_norm(x, 6, w),
                       lambda x, w: F.rms_norm(x, [6], w, eps=eps), [x, w[0]], dev)


@needs_torch
def test_indexing_against_torch(dev):
    rng = _rng(22)
    w = rng.normal(size=(7, 3))
    ids = rng.integers(0, 7, size=(2, 5))
    _check_torch_grads(lambda w: kiln.embedding(_t(ids, dev), w),
                       lambda w: F.embedding(torch.tensor(ids), w), [w], dev)
    x, src = rng.normal(size=(3, 4)), rng.normal(size=(3, 2))
    index = rng.integers(0, 4, size=(3, 2))
    _check_torch_grads(lambda x: kiln.gather(x, 1, _t(index, dev)),
                       lambda x: torch.gather(x, 1, torch.tensor(index)), [x], dev)
    _check_torch_grads(lambda x, s: kiln.scatter_add(x, 1, _t(index, dev), s),
                       lambda x, s: x.scatter_add(1, torch.tensor(index), s), [x, src], dev)
    mask = rng.random(size=(3, 4)) < 0.5
    _check_torch_grads(lambda x: kiln.masked_fill(x, _t(mask, dev), 2.0).triu(-1),
                       lambda x: x.masked_fill(torch.tensor(mask), 2.0).triu(-1), [x], dev)
    _check_torch_grads(lambda a, b: kiln.stack(kiln.split(kiln.cat([a, b], 1), 3, 1)),
                       lambda a, b: torch.stack(torch.split(torch.cat([a, b], 1), 3, 1)),
                       [x, src], dev)


@needs_torch
@pytest.mark.parametrize("variant", ["causal", "bool_mask", "additive_mask", "scale"])
def test_sdpa_against_torch(dev, variant):
    _needs_f("scaled_dot_product_attention")
    rng = _rng(23)
    q, k, v = rng.normal(size=(2, 2, 3, 4)), rng.normal(size=(2, 2, 3, 4)), \
        rng.normal(size=(2, 2, 3, 5))
    kw = {"is_causal": True} if variant == "causal" else {"scale": 0.3} \
        if variant == "scale" else {}
    mask = None
    if variant == "bool_mask":
        mask = rng.random(size=(3, 3)) < 0.6
        mask[:, 0] = True
    elif variant == "additive_mask":
        mask = rng.normal(size=(3, 3))
    tmask = None if mask is None else torch.tensor(mask)
    kmask = None if mask is None else _t(mask if mask.dtype == bool else mask.astype(np.float32),
                                         dev)

    def kiln_f(q, k, v):
        return kiln.scaled_dot_product_attention(q, k, v, kmask, **kw)

    def torch_f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, tmask, **kw)

    want = torch_f(*(torch.tensor(a) for a in (q, k, v))).numpy()
    got = kiln_f(*(_t(a.astype(np.float32), dev) for a in (q, k, v))).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    _check_torch_grads(kiln_f, torch_f, [q, k, v], dev)


@needs_torch
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_against_torch(dev, causal):
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    mha = kiln.nn.multi_head_attention(8, 2, causal=causal, device=dev)
    mha.load_state_dict({k: _t(v.detach().numpy().astype(np.float32), dev)
                         for k, v in ref.state_dict().items()})
    x = _rng(24).normal(size=(2, 4, 8))
    tx = torch.tensor(x)
    mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1) if causal else None
    want = ref(tx, tx, tx, attn_mask=mask, need_weights=False)[0].detach().numpy()
    np.testing.assert_allclose(mha(_t(x.astype(np.float32), dev)).numpy(), want, rtol=1e-3,
                               atol=1e-4)


# ---- topk and multinomial (kiln/tensor/sampling.hpp) ----
def _np_topk(x, k, dim, largest):
    """Positions of the k best along dim: NaN largest, ties by lower index (a stable sort)."""
    x = np.moveaxis(x, dim, -1)
    key = np.where(np.isnan(x), np.inf, x)
    nan = np.isnan(x)
    # Stable sort by (NaN first/last, value): lexsort's last key is the primary one.
    order = np.stack([np.lexsort((-r if largest else r, ~n if largest else n))
                      for r, n in zip(key.reshape(-1, x.shape[-1]), nan.reshape(-1, x.shape[-1]))])
    idx = order[:, :k].reshape(x.shape[:-1] + (k,))
    return np.moveaxis(idx, -1, dim)


@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_numpy(dev, dim, largest):
    rng = _rng(40)
    x = rng.integers(-8, 8, size=(6, 2000)).astype(np.float32)  # duplicates
    x[rng.random(size=x.shape) < 0.01] = np.nan
    for k in [1, 6, 64]:
        k = min(k, x.shape[dim])
        values, indices = kiln.topk(_t(x, dev), k, dim=dim, largest=largest)
        want = _np_topk(x, k, dim, largest)
        np.testing.assert_array_equal(indices.numpy(), want)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, axis=dim))
    v, i = _t(x, dev).topk(3)
    assert i.dtype == kiln.int64 and v.shape == (6, 3)


def test_topk_gradient_and_errors(dev):
    x = _rng(41).normal(size=(3, 9))
    _check_grads(lambda t: kiln.topk(t, 4, 1)[0],
                 lambda a: np.take_along_axis(a, _np_topk(a, 4, 1, True), axis=1), [x], dev)
    v, i = kiln.topk(_t(x, dev), 0)
    assert v.shape == (3, 0) and i.shape == (3, 0)
    with pytest.raises(kiln.invalid_argument, match="k = 10"):
        kiln.topk(_t(x, dev), 10)


def test_multinomial(dev):
    p = np.array([[0.1, 0.0, 0.2, 0.3, 0.4], [1.0, 1.0, 0.0, 0.0, 2.0]], dtype=np.float32)
    a = kiln.multinomial(_t(p, dev), 3, seed=7)  # torch's default: no replacement
    assert a.dtype == kiln.int64 and a.shape == (2, 3)
    got = a.numpy()
    np.testing.assert_array_equal(got, kiln.multinomial(_t(p, dev), 3, seed=7).numpy())
    for row, w in zip(got, p):
        assert len(set(row)) == 3 and all(w[row] > 0)
    draws = kiln.multinomial(_t(p[0], dev), 20000, replacement=True, seed=3).numpy()
    counts = np.bincount(draws, minlength=5)
    assert counts[1] == 0
    expected = 20000 * p[0] / p[0].sum()
    nz = expected > 0
    assert (((counts - expected)[nz] ** 2) / expected[nz]).sum() < 40
    with pytest.raises(kiln.invalid_argument, match="no positive weight"):
        kiln.multinomial(_t(np.zeros((1, 3), np.float32), dev), 1)
    with pytest.raises(kiln.invalid_argument):
        kiln.multinomial(_t(p, dev), 4)  # the second row has 3 positive weights


@needs_torch
def test_topk_multinomial_against_torch(dev):
    x = _rng(42).normal(size=(4, 300)).astype(np.float32)
    v, i = kiln.topk(_t(x, dev), 5, largest=False)
    tv, ti = torch.topk(torch.tensor(x), 5, largest=False)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    _check_torch_grads(lambda t: kiln.topk(t, 3, 0)[0], lambda t: torch.topk(t, 3, 0)[0], [x[:, :7]],
                       dev)
