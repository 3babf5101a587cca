from agpeer import forwarding

__getattr__ = forwarding("scipy.signal")
