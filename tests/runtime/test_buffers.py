"""The buffer pool: blocks come back when the last view is dropped, and never while a
view is alive."""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest

import flowjit as fj
from flowjit.runtime.buffers import HUGE_PAGE_BYTES, POOL_MIN_BYTES, BufferPool


def test_block_is_reused_after_the_last_view_dies():
    pool = BufferPool()
    a = pool.empty((POOL_MIN_BYTES // 4,), np.float32)
    a[:] = 1.0
    view = a[:16]
    del a
    gc.collect()
    b = pool.empty((POOL_MIN_BYTES // 4,), np.float32)
    assert pool.reused == 0 and not np.may_share_memory(b, view)  # the view kept its block
    assert view.sum() == 16.0
    del view, b
    gc.collect()
    c = pool.empty((POOL_MIN_BYTES // 8, 2), np.float32)
    assert pool.reused == 1 and pool.allocated == 2
    assert c.flags.writeable and c.flags.c_contiguous and c.shape == (POOL_MIN_BYTES // 8, 2)


def test_small_arrays_bypass_the_pool():
    pool = BufferPool()
    a = pool.empty((3, 4), np.int64)
    assert a.flags.owndata and pool.allocated == 0


def test_kept_results_stay_intact_across_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWJIT_CACHE_DIR", str(tmp_path))
    f = fj.function(lambda x, k: x * k)
    x = np.ones(POOL_MIN_BYTES // 2, np.float32)
    kept = [f(x, float(k)) for k in range(4)]
    for k, y in enumerate(kept):
        assert y[0] == k and y[-1] == k
    y = f(x, 9.0)
    assert not any(np.may_share_memory(y, z) for z in kept)


def test_arrays_alive_at_exit_end_the_process_quietly():
    # More arrays of one size than the free list keeps, dropped and then alive at exit:
    # closing a block whose array still held its buffer raised BufferError in each finalizer.
    code = ("import gc\n"
            "import numpy as np\n"
            "from flowjit.runtime.buffers import POOL, POOL_MIN_BYTES, MAX_FREE_PER_SIZE\n"
            "def many():\n"
            "    return [POOL.empty((POOL_MIN_BYTES,), np.uint8) for _ in range(2 * MAX_FREE_PER_SIZE + 1)]\n"
            "dropped = many()\n"
            "del dropped\n"
            "gc.collect()\n"
            "kept = many()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]


def test_an_array_like_an_input_starts_where_the_input_does_in_its_cache_line():
    pool = BufferPool()
    raw = np.zeros(POOL_MIN_BYTES + 128, np.uint8)
    for offset in (0, 4, 16, 60):
        base = -raw.ctypes.data % 64 + offset
        like = raw[base:base + POOL_MIN_BYTES].view(np.float32)
        a = pool.empty(like.shape, np.float32, like=like)
        assert a.ctypes.data % 64 == offset and a.shape == like.shape
        a[:] = 2.0  # the whole array lies inside its block
        assert a[-1] == 2.0
    odd = raw[3:3 + POOL_MIN_BYTES]
    assert pool.empty((POOL_MIN_BYTES // 4,), np.float32, like=odd).ctypes.data % 64 == 0  # not a float32 offset


_FAULTS_PER_CALL = """
import resource
import numpy as np
import flowjit as fj

f = fj.function(lambda w, g: (w - 0.01 * g, g * 0.9))   # two 800 KB results a call, as an SGD step's
w, g = np.ones((784, 256), np.float32), np.full((784, 256), 0.5, np.float32)
for _ in range(10):
    w, m = f(w, g)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    w, m = f(w, g)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def test_mid_sized_results_do_not_page_fault_every_call(tmp_path):
    # Results of 128 KiB to 1 MiB (a 784x256 weight) came from np.empty, that is malloc,
    # which in a process of flowjit alone maps fresh pages for each (glibc's mmap threshold
    # is 128 KiB and a freed block of the same size does not raise it): ~400 page faults a
    # call, an MLP's training step at 2x the time it takes beside JAX or torch (whose large
    # frees had raised the threshold). A new process, as a user's script is.
    env = {**__import__("os").environ, "FLOWJIT_CACHE_DIR": str(tmp_path)}
    got = subprocess.run([sys.executable, "-c", _FAULTS_PER_CALL], capture_output=True, text=True, timeout=300,
                         env=env)
    assert got.returncode == 0, got.stderr[-2000:]
    faults = float(got.stdout.split()[-1])
    assert faults < 40, f"{faults} minor page faults a call"  # 2 x 196 pages if the results are fresh mappings


def test_a_pool_that_cannot_map_a_block_hands_out_a_numpy_array(monkeypatch):
    # Each block is a mapping of its own; a process that keeps tens of thousands of results
    # runs out of them (vm.max_map_count) before it runs out of memory.
    import mmap as mmap_module

    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")
    pool = BufferPool()
    monkeypatch.setattr(mmap_module, "mmap", refuse)
    a = pool.empty((POOL_MIN_BYTES // 4,), np.float32)
    a[:] = 2.0
    assert a.flags.owndata and a.shape == (POOL_MIN_BYTES // 4,) and pool.allocated == 0 and a.sum() == a.size * 2.0


def _mapping_of(address: int) -> dict[str, str]:
    """The /proc/self/smaps entry of the mapping holding ``address``: its permissions
    (``perms``) and its fields."""
    found: dict[str, str] | None = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                if found is not None:
                    break
                if lo <= address < hi:
                    found = {"perms": head[1]}
            elif found is not None and ":" in line:
                key, _, value = line.partition(":")
                found[key.strip()] = value.strip()
    assert found is not None, hex(address)
    return found


def _thp_setting() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read()
    except OSError:
        return "[never]"   # no transparent huge pages here


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_a_block_of_a_huge_page_and_more_is_private_and_starts_on_a_huge_page():
    # Python's anonymous mmap is MAP_SHARED unless told otherwise: Linux backs it with shmem,
    # whose huge pages follow shmem_enabled ("never" by default), not the block's advice, so
    # a 50,000x64 Adam moment was 3,125 small pages (a TLB miss each, every pass over it).
    pool = BufferPool()
    nbytes = 4 * 50_000 * 64
    raw = np.zeros(nbytes + 128, np.uint8)
    base = -raw.ctypes.data % 64 + 16
    like = raw[base:base + nbytes].view(np.float32).reshape(50_000, 64)
    for offset, array in ((0, pool.empty((50_000, 64), np.float32)),
                          (16, pool.empty((50_000, 64), np.float32, like=like))):
        start = array.ctypes.data
        assert start % HUGE_PAGE_BYTES == offset
        array[:] = 1.0
        mapping = _mapping_of(start)
        assert mapping["perms"].endswith("p"), mapping
        if "THPeligible" in mapping and "[never]" not in _thp_setting():
            assert mapping["THPeligible"] == "1", mapping
