from agpeer import stats_getattr

from . import multivariate_normal  # noqa: F401

__getattr__ = stats_getattr
