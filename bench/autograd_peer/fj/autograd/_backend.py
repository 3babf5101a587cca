"""What of flowjit the autograd shim uses: the transforms (fj.grad, fj.vjp, fj.jvp, fj.jacrev,
fj.hessian, fj.remat), its NumPy namespace, and fj.scipy (special, stats, linalg, signal,
integrate); a name flowjit lacks fails its tests on the missing name."""
from agpeer import scipy_odeint

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
    "scipy.integrate": {"odeint": scipy_odeint(flowjit.scipy.integrate.odeint)},
}
