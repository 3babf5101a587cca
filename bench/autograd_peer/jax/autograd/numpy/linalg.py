from agpeer import forwarding

__getattr__ = forwarding("numpy.linalg")
