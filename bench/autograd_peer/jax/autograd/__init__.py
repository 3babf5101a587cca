"""HIPS/autograd's API on JAX's transforms, for running autograd's own tests against JAX
(bench/autograd_peer.py). The code is shared with the other shim (bench/autograd_peer/shared);
what is JAX's own is named in ``autograd._backend``."""
from agpeer import export_operators

export_operators(globals())
