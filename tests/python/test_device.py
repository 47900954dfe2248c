import pytest

import kiln


def test_devices_lists_the_cpu():
    ids = [d.id for d in kiln.devices()]
    assert "cpu:0" in ids


def test_device_by_name_and_properties(cpu):
    assert cpu.id == "cpu:0"
    assert cpu.backend == "cpu"
    assert cpu.index == 0
    assert cpu.type == "cpu"
    assert cpu.info["global_mem_bytes"] > 0
    assert cpu == kiln.device("cpu")
    assert hash(cpu) == hash(kiln.device("cpu:0"))
    assert repr(cpu) == "kiln.device('cpu:0')"
    cpu.synchronize()
    in_use, peak = cpu.memory_usage()
    assert peak >= in_use >= 0


def test_unknown_device_raises_not_found():
    with pytest.raises(kiln.not_found) as e:
        kiln.device("nosuch:7")
    assert isinstance(e.value, LookupError)
    assert "cpu" in str(e.value)  # the message names the known devices


def test_info_names_backends_and_devices():
    info = kiln.info()
    assert info["version"] == kiln.__version__
    assert any(b["name"] == "cpu" and b["loaded"] for b in info["backends"])
    assert any(d["id"] == "cpu:0" for d in info["devices"])


def test_supports_takes_features(dev):
    assert isinstance(dev.supports(kiln.feature.atomics), bool)
