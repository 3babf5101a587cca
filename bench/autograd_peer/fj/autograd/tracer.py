from agpeer.tracer import isbox, notrace_primitive, primitive  # noqa: F401
