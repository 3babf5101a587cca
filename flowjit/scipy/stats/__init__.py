"""``fj.scipy.stats``: scipy.stats distributions as modules of functions, as ``jax.scipy.stats``
(``norm.logpdf(x, loc, scale)``...). Each function is a composition of flowjit ops and
``fj.scipy.special``, so it traces, compiles and differentiates to any order in every argument
except the shape parameters of a cdf (the incomplete gamma and beta functions' derivative in
their parameters is refused, as in JAX)."""
from flowjit.scipy.stats import beta, chi2, dirichlet, gamma, multivariate_normal, norm, poisson, t

__all__ = ["beta", "chi2", "dirichlet", "gamma", "multivariate_normal", "norm", "poisson", "t"]
