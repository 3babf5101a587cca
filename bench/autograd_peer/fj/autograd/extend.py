from agpeer.extend import defjvp, defjvp_argnum, defvjp, defvjp_argnum, notrace_primitive, primitive, vspace  # noqa: F401
