"""Abstract values of the translator (see base.py); `builder.wrap` turns real objects into values."""
from .base import NULL, ConstantValue, NullValue, Value, const
from .callables import (BoundMethodValue, BuiltinValue, CellValue, PartialValue, TensorMethodValue,
                        UserFunctionValue)
from .containers import DictValue, IteratorValue, ListValue, SequenceValue, SetValue, SliceValue, TupleValue
from .mappings import DefaultDictValue, DictViewValue
from .objects import ClassValue, NewObjectValue, NNModuleValue, ObjectValue, PyModuleValue
from .scalars import SymFloatValue, SymNodeValue
from .tensor import TensorValue

__all__ = [
    "NULL", "BoundMethodValue", "BuiltinValue", "CellValue", "ClassValue", "ConstantValue", "DefaultDictValue",
    "DictValue", "DictViewValue",
    "IteratorValue", "ListValue", "NewObjectValue", "NNModuleValue", "NullValue", "ObjectValue",
    "PartialValue", "PyModuleValue", "SequenceValue", "SetValue", "SliceValue", "SymFloatValue", "SymNodeValue", "TensorMethodValue", "TensorValue",
    "TupleValue", "UserFunctionValue", "Value", "const",
]
