"""autograd.util's pure-Python helpers, vendored from HIPS/autograd (bff107b, MIT license)."""
import warnings


def subvals(x, ivs):
    x_ = list(x)
    for i, v in ivs:
        x_[i] = v
    return tuple(x_)


def subval(x, i, v):
    x_ = list(x)
    x_[i] = v
    return tuple(x_)


def quick_grad_check(fun, arg0, extra_args=(), kwargs=None, verbose=True, eps=1e-4, rtol=1e-4, atol=1e-6,
                     rs=None):
    """Deprecated in autograd: check_grads of ``fun`` in its first argument, reverse mode, order 1."""
    if kwargs is None:
        kwargs = {}
    warnings.warn("The quick_grad_check function is deprecated.")
    from agpeer.test_util import check_grads

    fun_ = lambda arg0: fun(arg0, *extra_args, **kwargs)  # noqa: E731
    check_grads(fun_, modes=["rev"], order=1)(arg0)
