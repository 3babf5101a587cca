"""Without Ray (hidden by a meta-path finder in a subprocess, so it runs where Ray is
installed and where it is not): import flowjit works and fj.distributed names the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_ray_missing_names_the_extra_and_import_flowjit_never_loads_ray():
    prog = textwrap.dedent("""
        import sys
        import flowjit as fj
        assert "ray" not in sys.modules
        class NoRay:
            def find_spec(self, name, path=None, target=None):
                if name == "ray" or name.startswith("ray."):
                    raise ImportError("No module named 'ray' (hidden by the test)")
        sys.meta_path.insert(0, NoRay())
        try:
            fj.distributed
        except ImportError as e:
            print(e)
        """)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'flowjit[distributed]'" in out.stdout
