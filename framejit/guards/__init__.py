"""Guards: plain-data assumptions (guard.py) compiled into one checking function per entry (codegen.py).

guards/ never imports capture/: capture hands it expressions with their provenance.
"""
from .codegen import Failure, GuardFunction, compile_guards
from .guard import COST_CONSTANT, COST_CONTAINER, COST_ID, COST_TENSOR, COST_TYPE, Guard

__all__ = ["Failure", "Guard", "GuardFunction", "compile_guards", "COST_CONSTANT", "COST_CONTAINER",
           "COST_ID", "COST_TENSOR", "COST_TYPE"]
