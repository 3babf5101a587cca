from agpeer import forwarding

__getattr__ = forwarding("scipy.stats.multivariate_normal")
