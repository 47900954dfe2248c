"""Fixtures of the kiln pytest suite: `dev` runs a test once per device (cpu:0, opencl:0,
cuda:0, ...), as the C++ suites do; KILN_PY_DEVICES="cpu:0" narrows it."""

import os

import pytest

import kiln


def _devices():
    only = os.environ.get("KILN_PY_DEVICES")
    if only:
        return [kiln.device(s) for s in only.split(",")]
    return kiln.devices()


@pytest.fixture(params=_devices(), ids=lambda d: d.id)
def dev(request):
    return request.param


@pytest.fixture
def cpu():
    return kiln.device("cpu:0")
