"""The model-vs-real machine drives every method of the storage port (and of the
batch-operation store the model and the real backend each hand it).

The port's methods are read from the Protocol classes; the methods the machine drives
are read from its source: a method counts only when an engine call of that name
(``engine.<name>(...)``, ``real.<name>(...)``, ``model.<name>(...)`` or
``<...>.engine.<name>(...)``, or ``<...>.batch_operations.<name>(...)`` for the store)
sits in code reachable from one of its rules, invariants or
initializers (or ``__init__``), through the helpers they call (``self.<helper>`` and
module-level functions of the same module). A call in a helper no rule reaches, in a
docstring or comment, or on another object does not count.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeGuard

import attrs
from hypothesis.stateful import RuleBasedStateMachine, rule

from awa.ports.batch_ops import BatchOperationStore
from awa.ports.storage import StorageEngine, StripedClaimer, TransitionObserver, WorkerWarmUp
from tests.property.test_model_vs_real import ModelVsReal

PORTS = (StorageEngine, StripedClaimer, WorkerWarmUp, TransitionObserver, BatchOperationStore)

#: Port methods no rule needs to drive, each for a stated reason.
NOT_DRIVEN = {
    # Ends the engines; the fixture closes them once per test, after the last example.
    "close": "plumbing",
    # Engine-specific by contract: queue storage counts the failed jobs retention pruned,
    # the model and canonical answer None; tests/contract/test_admin.py holds each engine
    # to its own answer, so the two sides of the machine cannot be compared.
    "pruned_failed_count": "engine-specific answer",
    # Engine-specific by contract: queue storage keeps per-minute completion counts after
    # prune drops the rows, canonical storage and the model count the rows they hold;
    # tests/contract holds each engine to its own answer.
    "finalized_by_queue": "engine-specific answer",
}

ROOT_DECORATORS = frozenset({"rule", "invariant", "initialize"})
ENGINE_NAMES = frozenset({"engine", "real", "model"})
#: Attributes that name an engine or a store under test (``handle.engine``,
#: ``handle.control.batch_operations``).
ENGINE_ATTRIBUTES = frozenset({"engine", "batch_operations"})


def port_methods() -> set[str]:
    return {
        name
        for port in PORTS
        for name, value in vars(port).items()
        if not name.startswith("_") and callable(value)
    }


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    return target.id if isinstance(target, ast.Name) else None


def _is_engine(receiver: ast.expr) -> bool:
    if isinstance(receiver, ast.Name):
        return receiver.id in ENGINE_NAMES
    return isinstance(receiver, ast.Attribute) and receiver.attr in ENGINE_ATTRIBUTES


def _is_self(node: ast.AST) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(body: list[ast.stmt]) -> Iterator[Function]:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


@attrs.frozen
class _Defined:
    """A function of the machine's source: where it is, and for a method its class's
    place in the MRO (``super()`` calls resolve past it)."""

    function: Function
    module: str
    rank: int


def _is_super(node: ast.AST) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "super"
    )


def driven_methods(machine: type[RuleBasedStateMachine]) -> set[str]:
    """Names of the engine calls reachable from ``machine``'s rules (see the module
    docstring)."""
    methods: dict[str, list[_Defined]] = {}
    module_functions: dict[str, dict[str, _Defined]] = {}
    for rank, cls in enumerate(machine.__mro__):
        module = inspect.getmodule(cls)
        if module is None or not module.__name__.startswith("tests."):
            continue
        if module.__name__ not in module_functions:
            tree = ast.parse(inspect.getsource(module))
            module_functions[module.__name__] = {
                f.name: _Defined(f, module.__name__, len(machine.__mro__))
                for f in _functions(tree.body)
            }
        (class_node,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
        assert isinstance(class_node, ast.ClassDef)
        for function in _functions(class_node.body):
            methods.setdefault(function.name, []).append(_Defined(function, module.__name__, rank))

    # The first class of the MRO that defines a name is the one that runs.
    pending = [
        defined[0]
        for name, defined in methods.items()
        if name == "__init__"
        or any(_decorator_name(d) in ROOT_DECORATORS for d in defined[0].function.decorator_list)
    ]
    seen: set[int] = set()
    driven: set[str] = set()
    while pending:
        current = pending.pop()
        if id(current.function) in seen:
            continue
        seen.add(id(current.function))
        local = module_functions[current.module]
        for node in ast.walk(current.function):
            # A helper is reached when it is named, called or passed on alike.
            if _is_self(node) and node.attr in methods:
                pending.append(methods[node.attr][0])
            elif _is_super(node):
                later = [d for d in methods.get(node.attr, []) if d.rank > current.rank]
                pending.extend(later[:1])
            elif isinstance(node, ast.Name) and node.id in local:
                pending.append(local[node.id])
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and _is_engine(node.func.value)
            ):
                driven.add(node.func.attr)
    return driven


def test_every_port_method_is_driven_by_a_rule() -> None:
    required = port_methods() - set(NOT_DRIVEN)
    missing = sorted(required - driven_methods(ModelVsReal))
    assert not missing, f"port methods no model-vs-real rule drives: {missing}"


def test_the_exclusions_are_port_methods_not_yet_driven() -> None:
    excluded = set(NOT_DRIVEN)
    assert excluded <= port_methods(), sorted(excluded - port_methods())
    driven_anyway = sorted(excluded & driven_methods(ModelVsReal))
    assert not driven_anyway, f"driven now, drop them from the exclusions: {driven_anyway}"


# ---------------------------------------------------------------------- the reader itself

Op = Callable[[StorageEngine], Awaitable[Any]]


def _reached(engine: StorageEngine) -> Awaitable[Any]:
    return engine.kind_counts()


def _never_called(engine: StorageEngine) -> Awaitable[Any]:
    return engine.get_dlq(1)


class _ProbeBase(RuleBasedStateMachine):
    def _unreached_base(self) -> Op:
        return lambda engine: engine.dlq_depth_by_queue()

    def _overridden(self) -> Op:
        return lambda engine: engine.get_job(1)


class _Probe(_ProbeBase):
    """Source for the reader: what a rule reaches counts, nothing else does."""

    ops: list[Op]

    @rule()
    def reads(self) -> None:
        self.ops = [self._helper(), _reached, self._overridden()]

    def _helper(self) -> Op:
        return lambda engine: engine.queue_depths()

    def _overridden(self) -> Op:
        return super()._overridden()

    def _unreached(self) -> Op:
        return lambda engine: engine.dlq_depth()

    def _other_receiver(self, port: Any) -> None:
        port.purge_dlq_job(1)


def test_the_reader_counts_only_engine_calls_a_rule_reaches() -> None:
    assert driven_methods(_Probe) == {"queue_depths", "kind_counts", "get_job"}
