"""What of flowjit the autograd shim uses: the transforms (fj.grad, fj.vjp, fj.jvp, fj.jacrev,
fj.hessian, fj.remat once it exists), its NumPy namespace, and the scipy functions it has under
another name. Sections absent here (scipy.stats, scipy.linalg, scipy.signal, scipy.integrate)
have nothing in flowjit yet, and their tests fail on the missing name."""
import flowjit
import flowjit.nn.functional
from flowjit.tracer.core import Tracer  # noqa: F401  (autograd.tracer.isbox)

NAME = "flowjit"
transforms = flowjit
numpy = flowjit

SECTIONS = {
    "numpy": flowjit,
    "numpy.linalg": flowjit.linalg,
    "numpy.fft": flowjit.fft,
    "scipy.special": flowjit.scipy.special,
    "scipy.stats": flowjit.scipy.stats,
    "scipy.stats.multivariate_normal": flowjit.scipy.stats.multivariate_normal,
    "scipy.linalg": flowjit.scipy.linalg,
    "scipy.signal": flowjit.scipy.signal,
    "scipy.integrate": {},
}
