"""Plugin discovery: statuses, switches and messages (with in-process entry points).

The same behaviour with real installed distributions is tested in tests/test_plugins_installed.py.
"""

from __future__ import annotations

import types

import pytest
from backend_fakes import FakeBackend, FakeDist, FakeEntryPoint

from accel import plugins
from accel.backend import ABI_VERSION, Backend, BackendOptions
from accel.errors import BackendNotFoundError, TargetError
from accel.hookspecs import hookimpl
from accel.target import CompositeTarget


def _plugin(*classes, raises: BaseException | None = None) -> types.ModuleType:
    module = types.ModuleType("plugin")

    @hookimpl
    def accel_register_backends(register):
        if raises is not None:
            raise raises
        for cls in classes:
            register(cls)

    module.accel_register_backends = accel_register_backends
    return module


def _ep(name, target, dist="accel-x", version="0.1"):
    return FakeEntryPoint(name, f"{name}_module", target, FakeDist(dist, version))


class Old(FakeBackend):
    name = "old"
    abi = 0


class Gone(FakeBackend):
    name = "gone"

    def unavailable_reason(self):
        return "needs an NPU driver (/dev/npu0 not found)"


class BadLayout(FakeBackend):
    name = "badlayout"
    layout = "NDHWC"  # type: ignore[assignment]


class NoRuntime(FakeBackend):
    name = "noruntime"

    def runtime_module(self):
        raise ImportError("libnpu.so: cannot open shared object file")


def _by_name(statuses):
    return {s.name: s for s in statuses}


def test_statuses_of_good_and_broken_plugins():
    eps = [
        _ep("fake", _plugin(FakeBackend), "accel-fake", "1.2.3"),
        _ep("broken", ImportError("No module named 'torch'")),
        _ep("raises", _plugin(raises=RuntimeError("boom"))),
        _ep("old", _plugin(Old)),
        _ep("gone", _plugin(Gone)),
        _ep("badlayout", _plugin(BadLayout)),
        _ep("noruntime", _plugin(NoRuntime)),
        _ep("notabackend", _plugin(int)),
        _ep("empty", _plugin()),
    ]
    got = _by_name(plugins.discover(eps))
    assert got["fake"].state == "ok" and got["fake"].abi_version == ABI_VERSION
    assert (got["fake"].distribution, got["fake"].version, got["fake"].patterns, got["fake"].ops) == (
        "accel-fake",
        "1.2.3",
        1,
        3,
    )
    assert got["broken"].state == "import error" and "No module named 'torch'" in got["broken"].error
    assert "Traceback" in got["broken"].traceback
    assert (
        got["raises"].state == "invalid" and "accel_register_backends raised: RuntimeError: boom" in got["raises"].error
    )
    assert (
        got["old"].state == "ABI mismatch"
        and f"built for runtime ABI 0, this accel-core speaks {ABI_VERSION}" in got["old"].error
    )
    assert got["gone"].state == "unavailable" and "/dev/npu0" in got["gone"].error
    assert got["badlayout"].state == "invalid" and "layout must be" in got["badlayout"].error
    assert got["noruntime"].state == "unavailable" and "libnpu.so" in got["noruntime"].error
    assert got["notabackend"].state == "invalid" and "not a subclass" in got["notabackend"].error
    assert got["empty"].state == "invalid" and "registered no backend" in got["empty"].error


def test_hook_with_wrong_signature_is_invalid():
    module = types.ModuleType("plugin")

    @hookimpl
    def accel_register_backends(register, colour):
        pass

    module.accel_register_backends = accel_register_backends
    (status,) = plugins.discover([_ep("wrongsig", module)])
    assert status.state == "invalid" and "hookspecs" in status.error


def test_two_plugins_with_one_name():
    (first, second) = plugins.discover([_ep("fake", _plugin(FakeBackend)), _ep("fake2", _plugin(FakeBackend))])
    assert first.ok and second.state == "invalid" and "already provided" in second.error


def test_disable_and_allow_list(monkeypatch):
    eps = [_ep("fake", _plugin(FakeBackend)), _ep("gone", _plugin(Gone))]
    monkeypatch.setenv("ACCEL_DISABLE_PLUGINS", "fake")
    got = _by_name(plugins.discover(eps))
    assert got["fake"].state == "disabled" and "ACCEL_DISABLE_PLUGINS" in got["fake"].error
    monkeypatch.setenv("ACCEL_DISABLE_PLUGINS", "*")
    assert {s.state for s in plugins.discover(eps)} == {"disabled"}
    monkeypatch.delenv("ACCEL_DISABLE_PLUGINS")
    monkeypatch.setenv("ACCEL_LOAD_PLUGINS", "gone")
    got = _by_name(plugins.discover(eps))
    assert got["fake"].state == "disabled" and "ACCEL_LOAD_PLUGINS" in got["fake"].error
    assert got["gone"].state == "unavailable"
    monkeypatch.setenv("ACCEL_LOAD_PLUGINS", "")
    assert {s.state for s in plugins.discover(eps)} == {"disabled"}


def test_get_backend_messages(monkeypatch):
    monkeypatch.setattr(plugins, "_CACHE", plugins.discover([_ep("old", _plugin(Old), "accel-old", "2.0")]))
    with pytest.raises(BackendNotFoundError, match=r"backend old \(accel-old 2.0\) cannot be used: ABI mismatch"):
        plugins.get_backend("old")
    with pytest.raises(BackendNotFoundError, match="not installed; install it with: pip install accel-ethosn") as info:
        plugins.get_backend("ethosn")
    # accel's own plugins come from the wheelhouse a checkout builds, not from the package index
    assert "nox -s wheels -- plugins/ethosn, then pip install --find-links wheelhouse accel-ethosn" in str(info.value)
    with pytest.raises(BackendNotFoundError, match="no installed plugin provides backend 'nope'"):
        plugins.get_backend("nope")


def test_target_validation():
    class NpuOptions(BackendOptions):
        variant: str = "N78"

    class Npu(FakeBackend):
        name = "npu"
        Options = NpuOptions

    avail = {"npu": Npu, "fake": FakeBackend}
    t = CompositeTarget.parse({"devices": [{"kind": "npu", "options": {"variant": "N57"}}, {"kind": "fake"}]})
    npu, fake = t.instantiate(avail)
    assert npu.options.variant == "N57" and isinstance(fake, Backend)
    assert t.describe() == "npu > fake > cpu"
    with pytest.raises(TargetError, match=r"devices\[0\] \(npu\): sram: unknown option"):
        CompositeTarget.parse({"devices": [{"kind": "npu", "options": {"sram": 1}}]}).instantiate(avail)
    with pytest.raises(TargetError, match="listed twice in --backends"):
        CompositeTarget.from_backends("npu,npu")
    with pytest.raises(TargetError, match="empty backend name"):
        CompositeTarget.from_backends("npu,,fake")
    with pytest.raises(TargetError, match="host: Input should be 'cpu'"):
        CompositeTarget.parse({"host": "gpu", "devices": []})
    with pytest.raises(BackendNotFoundError, match="pip install accel-acl"):
        CompositeTarget.from_backends("acl").instantiate(avail)


def test_target_file_errors(tmp_path):
    with pytest.raises(TargetError, match="does not exist"):
        CompositeTarget.from_file(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{devices: ")
    with pytest.raises(TargetError, match="not valid JSON"):
        CompositeTarget.from_file(bad)
    good = tmp_path / "t.json"
    good.write_text('{"host": "cpu", "devices": [{"kind": "fake"}]}')
    assert CompositeTarget.from_file(good).backend_names() == ["fake"]


def test_every_hook_is_listed():
    assert plugins.hook_names() == ["accel_register_backends"]


def test_a_plugin_that_raises_keyboard_interrupt_is_one_broken_plugin():
    """A plugin raising KeyboardInterrupt (or SystemExit) at import, or from its hook, is contained like any
    other failure: the other plugins load and the command goes on."""
    from accel.plugins import discover

    got = {
        s.name: s
        for s in discover(
            [
                _ep("ctrlc", KeyboardInterrupt()),
                _ep("exits", SystemExit(3)),
                _ep("hookctrlc", _plugin(raises=KeyboardInterrupt())),
                _ep("fake", _plugin(FakeBackend)),
            ]
        )
    }
    assert got["ctrlc"].state == "import error" and "KeyboardInterrupt" in got["ctrlc"].error
    assert got["exits"].state == "import error" and "SystemExit" in got["exits"].error
    assert got["hookctrlc"].state == "invalid" and "KeyboardInterrupt" in got["hookctrlc"].error
    assert got["fake"].state == "ok"


def test_a_real_interrupt_while_plugins_load_still_stops_the_command():
    """Ctrl+C (SIGINT) during a plugin's import is the user's: it propagates."""
    import signal

    from accel.plugins import discover

    class Slow:
        name, value, dist = "slow", "slow_module", None

        def load(self):
            # raised in this thread: os.kill(getpid()) lets the kernel pick any thread of the
            # process, and with native worker threads alive (a runtime loaded by an earlier test)
            # the interrupt could arrive after discover() had returned
            signal.raise_signal(signal.SIGINT)
            return _plugin(FakeBackend)

    # Python's own handler, as in a terminal: a process started in the background by a shell
    # without job control inherits SIGINT ignored, and then Ctrl+C does nothing anywhere
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            discover([Slow()])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
    finally:
        signal.signal(signal.SIGINT, inherited)
