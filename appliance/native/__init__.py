"""Native (C) parts of the appliance: the per-packet hot path (fastpath.c) and DPI helpers the analysis
side calls for nearly every flow (dpi.c)."""

from __future__ import annotations

import dataclasses
from typing import Any


def slot_maker(kind: Any, cls: type, given: int | None = None) -> Any:
    """A `kind` (fastpath.SlotMaker or dpi.SlotMaker: slot_maker.h) of `cls` from its first `given` fields (all
    by default), the rest at their plain defaults.

    What C calls per record, message, sample or hello instead of the class: the dataclass's own __init__
    stored the fields one Python attribute at a time. The maker stores them in the slots directly, which is
    all that __init__ does for such a class; that is asserted here, and the C checks the slots.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.init or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a dataclass with slots and a generated __init__")
    if cls.__init__.__code__.co_filename != "<string>":  # dataclasses exec()s the __init__ it generates
        raise TypeError(f"{cls.__name__} has an __init__ of its own")
    fields = dataclasses.fields(cls)
    given = len(fields) if given is None else given
    defaults = tuple(f.default for f in fields[given:])
    if any(d is dataclasses.MISSING for d in defaults):
        raise TypeError(f"{cls.__name__}: the fields past {given} need plain defaults (no default_factory)")
    return kind(cls, tuple(f.name for f in fields), defaults)
