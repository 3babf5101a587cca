"""``fj.scipy.stats``: scipy.stats distributions as modules of functions, as ``jax.scipy.stats``
(``norm.logpdf(x, loc, scale)``...). Each function is a composition of flowjit ops and
``fj.scipy.special``, so it traces, compiles and differentiates to any order in every argument
but the shape parameters of a cdf: the gamma and chi2 cdfs differentiate once in theirs (the
incomplete gamma function's, summed), the beta and t cdfs not at all (the incomplete beta
function's derivative in its parameters is refused, as in JAX)."""
from flowjit.scipy.stats import beta, chi2, dirichlet, gamma, multivariate_normal, norm, poisson, t

__all__ = ["beta", "chi2", "dirichlet", "gamma", "multivariate_normal", "norm", "poisson", "t"]
