"""Optimizers: ``SGD``, ``Momentum``, ``Adagrad``, ``Adadelta``, ``RMSProp``, ``Adam``,
``AdamW``; their state lives in Variables (see ``optimizer.py``)."""

from flowjit.optim.adaptive import Adadelta, Adagrad, Adam, AdamW, RMSProp
from flowjit.optim.optimizer import Optimizer
from flowjit.optim.sgd import SGD, Momentum

__all__ = ["Optimizer", "SGD", "Momentum", "Adagrad", "Adadelta", "RMSProp", "Adam", "AdamW"]
