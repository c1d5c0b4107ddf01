"""The backend contract: what a plugin subclasses.

A backend is a subclass of :class:`Backend` registered by its plugin through
the ``accel_register_backends`` hook (see :mod:`accel.hookspecs`). The class
carries the whole contract; most backends fill in the class attributes and
override four methods::

    class MyBackend(Backend):
        name = "mynpu"
        distribution = "accel-mynpu"
        version = "1.0.0"
        layout = "NHWC"
        Options = MyOptions                 # a BackendOptions subclass

        def pattern_table(self): ...        # [PatternEntry(name, pattern, check)], priority order
        def op_checks(self): ...            # {op: check(node) -> reason | None}
        def serialize(self, graph): ...     # partition subgraph -> bytes
        def runtime_module(self): ...       # the compiled module built with accel-sdk

A *check* returns ``None`` when the backend takes the node(s) and a reason
string (one line a user can act on) when it does not. Checks are bound
methods, so they see ``self.options``. Where no check was asked (no pattern
matched), the report gives the failure of the pattern that got furthest.
The serializer reads a composite through :func:`accel.pattern.composite_match`
(its pattern labels), never by looking its nodes up by op name.

The public methods (:meth:`Backend.claims`, :meth:`Backend.abi_version`,
:meth:`Backend.profitability`) validate and call the plugin's hooks, so the
core never trusts a plugin's return value blindly.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from accel.abi import ABI_VERSION as ABI_VERSION  # re-exported: the runtime ABI version this core speaks
from accel.abi import RUNTIME_CAPSULE as _CAPSULE_NAME
from accel.errors import PluginError
from accel.ops.registry import OpContext, get_op
from accel.tensor_types import CALL_OP

if TYPE_CHECKING:
    from accel.ir import Graph, Node
    from accel.pattern import Match, Pattern

RUNTIME_CAPSULE = _CAPSULE_NAME.encode()

Layout = Literal["NCHW", "NHWC"]
Check = Callable[[Any], "str | None"]


class BackendOptions(BaseModel):
    """Options every backend accepts in a target; a backend subclasses this with its own.

    Unknown keys are refused, so a typo in a target file is an error naming it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_work: int | None = Field(
        default=None,
        ge=0,
        description="offload a region only if it does at least this many operations (overrides the backend's hint)",
    )
    copy_cost: float | None = Field(
        default=None,
        ge=0,
        description="cost of one boundary byte in operations; a region whose boundary costs more than its "
        "work stays on the host (overrides the backend's hint)",
    )


@dataclass(frozen=True)
class CostHints:
    """What a backend tells the partitioner about profitability.

    A region is offloaded when it does at least ``min_work`` operations and its
    work is at least ``copy_cost`` × the bytes crossing its boundary.
    """

    min_work: int = 1
    copy_cost: float = 0.0


@dataclass(frozen=True)
class PatternEntry:
    """One row of a backend's pattern table: ``<backend>.<name>`` composites."""

    name: str
    pattern: Pattern
    check: Check | None = None


@dataclass(frozen=True, slots=True)
class RegionInfo:
    """What a profitability decision sees about one region."""

    backend: str
    nodes: int
    work: int
    macs: int
    boundary_bytes: int


class Backend:
    """Base class of every backend. Subclasses set the class attributes and override the hooks."""

    #: Backend name used in targets and ``--backends`` (an identifier, e.g. ``"ethosn"``).
    name: ClassVar[str] = ""
    #: The pip distribution that provides it (``"accel-ethosn"``): named in "install ..." errors.
    distribution: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    #: Data layout of 4-D activations inside this backend's partitions.
    layout: ClassVar[Layout] = "NCHW"
    #: The pydantic model of this backend's target options.
    Options: ClassVar[type[BackendOptions]] = BackendOptions
    cost: ClassVar[CostHints] = CostHints()

    def __init__(self, options: BackendOptions | Mapping[str, Any] | None = None):
        if options is None:
            options = self.Options()
        elif not isinstance(options, self.Options):
            options = self.Options.model_validate(dict(options))
        self.options = options

    # -- hooks a backend overrides ---------------------------------------------
    def pattern_table(self) -> Sequence[PatternEntry]:
        """Composite patterns in priority order (first match wins)."""
        return ()

    def op_checks(self) -> Mapping[str, Check]:
        """Single ops this backend takes: ``{op: check(node) -> reason | None}``."""
        return {}

    def declines(self) -> Mapping[str, Check]:
        """Ops this backend never takes alone, with what a user should read about them:
        ``{op: reason(node) -> str}`` (the float form of an op a quantized-only backend runs only
        quantized, say). Asked for a node no op check and no pattern took; without an entry the
        report says ``"<op> is not supported by <backend>"``, or why the nearest pattern failed."""
        return {}

    def edge_ops(self) -> Mapping[str, Check]:
        """Conversions this backend's runtime does itself, on the CPU, at a partition's edges:
        ``{op: check(node) -> reason | None}`` (an NPU's runtime quantizing a float input before
        its device runs, laying it out, dequantizing what comes back). A node of one of these ops
        that no backend claims goes into this backend's partition when it sits at the partition's
        edge: every reader is a node of this backend (an input edge: it reads values from outside),
        or every value it reads comes from one (an output edge). Never between two of its device
        ops, and never a node another backend takes. ``transpose`` here also lets the runtime take
        the layout transposes of its partitions' inputs. The report says so under the backend's
        own name."""
        return {}

    def serialize(self, graph: Graph) -> bytes:
        """Encode one partition (a graph of ops and composite calls) as this backend's blob.

        A composite is a ``call`` node with ``attrs["composite"] == "<backend>.<pattern>"``;
        :func:`accel.pattern.composite_match` gives its pattern labels (``m.node("conv")``)
        and ``m.outer(v)``, the call's argument or output a body value stands for.
        """
        raise NotImplementedError(f"backend {self.name!r} has no serializer")

    def runtime_module(self) -> ModuleType:
        """The compiled runtime module (publishes ``__accel_abi__``, defines ``Runtime(blob)``)."""
        raise NotImplementedError(f"backend {self.name!r} has no runtime")

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run on this machine, or None (it can)."""
        return None

    # -- the core's entry points -------------------------------------------------
    def abi_version(self) -> int:
        """The runtime ABI version the compiled runtime was built against."""
        return runtime_abi_version(self.runtime_module(), self.name)

    def kernel_library(self) -> str:
        """The library the compiled runtime computes with, as it names itself ("oneDNN 3.2.0",
        "Arm Compute Library v20.08"), or "" when the runtime does not say (``KERNEL_LIBRARY``)."""
        return str(getattr(self.runtime_module(), "KERNEL_LIBRARY", "") or "")

    def _table(self, key: str, build: Callable[[], Mapping[str, Check]]) -> dict[str, Check]:
        """A hook's table of checks, asked once per backend instance."""
        table = self.__dict__.get(key)
        if table is None:
            table = self.__dict__[key] = dict(build())
        return table

    def check_op(self, node: Node) -> str | None:
        """Whether this backend takes ``node`` alone: None, or the reason it does not."""
        checks = self.__dict__.get("_op_checks")  # (asked for every node: _table's lookup, inlined)
        check = (checks if checks is not None else self._table("_op_checks", self.op_checks)).get(node.op)
        if check is None:
            decline = self._table("_declines", self.declines).get(node.op)
            reason = None if decline is None else _reason(decline(node), f"{self.name}'s reason for {node.op}")
            return reason or f"{node.op} is not supported by {self.name}"
        result = check(node)
        if result is None or result is True:  # (the common answer, without _reason's call)
            return None
        return _reason(result, f"{self.name} op check for {node.op}")

    def check_edge(self, node: Node) -> str | None:
        """Whether this backend's runtime takes ``node`` as an edge conversion: None, or why not."""
        check = self._table("_edge_checks", self.edge_ops).get(node.op)
        if check is None:
            return f"{node.op} is not an edge conversion of {self.name}"
        return _reason(check(node), f"{self.name} edge check for {node.op}")

    def check_match(self, entry: PatternEntry, match: Match) -> str | None:
        if entry.check is None:
            return None
        return _reason(entry.check(match), f"{self.name}.{entry.name} check")

    def profitability(self, region: RegionInfo) -> str | None:
        """None when offloading ``region`` pays; otherwise the reason it stays on the host."""
        min_work = self.options.min_work if self.options.min_work is not None else self.cost.min_work
        copy_cost = self.options.copy_cost if self.options.copy_cost is not None else self.cost.copy_cost
        if region.work == 0:
            return "the region only moves data (no compute), so it runs on the host"
        if region.work < min_work:
            return f"the region does {region.work} operations, fewer than {self.name}'s minimum {min_work}"
        if copy_cost > 0 and region.boundary_bytes * copy_cost > region.work:
            return (
                f"boundary copies ({region.boundary_bytes} bytes × {copy_cost:g}) outweigh "
                f"the region's {region.work} operations"
            )
        return None

    def __repr__(self) -> str:
        return f"<backend {self.name} {self.version} ({self.layout})>"


def _reason(result: object, what: str) -> str | None:
    if result is None or result is True:
        return None
    if result is False:
        return f"refused by {what}"
    if isinstance(result, str):
        return result or f"refused by {what}"
    raise PluginError(f"{what} returned {type(result).__name__}; a check returns None or a reason string")


def runtime_abi_version(module: ModuleType, backend: str = "") -> int:
    """Read ``abi_version`` from the C table a runtime publishes as ``__accel_abi__``."""
    capsule = getattr(module, "__accel_abi__", None)
    who = f"runtime of backend {backend!r}" if backend else f"module {module.__name__}"
    if capsule is None:
        raise PluginError(f"the {who} does not publish __accel_abi__ (build it with accel-sdk)")
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype = ctypes.c_int
    is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    if not is_valid(capsule, RUNTIME_CAPSULE):
        raise PluginError(f"the {who}: __accel_abi__ is not an {RUNTIME_CAPSULE.decode()} capsule")
    ptr = get(capsule, RUNTIME_CAPSULE)
    return int(ctypes.c_uint32.from_address(ptr).value)


def count_work(node: Node) -> tuple[int, int]:
    """(operations, multiply-accumulates) of one node, for profitability.

    From the op's traits (:mod:`accel.ops.registry`): ops that only move data
    (``moves_data``) count zero; MACs come from the ``macs`` hint; operations
    from the ``work`` hint (pooling counts its window), else one per output
    element, and never fewer than the MACs. A call counts its body.
    """
    if node.op == CALL_OP:
        work = macs = 0
        for inner in node.body.nodes if node.body is not None else ():
            w, m = count_work(inner)
            work += w
            macs += m
        return work, macs
    opdef = get_op(node.op)
    if opdef.moves_data:
        return 0, 0
    if opdef.macs is None and opdef.work is None:
        return sum(v.type.size for v in node.outputs), 0
    ctx = OpContext.of(node)
    work = int(opdef.work(ctx)) if opdef.work is not None else sum(v.type.size for v in node.outputs)
    macs = int(opdef.macs(ctx)) if opdef.macs is not None else 0
    return max(work, macs), macs
