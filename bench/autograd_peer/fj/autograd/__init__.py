"""HIPS/autograd's API on flowjit's transforms, for running autograd's own tests against flowjit
(bench/autograd_peer.py). The code is shared with the other shim (bench/autograd_peer/shared);
what is flowjit's own is named in ``autograd._backend``."""
from agpeer import export_operators

export_operators(globals())
