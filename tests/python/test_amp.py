"""Mixed precision from Python: kiln.autocast (the C++ kiln::autocast scope) and
kiln.optim.grad_scaler (kiln::optim::grad_scaler), beside torch.autocast and
torch.amp.GradScaler where PyTorch is installed."""

import threading

import numpy as np
import pytest

import kiln

HALF = [kiln.bfloat16, kiln.float16]


def _inputs(dev, seed=0):
    rng = np.random.default_rng(seed)
    x = kiln.tensor(rng.normal(size=(8, 4)).astype(np.float32), device=dev)
    w = kiln.tensor(rng.normal(size=(3, 4)).astype(np.float32), device=dev)
    img = kiln.tensor(rng.normal(size=(2, 1, 6, 6)).astype(np.float32), device=dev)
    labels = kiln.tensor(rng.integers(0, 3, 8), device=dev)
    return x, w, img, labels


# ---- autocast ----

@pytest.mark.parametrize("half", HALF, ids=str)
def test_autocast_runs_products_in_16_bits_and_losses_in_f32(dev, half):
    x, w, img, labels = _inputs(dev)
    kiln.nn.manual_seed(1)
    lin = kiln.nn.linear(4, 3, device=dev)
    conv = kiln.nn.conv2d(1, 2, 3, device=dev)
    with kiln.autocast(half):
        assert kiln.is_autocast_enabled() and kiln.get_autocast_dtype() == half
        product = x @ w.T
        assert product.dtype == half
        assert kiln.matmul(x, w.T).dtype == half
        assert kiln.linear(x, w).dtype == half
        logits = lin(x)
        assert logits.dtype == half
        feature = conv(img)
        assert feature.dtype == half
        assert kiln.nn.max_pool2d(2)(feature).dtype == half  # pooling keeps the type
        assert kiln.nn.cross_entropy(logits, labels).dtype == kiln.float32
        assert kiln.nn.mse_loss(logits, kiln.zeros(8, 3, device=dev)).dtype == kiln.float32
        assert (x + 1).dtype == kiln.float32  # elementwise work is not cast
        assert lin.weight.dtype == kiln.float32  # parameters stay f32
    assert not kiln.is_autocast_enabled() and kiln.get_autocast_dtype() is None
    assert (x @ w.T).dtype == kiln.float32
    # The 16-bit product is the f32 one to the 16-bit type's precision.
    expected = x.numpy() @ w.numpy().T
    np.testing.assert_allclose(product.to(kiln.float32).numpy(), expected, rtol=2e-2, atol=2e-2)


def test_autocast_gradients_reach_f32_parameters(dev):
    x, _, _, labels = _inputs(dev)
    kiln.nn.manual_seed(2)
    lin = kiln.nn.linear(4, 3, device=dev)
    with kiln.autocast(kiln.bfloat16):
        loss = kiln.nn.cross_entropy(lin(x), labels)
    loss.backward()
    assert lin.weight.grad.dtype == kiln.float32
    assert np.isfinite(lin.weight.grad.numpy()).all() and lin.weight.grad.numpy().any()


def test_autocast_nests_disables_and_reenters(cpu):
    a = kiln.autocast(kiln.float16)
    with kiln.autocast(kiln.bfloat16):
        with a:
            assert kiln.get_autocast_dtype() == kiln.float16
            with kiln.autocast(enabled=False):
                assert not kiln.is_autocast_enabled()
                assert (kiln.ones(2, 2, device=cpu) @ kiln.ones(2, 2, device=cpu)).dtype == \
                    kiln.float32
            with a:  # the same object again, while entered
                assert kiln.get_autocast_dtype() == kiln.float16
            assert kiln.get_autocast_dtype() == kiln.float16
        assert kiln.get_autocast_dtype() == kiln.bfloat16
    assert kiln.get_autocast_dtype() is None
    with a:  # and once more after its exit
        assert kiln.get_autocast_dtype() == kiln.float16
    assert kiln.get_autocast_dtype() is None
    assert (a.dtype, a.enabled, a.device) == (kiln.float16, True, None)
    assert "float16" in repr(a)


def test_autocast_is_restored_by_an_exception():
    with pytest.raises(ZeroDivisionError):
        with kiln.autocast(kiln.bfloat16):
            1 / 0
    assert kiln.get_autocast_dtype() is None


def test_autocast_decorates_a_function(cpu):
    @kiln.autocast(kiln.float16)
    def product(a, b):
        """docstring kept"""
        return a @ b

    ones = kiln.ones(2, 2, device=cpu)
    assert product(ones, ones).dtype == kiln.float16
    assert product.__doc__ == "docstring kept" and product.__name__ == "product"
    assert kiln.get_autocast_dtype() is None


def test_autocast_is_per_thread():
    shared = kiln.autocast(kiln.float16)
    seen = {}
    inside = threading.Event()
    done = threading.Event()

    def other():
        seen["before"] = kiln.get_autocast_dtype()  # the main thread is inside bf16
        with shared:
            seen["own"] = kiln.get_autocast_dtype()
            inside.set()
            done.wait(10)
        seen["after"] = kiln.get_autocast_dtype()

    with kiln.autocast(kiln.bfloat16):
        t = threading.Thread(target=other)
        t.start()
        assert inside.wait(10)
        assert kiln.get_autocast_dtype() == kiln.bfloat16  # the thread's block is its own
        with shared:  # the same object, entered on two threads at once
            assert kiln.get_autocast_dtype() == kiln.float16
            done.set()
            t.join(10)
            assert kiln.get_autocast_dtype() == kiln.float16  # its exit there left ours on
        assert kiln.get_autocast_dtype() == kiln.bfloat16
    assert seen == {"before": None, "own": kiln.float16, "after": None}


def test_autocast_refuses_bad_input():
    with pytest.raises(kiln.dtype_error, match="bfloat17"):
        kiln.autocast("bfloat17")
    with pytest.raises(kiln.dtype_error, match="float16 or kiln.bfloat16, not kiln.float32"):
        kiln.autocast(kiln.float32)
    with pytest.raises(TypeError):  # dtype_error is a TypeError too
        kiln.autocast(kiln.int8)
    with pytest.raises(kiln.invalid_argument, match="not a device"):
        kiln.autocast(device=3)
    with pytest.raises(kiln.error):
        kiln.autocast(device="nodevice:7")
    assert kiln.autocast("f16", device="cpu:0").device == kiln.device("cpu:0")
    with pytest.raises(ValueError, match="not entered"):
        kiln.autocast().__exit__(None, None, None)
    assert kiln.get_autocast_dtype() is None


# ---- grad_scaler ----

def _blobs(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 4)) + (labels[:, None] * 2 - 1) * 1.5
    return x.astype(np.float32), labels.astype(np.int64)


@pytest.mark.parametrize("half", HALF, ids=str)
def test_mixed_precision_training_lowers_the_loss(dev, half):
    kiln.nn.manual_seed(3)
    model = kiln.nn.sequential(kiln.nn.linear(4, 16, device=dev), kiln.nn.relu(),
                               kiln.nn.linear(16, 2, device=dev))
    opt = kiln.optim.adam(model.parameters(), lr=0.05)
    # f16 needs loss scaling; bf16 has f32's range (the scaler off passes through).
    scaler = kiln.optim.grad_scaler(enabled=half == kiln.float16)
    x, y = _blobs(64, 0)
    xt, yt = kiln.tensor(x, device=dev), kiln.tensor(y, device=dev)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        with kiln.autocast(half):
            logits = model(xt)
            loss = kiln.nn.cross_entropy(logits, yt)
        assert logits.dtype == half and loss.dtype == kiln.float32
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.dtype == kiln.float32 for p in model.parameters())
    assert opt.step_count == 20  # no step skipped
    assert scaler.get_scale() == 65536.0
    with kiln.autocast(half):
        accuracy = (model(xt).argmax(1).numpy() == y).mean()
    assert accuracy > 0.9


def _one_layer(dev, init_scale=1024.0, **kw):
    kiln.nn.manual_seed(4)
    lin = kiln.nn.linear(4, 2, device=dev)
    opt = kiln.optim.sgd(lin.parameters(), lr=0.1)
    scaler = kiln.optim.grad_scaler(init_scale=init_scale, **kw)
    x, y = _blobs(64, 1)
    return lin, opt, scaler, kiln.tensor(x, device=dev), kiln.tensor(y, device=dev)


def _backward(lin, opt, scaler, x, y, half=kiln.float16):
    opt.zero_grad()
    with kiln.autocast(half):
        loss = kiln.nn.cross_entropy(lin(x), y)
    scaler.scale(loss).backward()


def test_scaler_skips_a_step_with_an_inf_gradient_and_backs_off(dev):
    lin, opt, scaler, x, y = _one_layer(dev, growth_interval=2)
    _backward(lin, opt, scaler, x, y)
    grad = lin.weight.grad.numpy()
    grad[1, 2] = np.inf  # injected
    lin.weight.grad = kiln.tensor(grad, device=dev)
    before = [p.numpy().copy() for p in lin.parameters()]
    result = scaler.step(opt)
    scaler.update()
    assert not result and scaler.last_step_skipped()
    assert scaler.get_scale() == 512.0
    assert opt.step_count == 0
    for p, b in zip(lin.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)
    # Clean steps: taken, and two in a row (growth_interval) double the scale.
    for expected in (512.0, 1024.0):
        _backward(lin, opt, scaler, x, y)
        result = scaler.step(opt)
        scaler.update()
        assert result and not scaler.last_step_skipped()
        assert scaler.get_scale() == expected
    assert opt.step_count == 2
    assert not (lin.weight.numpy() == before[0]).all()
    # A step_result speaks for its own step only.
    _backward(lin, opt, scaler, x, y)
    scaler.step(opt)
    with pytest.raises(kiln.invalid_argument, match="later step"):
        bool(result)


def test_scaler_skips_while_f16_gradients_overflow(dev):
    # 2^24 times the loss overflows f16's gradients (65504 at most): steps are skipped, the
    # scale halving each time, until they fit.
    lin, opt, scaler, x, y = _one_layer(dev, init_scale=2.0 ** 24)
    before = lin.weight.numpy().copy()
    scales = []
    for _ in range(16):
        _backward(lin, opt, scaler, x, y)
        stepped = bool(scaler.step(opt))
        scaler.update()
        scales.append(scaler.get_scale())
        if stepped:
            break
        np.testing.assert_array_equal(lin.weight.numpy(), before)
    assert stepped and len(scales) > 1
    assert scales == [2.0 ** (23 - i) for i in range(len(scales) - 1)] + [scales[-2]]
    assert opt.step_count == 1
    assert np.isfinite(lin.weight.numpy()).all()


def test_scaler_schedule_and_steps_follow_pytorchs_rules(dev):
    # torch.amp.GradScaler's rules, written out: backoff on inf, growth after growth_interval
    # clean steps in a row (the count restarting after each); clean steps are SGD on the
    # unscaled gradient (a NumPy reference), skipped ones change nothing.
    w0 = np.random.default_rng(5).normal(size=(3, 4)).astype(np.float32)
    data = np.random.default_rng(6).normal(size=(8, 4)).astype(np.float32)
    w = kiln.tensor(w0, device=dev, requires_grad=True)
    opt = kiln.optim.sgd([w], lr=0.1)
    scaler = kiln.optim.grad_scaler(init_scale=1024.0, growth_interval=2)
    x, reference, scales = kiln.tensor(data, device=dev), w0.astype(np.float64), []
    for inject in [False, False, True, False, False, False, True, False]:
        opt.zero_grad()
        scaler.scale((x @ w.T).square().mean()).backward()
        if inject:
            g = w.grad.numpy()
            g[0, 0] = np.inf
            w.grad = kiln.tensor(g, device=dev)
        else:
            y = data @ reference.T
            reference = reference - 0.1 * (2 * y.T @ data / y.size)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        np.testing.assert_allclose(w.numpy(), reference, rtol=1e-4, atol=1e-5)
    assert scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 2048.0, 1024.0, 1024.0]
    assert opt.step_count == 6


def test_scaler_update_backs_off_for_an_overflow_in_any_optimizer(cpu):
    # torch.amp.GradScaler: one scaler, step() per optimizer, one update(): any overflow backs
    # off.
    a = kiln.tensor(np.ones(3, np.float32), device=cpu, requires_grad=True)
    b = kiln.tensor(np.ones(3, np.float32), device=cpu, requires_grad=True)
    opt_a, opt_b = kiln.optim.sgd([a], lr=0.1), kiln.optim.sgd([b], lr=0.1)
    scaler = kiln.optim.grad_scaler(init_scale=8.0)
    scaler.scale((a * a).sum() + (b * b).sum()).backward()
    a.grad = kiln.tensor(np.array([np.inf, 0, 0], np.float32), device=cpu)
    assert not scaler.step(opt_a)
    assert scaler.step(opt_b)
    scaler.update()
    assert (opt_a.step_count, opt_b.step_count) == (0, 1)
    assert scaler.get_scale() == 4.0


def test_scaler_scales_a_list_of_losses(cpu):
    scaler = kiln.optim.grad_scaler(init_scale=8.0)
    a, b = kiln.tensor(1.5, device=cpu), kiln.tensor(2.0, device=cpu)
    assert scaler.scale(a).item() == 12.0
    both = scaler.scale((a, b))
    assert isinstance(both, tuple) and [t.item() for t in both] == [12.0, 16.0]
    assert [t.item() for t in scaler.scale([a])] == [12.0]


def test_disabled_scaler_passes_through(cpu):
    lin, opt, scaler, x, y = _one_layer(cpu, enabled=False)
    assert not scaler.is_enabled()
    loss = kiln.nn.cross_entropy(lin(x), y)
    assert scaler.scale(loss).item() == loss.item()
    scaler.scale(loss).backward()
    assert scaler.step(opt)
    scaler.update()
    assert opt.step_count == 1
    assert scaler.state_dict() == {}
    with pytest.raises(kiln.invalid_argument, match="disabled"):
        scaler.load_state_dict({"scale": 2.0})


def test_scaler_state_dict_round_trips(cpu):
    lin, opt, scaler, x, y = _one_layer(cpu, growth_interval=7)
    _backward(lin, opt, scaler, x, y)
    lin.bias.grad = kiln.tensor(np.array([np.nan, 0.0], dtype=np.float32), device=cpu)
    scaler.step(opt)
    scaler.update()
    state = scaler.state_dict()
    assert state == {"scale": 512.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                     "growth_interval": 7}
    other = kiln.optim.grad_scaler()
    other.load_state_dict(dict(state, _growth_tracker=3))  # torch's key: accepted
    assert other.get_scale() == 512.0 and other.growth_interval == 7
    _backward(lin, opt, other, x, y)
    assert other.step(opt)
    with pytest.raises(kiln.invalid_argument, match="unexpected key 'scales'"):
        other.load_state_dict({"scales": 2.0})
    with pytest.raises(kiln.invalid_argument, match="no 'scale'"):
        other.load_state_dict({})
    with pytest.raises(kiln.invalid_argument, match="growth_factor > 1"):
        other.load_state_dict({"scale": 2.0, "growth_factor": 0.5})
    assert other.get_scale() == 512.0  # unchanged by the refused loads


def test_scaler_refuses_bad_input(cpu):
    lin, opt, scaler, x, y = _one_layer(cpu)
    with pytest.raises(TypeError, match="expects a kiln.optim optimizer .* got list"):
        scaler.step(lin.parameters())
    with pytest.raises(TypeError, match="got sequential"):
        scaler.step(kiln.nn.sequential(lin))
    with pytest.raises(TypeError, match="got str"):
        scaler.scale("loss")
    with pytest.raises(TypeError, match="kiln.tensor items, got float"):
        scaler.scale([kiln.tensor(1.0, device=cpu), 2.0])
    for bad in ({"init_scale": 0.0}, {"init_scale": 1e39}, {"growth_factor": 1.0},
                {"backoff_factor": 1.0}, {"growth_interval": 0}):
        with pytest.raises(kiln.invalid_argument, match="init_scale > 0"):
            kiln.optim.grad_scaler(**bad)
    with pytest.raises(ValueError):  # kiln.invalid_argument is a ValueError
        kiln.optim.grad_scaler(backoff_factor=0.0)


def test_scaler_refuses_an_optimizer_on_another_device(cpu):
    others = [d for d in kiln.devices() if d != cpu]
    if not others:
        pytest.skip("needs a second device (opencl:0 or cuda:0)")
    other = others[0]
    scaler = kiln.optim.grad_scaler()
    loss = kiln.nn.mse_loss(kiln.ones(3, device=cpu), kiln.zeros(3, device=cpu))
    scaler.scale(loss)  # the scaler's state is now on cpu:0
    lin = kiln.nn.linear(2, 2, device=other)
    opt = kiln.optim.sgd(lin.parameters())
    with pytest.raises(kiln.invalid_argument, match=f"a parameter is on {other.id}"):
        scaler.step(opt)
    with pytest.raises(kiln.invalid_argument, match=f"the loss is on {other.id}"):
        scaler.scale(kiln.ones(1, device=other))


def test_scaler_repr_and_options():
    s = kiln.optim.grad_scaler(init_scale=4.0, growth_factor=3.0, backoff_factor=0.25,
                               growth_interval=5)
    assert (s.init_scale, s.growth_factor, s.backoff_factor, s.growth_interval) == \
        (4.0, 3.0, 0.25, 5)
    assert s.get_scale() == 4.0  # before any use: no device state, no read
    assert repr(s) == ("kiln.optim.grad_scaler(init_scale=4.0, growth_factor=3.0, "
                       "backoff_factor=0.25, growth_interval=5, enabled=True)")


# ---- beside PyTorch ----

def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (the GPU machine has it)")


def _torch_autocast_or_skip(torch, half):
    tdtype = getattr(torch, str(half))
    try:
        with torch.autocast("cpu", dtype=tdtype):
            ok = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == tdtype
    except (RuntimeError, ValueError) as e:
        pytest.skip(f"torch.autocast on the CPU refuses {half}: {e}")
    if not ok:
        pytest.skip(f"this PyTorch's CPU autocast does not run {half}")
    return tdtype


@pytest.mark.parametrize("half", HALF, ids=str)
def test_autocast_types_as_torch_does(dev, half):
    torch = _torch()
    tdtype = _torch_autocast_or_skip(torch, half)
    F = torch.nn.functional
    x, w, img, labels = _inputs(dev)
    tx, tw, timg = (torch.from_numpy(t.numpy()) for t in (x, w, img))
    tlabels = torch.from_numpy(labels.numpy())
    conv = kiln.nn.conv2d(1, 2, 3, device=dev)
    tconv_w, tconv_b = (torch.from_numpy(t.numpy()) for t in (conv.weight, conv.bias))
    with kiln.autocast(half):
        ours = {"matmul": x @ w.T, "linear": kiln.linear(x, w), "conv2d": conv(img),
                "cross_entropy": kiln.nn.cross_entropy(x @ w.T, labels),
                "mse_loss": kiln.nn.mse_loss(x @ w.T, kiln.zeros(8, 3, device=dev))}
    with torch.autocast("cpu", dtype=tdtype):
        theirs = {"matmul": tx @ tw.T, "linear": F.linear(tx, tw),
                  "conv2d": F.conv2d(timg, tconv_w, tconv_b),
                  "cross_entropy": F.cross_entropy(tx @ tw.T, tlabels),
                  "mse_loss": F.mse_loss(tx @ tw.T, torch.zeros(8, 3))}
    for name, t in theirs.items():
        assert str(ours[name].dtype) == str(t.dtype).removeprefix("torch."), name
        np.testing.assert_allclose(ours[name].to(kiln.float32).numpy(), t.float().numpy(),
                                   rtol=3e-2, atol=3e-2, err_msg=name)


def test_grad_scaler_follows_torch_amp(dev):
    torch = _torch()
    if not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"):
        pytest.skip("this PyTorch has no torch.amp.GradScaler")
    w0 = np.random.default_rng(5).normal(size=(3, 4)).astype(np.float32)
    data = np.random.default_rng(6).normal(size=(8, 4)).astype(np.float32)
    injected = [False, False, True, False, False, False, True, False]

    def run(scaler, w, opt, x, poison):
        scales, weights = [], []
        for inject in injected:
            opt.zero_grad()
            scaler.scale((x @ w.T).square().mean()).backward()
            if inject:
                poison(w)
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            weights.append(np.array(w.detach().numpy()))
        return scales, weights

    def torch_poison(w):
        w.grad[0, 0] = float("inf")

    def kiln_poison(w):
        g = w.grad.numpy()
        g[0, 0] = np.inf
        w.grad = kiln.tensor(g, device=dev)

    tw = torch.tensor(w0, requires_grad=True)
    try:
        theirs = run(torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2), tw,
                     torch.optim.SGD([tw], lr=0.1), torch.from_numpy(data), torch_poison)
    except (RuntimeError, NotImplementedError, TypeError) as e:
        pytest.skip(f"torch.amp.GradScaler on the CPU: {e}")
    kw = kiln.tensor(w0, device=dev, requires_grad=True)
    ours = run(kiln.optim.grad_scaler(init_scale=1024.0, growth_interval=2), kw,
               kiln.optim.sgd([kw], lr=0.1), kiln.tensor(data, device=dev), kiln_poison)
    assert ours[0] == theirs[0] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 2048.0, 1024.0,
                                    1024.0]
    np.testing.assert_allclose(np.array(ours[1]), np.array(theirs[1]), rtol=1e-4, atol=1e-5)


def test_bf16_training_follows_torch(dev):
    torch = _torch()
    tdtype = _torch_autocast_or_skip(torch, kiln.bfloat16)
    x, y = _blobs(64, 2)
    kiln.nn.manual_seed(7)
    model = kiln.nn.sequential(kiln.nn.linear(4, 16, device=dev), kiln.nn.relu(),
                               kiln.nn.linear(16, 2, device=dev))
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    tmodel.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in
                            model.state_dict().items()})
    opt = kiln.optim.sgd(model.parameters(), lr=0.2)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.2)
    xt, yt = kiln.tensor(x, device=dev), kiln.tensor(y, device=dev)
    txt, tyt = torch.from_numpy(x), torch.from_numpy(y)
    ours, theirs = [], []
    for _ in range(5):
        opt.zero_grad()
        with kiln.autocast(kiln.bfloat16):
            loss = kiln.nn.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        ours.append(loss.item())
        topt.zero_grad()
        with torch.autocast("cpu", dtype=tdtype):
            tloss = torch.nn.functional.cross_entropy(tmodel(txt), tyt)
        tloss.backward()
        topt.step()
        theirs.append(tloss.item())
    np.testing.assert_allclose(ours, theirs, rtol=3e-2)  # bf16 roundings differ in detail


def test_scaler_unscale_then_clip_as_pytorch(dev):
    # torch's recipe: scaler.unscale_(opt); clip_grad_norm_; scaler.step(opt); the gradients read
    # after unscale_ are the true ones, and step() does not divide them again.
    w0 = np.linspace(-1.0, 1.0, 6).astype(np.float32)
    g = np.linspace(0.5, 3.0, 6).astype(np.float32)

    def run(scaled):
        w = kiln.tensor(w0, device=dev, requires_grad=True)
        opt = kiln.optim.sgd([w], lr=0.1)
        scaler = kiln.optim.grad_scaler(init_scale=64.0)
        w.grad = kiln.tensor(g * (64.0 if scaled else 1.0), device=dev)
        if scaled:
            scaler.unscale_(opt)
            np.testing.assert_array_equal(w.grad.numpy(), g)
            with pytest.raises(kiln.invalid_argument):
                scaler.unscale_(opt)  # twice before update()
        norm = kiln.optim.clip_grad_norm_(opt, 1.0).item()
        if scaled:
            assert scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        return norm, w.numpy()

    (n1, w1), (n2, w2) = run(True), run(False)
    assert n1 == pytest.approx(float(np.linalg.norm(g)), rel=1e-6)
    assert n1 == n2
    np.testing.assert_array_equal(w1, w2)
    try:
        import torch
    except ImportError:
        return  # the PyTorch comparison runs where PyTorch is installed (the GPU machine)
    t = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([t], lr=0.1)
    t.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_norm_([t], 1.0)
    topt.step()
    np.testing.assert_allclose(w1, t.detach().numpy(), rtol=1e-6, atol=1e-7)
