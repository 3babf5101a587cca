"""What of JAX the autograd shim uses: the transforms (jax.grad, jax.vjp, jax.jvp, jax.jacrev,
jax.hessian, jax.remat), jax.numpy and jax.scipy, in float64 (autograd's tests check in
float64: ``jax_enable_x64``)."""
import jax
import jax.numpy
import jax.scipy.linalg
import jax.scipy.signal
import jax.scipy.special
import jax.scipy.stats
from agpeer import scipy_odeint
from jax.core import Tracer  # noqa: F401  (autograd.tracer.isbox)
from jax.experimental.ode import odeint

jax.config.update("jax_enable_x64", True)

NAME = "jax"
transforms = jax
numpy = jax.numpy


SECTIONS = {
    "numpy": jax.numpy,
    "numpy.linalg": jax.numpy.linalg,
    "numpy.fft": jax.numpy.fft,
    "scipy.special": jax.scipy.special,
    "scipy.stats": jax.scipy.stats,
    "scipy.stats.multivariate_normal": jax.scipy.stats.multivariate_normal,
    "scipy.linalg": jax.scipy.linalg,
    "scipy.signal": jax.scipy.signal,
    "scipy.integrate": {"odeint": scipy_odeint(odeint)},
}
