"""The package: version, registry records, config from Python, the dispatch record."""
import os
import subprocess
import sys

import torch

import kite


def test_version_from_the_library():
    assert kite.__version__ == kite._C.version
    assert kite.__version__.count(".") == 2


def test_library_found_beside_the_package():
    """kite._C finds libkite.so through its rpath, not LD_LIBRARY_PATH."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    r = subprocess.run([sys.executable, "-c", "import kite; print(kite.__version__)"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == kite.__version__


def test_list_records():
    recs = kite.list()
    assert recs and all(isinstance(r, kite.KernelRecord) for r in recs)
    ops = {r.op for r in recs}
    assert set(kite._C.op_names()) <= ops
    for op in ops:
        chosen = [r for r in recs if r.op == op and r.device == "cpu" and r.chosen]
        assert len(chosen) == 1, op
        assert chosen[0].runs_here
    ref = [r for r in kite.list("softmax") if r.backend == "ref"]
    assert ref and ref[0].runs_here and ref[0].why_not == ""


def test_config_and_kernels_context():
    x = torch.randn(3, 64)
    kite.ops.softmax(x)
    default = kite.last_dispatch()
    with kite.kernels("softmax=ref"):
        assert kite._C.config_get_thread().endswith("softmax=ref")
        kite.ops.softmax(x)
        assert kite.last_dispatch().startswith("ref.")
    kite.ops.softmax(x)
    assert kite.last_dispatch() == default
    before = kite.config("softmax=ref")
    assert kite._C.config_get() == "softmax=ref"
    kite.config(before)


def test_environment_config_and_backend_path():
    """KITE_KERNELS and KITE_LOG keep working under Python."""
    code = ("import torch, kite; kite.ops.softmax(torch.randn(2, 8)); print(kite.last_dispatch())")
    env = dict(os.environ, KITE_KERNELS="softmax=ref", KITE_LOG="dispatch")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("ref.")
    assert "kite: softmax f32 on cpu:0 -> ref." in r.stderr
    env = dict(os.environ, KITE_BACKEND_PATH="/nonexistent")
    r = subprocess.run([sys.executable, "-c", "import kite; print(len(kite.backends()))"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and int(r.stdout) >= 2


def test_backends_and_plugins():
    names = {b["name"] for b in kite.backends()}
    assert {"ref", "cpu"} <= names
    assert isinstance(kite.plugin_failures(), list)
    try:
        kite.load_backend("/nonexistent/libkite-x.so")
    except kite.PluginError as e:
        assert "libkite-x.so" in str(e)
    else:
        raise AssertionError("loading a missing plugin did not fail")


def test_threads_use_their_own_ctx():
    import threading
    x = torch.randn(8, 256)
    want = kite.ops.rms_norm(x)
    errs = []

    def work():
        for _ in range(50):
            if not torch.equal(kite.ops.rms_norm(x), want):
                errs.append("mismatch")
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs


def test_kernels_scope_is_per_thread():
    """Inside kite.kernels another thread keeps the global choice; kite.config is global."""
    import threading
    x = torch.randn(4, 64)
    seen = {}

    def other():
        kite.ops.softmax(x)
        seen["other"] = kite.last_dispatch()

    with kite.kernels("softmax=ref"):
        kite.ops.softmax(x)
        seen["inside"] = kite.last_dispatch()
        t = threading.Thread(target=other)
        t.start()
        t.join()
    kite.ops.softmax(x)
    seen["after"] = kite.last_dispatch()
    assert seen["inside"] == "ref.generic"
    assert not seen["other"].startswith("ref."), seen
    assert not seen["after"].startswith("ref."), seen
    before = kite.config("softmax=ref")
    try:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen["other"] == "ref.generic"
    finally:
        kite.config(before or None)
