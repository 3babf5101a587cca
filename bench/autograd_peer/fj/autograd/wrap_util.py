from agpeer.wrap_util import get_doc, get_name, unary_to_nary, wrap_nary_f, wraps  # noqa: F401
