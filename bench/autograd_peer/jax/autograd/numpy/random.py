"""autograd.numpy.random: NumPy's own, as the tests only draw data with it."""
from numpy.random import *  # noqa: F403
from numpy.random import RandomState, rand, randn, seed, uniform  # noqa: F401
