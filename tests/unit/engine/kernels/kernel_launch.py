"""Kernel launches recorded under ``TRITON_INTERPRET=1``, as the arguments a compile needs.

CI has no GPU, so the kernel tests run the interpreter, which never runs Triton's compiler: a
kernel the compiler rejects passes every CPU test and fails on the GPU. ``recorded_launches``
catches what our wrappers launch (nothing runs: only the arguments matter), and ``on_hopper``
turns each launch into what a CUDA launch on an H200 passes, for ``hopper_compiler`` to compile::

    wrapper(cpu tensors) -> InterpretedFunction.run(*args, grid, warmup, **kwargs)   recorded
        tensor -> "*bf16"   int -> "i32"/"i64"   float -> "fp32"   bool -> "u1"
        constexpr parameter, None or the integer 1 -> "constexpr", its value kept
        pointer or integer divisible by 16 -> attribute "D" (as a GPU launch specializes them)
        other keywords (num_warps, num_stages, launch_pdl) -> compile options
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from triton._C.libtriton import native_specialize_impl
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, KernelParam

__all__ = ["KernelLaunch", "covering", "on_hopper", "recorded_launches"]

Constant = bool | int | float | str | None


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel's compile arguments: which kernel, its typed signature and constexpr values."""

    module: str
    name: str
    """The kernel's name in ``module`` (a module-level ``@triton.jit`` function)."""
    signature: tuple[tuple[str, str], ...]
    """(parameter, Triton type) in parameter order; constexprs are "constexpr"."""
    constexprs: tuple[tuple[str, Constant], ...]
    """Values of the constexpr parameters, and of the arguments a launch specializes to constants
    (None, and integers equal to 1)."""
    attrs: tuple[tuple[str, str], ...]
    """(parameter, "D") for pointers and integers a launch specializes as divisible by 16."""
    options: tuple[tuple[str, Constant], ...]
    """Launch keywords that are not parameters (num_warps, num_stages, launch_pdl)."""

    @property
    def kernel(self) -> str:
        return f"{self.module}.{self.name}"

    def with_constants(self, constexprs: dict[str, Constant], options: dict[str, Constant]) -> KernelLaunch:
        """This launch with some constexpr values and options replaced (a False option is left out)."""
        merged = {**dict(self.options), **options}
        return replace(
            self,
            constexprs=tuple({**dict(self.constexprs), **constexprs}.items()),
            options=tuple(sorted((k, v) for k, v in merged.items() if v is not False)),
        )

    def choices(self) -> tuple[set[tuple[str, object]], set[tuple[str, object]]]:
        """(every choice this variant makes: pointer types, constexpr values, options; its path
        choices: the activations' dtype and the bool and str constexprs but PDL)."""
        pointers = [(k, t) for k, t in self.signature if t.startswith("*")]
        paths: set[tuple[str, object]] = {("activations", pointers[0][1])} if pointers else set()
        paths |= {(k, v) for k, v in self.constexprs if isinstance(v, bool | str) and k != "PDL"}
        return {*pointers, *self.constexprs, *self.options}, paths

    def describe(self) -> str:
        """The kernel and what distinguishes this variant: its pointer types and constexprs."""
        pointers = ", ".join(f"{k}: {t}" for k, t in self.signature if t.startswith("*"))
        constants = ", ".join(f"{k}={v!r}" for k, v in self.constexprs)
        options = ", ".join(f"{k}={v!r}" for k, v in self.options)
        return f"{self.kernel}({pointers}; {constants}; {options})"


@functools.cache
def _parameters(kernel: InterpretedFunction) -> list[KernelParam]:
    # Each parameter as the compiler reads it, with the kernel's own jit options (which arguments
    # it leaves unspecialized).
    options = {
        k: v for k, v in kernel.kwargs.items() if k in ("do_not_specialize", "do_not_specialize_on_alignment")
    }
    params: list[KernelParam] = JITFunction(kernel.fn, **options).params
    return params


def _launch(kernel: InterpretedFunction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> KernelLaunch:
    fn = kernel.fn
    parameters = _parameters(kernel)
    names = [p.name for p in parameters]
    values = {**dict(zip(names, args, strict=False)), **kwargs}
    signature, constexprs, attrs = [], {}, []
    for p in parameters:
        value = values.get(p.name, p.default)
        if value is inspect.Parameter.empty:
            raise TypeError(f"{fn.__name__} launched without {p.name}")
        if p.annotation_type:
            raise NotImplementedError(f"{fn.__name__}: typed parameter {p.name} (not recorded here yet)")
        # As JITFunction.run specializes a launch on the GPU: the argument's type, and its
        # divisibility by 16 or (integers) its being 1.
        kind, key = "constexpr", None
        if not p.is_constexpr:
            specialize, align = not p.do_not_specialize, not p.do_not_specialize_on_alignment
            kind, key = native_specialize_impl(CUDABackend, value, p.is_const, specialize, align)
        signature.append((p.name, kind))
        if kind == "constexpr":
            if not isinstance(value, Constant):
                raise TypeError(f"{fn.__name__}: constexpr {p.name}={value!r} is not a plain constant")
            constexprs[p.name] = value
        elif key:
            attrs.append((p.name, key))
    options = tuple(sorted((k, v) for k, v in kwargs.items() if k not in names))
    return KernelLaunch(
        fn.__module__, fn.__name__, tuple(signature), tuple(constexprs.items()), tuple(attrs), options
    )


@contextmanager
def recorded_launches() -> Iterator[list[KernelLaunch]]:
    """Every interpreted kernel launch inside the block, recorded and not run.

    Not running them lets the callers pass ``torch.empty`` tensors of real model sizes (the
    sizes pick constexprs and launch shapes) at no cost; the kernel tests run them."""
    launches: list[KernelLaunch] = []

    def run(self: InterpretedFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        launches.append(_launch(self, args, kwargs))

    original = InterpretedFunction.run
    InterpretedFunction.run = run
    try:
        yield launches
    finally:
        InterpretedFunction.run = original


def on_hopper(launch: KernelLaunch) -> list[KernelLaunch]:
    """What a CUDA launch on Hopper passes instead, with PDL off and on for kernels that take it.

    On CPU the wrappers ask for float32 dots (``UPCAST``, ``PRECISION="ieee"``) only because the
    interpreter's numpy dot has no bfloat16; on CUDA they pass ``UPCAST=False`` and "ieee" only
    for float32 activations (the kernel's first pointer); ``INTERPRETED`` (inline assembly
    replaced by Triton ops) is False there. ``pdl_launch`` turns PDL on only for
    CUDA tensors on Hopper, where the engine's default tuning takes it: both are compiled."""
    constexprs = dict(launch.constexprs)
    if constexprs.get("UPCAST"):
        activations = next(t for _, t in launch.signature if t.startswith("*"))
        constexprs["UPCAST"] = False
        constexprs["PRECISION"] = "ieee" if activations == "*fp32" else "tf32"
    if constexprs.get("INTERPRETED"):  # what the interpreter cannot run it runs another way
        constexprs["INTERPRETED"] = False
    launch = launch.with_constants(constexprs, {})
    if "PDL" not in constexprs:
        return [launch]
    return [
        launch.with_constants({"PDL": False}, {"launch_pdl": False}),
        launch.with_constants({"PDL": True}, {"launch_pdl": True}),
    ]


def covering(launches: Iterable[KernelLaunch]) -> list[KernelLaunch]:
    """The launches, in order, that make some choice, or pair of path choices, that no launch of
    the same kernel before them made.

    Compiling every variant the wrappers launch takes minutes (a second or two each); this keeps
    a compile for every pointer type, constexpr value and option of each kernel, and for every
    two paths taken together (an FP8 cache with the fused RoPE, fp16 with the split merge), which
    is where the compiler's type and layout errors come from. PDL's one wait is left out of the
    pairs: it runs on and off at least once per kernel (``on_hopper`` gives both)."""
    seen: dict[str, set[object]] = {}
    kept = []
    for launch in dict.fromkeys(launches):
        values, paths = launch.choices()
        new = {*values, *itertools.combinations(sorted(paths, key=repr), 2)}
        if not new <= seen.setdefault(launch.kernel, set()):
            seen[launch.kernel] |= new
            kept.append(launch)
    return kept
