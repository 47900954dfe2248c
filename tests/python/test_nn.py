import numpy as np
import pytest

import kiln


def test_linear_matches_numpy(cpu):
    lin = kiln.nn.linear(3, 2, device=cpu, seed=1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = lin(kiln.tensor(x, device=cpu)).numpy()
    np.testing.assert_allclose(y, x @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-5)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    assert lin.parameter_count() == 8
    assert set(lin.state_dict()) == {"weight", "bias"}


def test_sequential_and_modules(cpu):
    model = kiln.nn.sequential(kiln.nn.linear(4, 8, device=cpu), kiln.nn.relu(),
                               kiln.nn.linear(8, 3, device=cpu), kiln.nn.log_softmax(1))
    assert len(model) == 4
    assert isinstance(model[1], kiln.nn.relu)
    out = model(kiln.ones(5, 4, device=cpu))
    assert out.shape == (5, 3)
    np.testing.assert_allclose(np.exp(out.numpy()).sum(1), np.ones(5), rtol=1e-5)
    model.eval()
    assert not model.training
    assert "linear" in repr(model)


def _blobs(n, seed):
    # Two separable clusters in 4-D: what the MLP's smaller cousin learns in a few steps.
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 4)) + (labels[:, None] * 2 - 1) * 1.5
    return x.astype(np.float32), labels.astype(np.int64)


@pytest.mark.parametrize("make_opt", [lambda p: kiln.optim.sgd(p, lr=0.5, momentum=0.5),
                                      lambda p: kiln.optim.adam(p, lr=0.05)],
                         ids=["sgd", "adam"])
def test_training_lowers_the_loss(dev, make_opt):
    kiln.nn.manual_seed(3)
    model = kiln.nn.sequential(kiln.nn.linear(4, 16, device=dev), kiln.nn.relu(),
                               kiln.nn.linear(16, 2, device=dev))
    opt = make_opt(model.parameters())
    x, y = _blobs(64, 0)
    xt, yt = kiln.tensor(x, device=dev), kiln.tensor(y, device=dev)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = kiln.nn.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    accuracy = (model(xt).argmax(1).numpy() == y).mean()
    assert accuracy > 0.9
    assert opt.step_count == 20


def test_reference_mlp_forward(cpu):
    model = kiln.nn.models.mlp(device=cpu)
    shape = kiln.nn.models.sample_shape("mlp")
    out = model(kiln.zeros(2, *shape, device=cpu))
    assert out.shape == (2, 10)


def test_optimizer_lr_and_bad_values(cpu):
    lin = kiln.nn.linear(2, 2, device=cpu)
    opt = kiln.optim.sgd(lin.parameters(), lr=0.1)
    opt.lr = 0.01
    assert opt.lr == pytest.approx(0.01)
    with pytest.raises(kiln.invalid_argument):
        opt.lr = -1.0
    with pytest.raises(kiln.invalid_argument):
        kiln.nn.cross_entropy(kiln.ones(2, 3, device=cpu), kiln.tensor([0, 5], device=cpu)).item()


def test_submodules_import_by_name():
    import kiln.nn as nn
    import kiln.nn.models as models
    from kiln.optim import sgd

    assert nn is kiln.nn and models is kiln.nn.models and sgd is kiln.optim.sgd


class _scaled_mlp(kiln.nn.module):
    """A model written in Python: two Kiln layers and a parameter of its own."""

    def __init__(self, dev):
        super().__init__()
        self.fc1 = kiln.nn.linear(4, 16, device=dev, seed=1)
        self.fc2 = kiln.nn.linear(16, 2, device=dev, seed=2)
        self.scale = self.register_parameter("scale", kiln.ones(16, device=dev))
        self.steps = self.register_buffer("steps", kiln.zeros(1, device=dev))

    def forward(self, x):
        return self.fc2(self.fc1(x).relu() * self.scale)

    def describe(self):
        return "scaled_mlp"


def test_python_subclass_registers_and_trains(dev):
    model = _scaled_mlp(dev)
    names = [n for n, _ in model.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in model.named_buffers()] == ["steps"]
    assert set(model.state_dict()) == set(names) | {"steps"}
    assert model.parameter_count() == 16 + 4 * 16 + 16 + 16 * 2 + 2
    assert "scaled_mlp" in repr(model)
    x, y = _blobs(64, 1)
    xt, yt = kiln.tensor(x, device=dev), kiln.tensor(y, device=dev)
    # Called through C++ (module.__call__ -> the virtual forward -> Python) and directly.
    np.testing.assert_allclose(model(xt).numpy(), model.forward(xt).numpy(), rtol=1e-6)
    opt = kiln.optim.adam(model.parameters(), lr=0.05)
    first = None
    for _ in range(20):
        opt.zero_grad()
        loss = kiln.nn.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first
    assert not np.allclose(model.scale.numpy(), 1)  # its own parameter was trained too


def test_python_subclass_inside_sequential_outlives_its_name(cpu):
    # The sequential keeps the Python object alive: its forward is still Python's.
    seq = kiln.nn.sequential(_scaled_mlp(cpu), kiln.nn.log_softmax(1))
    seq.append(kiln.nn.relu())
    import gc
    gc.collect()
    out = seq(kiln.ones(3, 4, device=cpu)).numpy()
    assert out.shape == (3, 2)
    assert len(seq.parameters()) == 5


def test_module_subclass_errors(cpu):
    class no_forward(kiln.nn.module):
        pass

    with pytest.raises(TypeError, match="no_forward has no forward"):
        no_forward()(kiln.ones(2, device=cpu))
    with pytest.raises(TypeError, match="written in Python"):
        kiln.nn.linear(2, 2, device=cpu).register_parameter("w", kiln.ones(2, device=cpu))
