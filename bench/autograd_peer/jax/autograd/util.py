from agpeer.util import quick_grad_check, subval, subvals  # noqa: F401
