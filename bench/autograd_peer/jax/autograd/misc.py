from agpeer.extend import const_graph, flatten  # noqa: F401
