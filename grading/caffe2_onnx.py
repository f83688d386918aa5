"""Exercises 08: an ONNX net by hand (``dense_relu``) and the size of a model's initializers.

- q1 ``dense_relu(W, b)``: :func:`check_dense_relu` checks the graph the question specifies (one
  ``Gemm`` with ``transB=1`` reading ``x``, ``W``, ``b``, then one ``Relu`` writing ``y``; ``W`` and
  ``b`` stored as given, in float32; a symbolic batch dimension) and runs it with onnxruntime on
  several batch sizes against NumPy's ``relu(x @ W.T + b)``, with a weight that is not square (a
  transposed ``W`` cannot run) and one that is (a transposed ``W`` runs, and gives other numbers).
- q2 ``param_count``/``param_bytes``: :func:`check_param_size` builds a model from a list of
  initializers (shapes, element types, values stored as ``raw_data`` or in the typed fields) and
  compares the answers with the sums of ``prod(dims)`` and ``prod(dims) × element size``.

Imports only NumPy at import time; onnx and onnxruntime when a check runs.
"""
from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .mutant import Mutant
from .student import COURSE_CODE


def _student_line(error: BaseException) -> str:
    """`` (line N of your code: ...)`` for the last frame outside the course's code and the libraries."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(COURSE_CODE) and "site-packages" not in f.filename
              and "/lib/python" not in f.filename]
    return f" (line {frames[-1].lineno} of your code: {(frames[-1].line or '').strip()})" if frames else ""


def _call(fn: Callable, call: str, *args: Any, hint: str = "") -> Any:
    """``fn(*args)``; whatever it raises becomes an AssertionError naming ``call`` (and ``hint``)."""
    try:
        return fn(*args)
    except AssertionError:
        raise
    except Exception as error:   # noqa: BLE001 - a student's function may raise anything
        raise AssertionError(f"{call} raised {type(error).__name__}: {str(error)[:300]}{_student_line(error)}"
                             + (f"\n{hint}" if hint else "")) from None


# --------------------------------------------------------------------------------------------------
# q1: dense_relu
# --------------------------------------------------------------------------------------------------


def _dims(value_info) -> list:
    """The declared shape of a graph input/output: ints, the name of a symbolic dimension, or "?" for a
    dimension left unknown (``None`` in ``helper.make_tensor_value_info``); [] when no shape is declared."""
    return [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?")
            for d in value_info.type.tensor_type.shape.dim]


def _check_graph(model, W: np.ndarray, b: np.ndarray) -> None:
    """The structure the question asks for; W is (out, in) float32, b is (out,)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if not isinstance(model, onnx.ModelProto):
        raise AssertionError(f"dense_relu must return an onnx.ModelProto (helper.make_model), got "
                             f"{type(model).__name__}.")
    try:
        onnx.checker.check_model(model)
    except Exception as error:   # noqa: BLE001 - onnx's validation errors, said plainly
        raise AssertionError(f"the model is not valid ONNX: {str(error).splitlines()[0][:300]}") from None
    graph = model.graph
    ops = [n.op_type for n in graph.node]
    if ops != ["Gemm", "Relu"]:
        hint = ("add a Relu node reading the Gemm's output and writing \"y\"." if ops == ["Gemm"] else
                "one Gemm node computes x @ W.T + b in one operator, then one Relu.")
        raise AssertionError(f"the graph's operators are {ops}, expected ['Gemm', 'Relu']: {hint}")
    gemm, relu = graph.node
    init = {t.name: t for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in init]
    if inputs != ["x"] or [o.name for o in graph.output] != ["y"]:
        raise AssertionError(f"the graph reads {inputs} and writes {[o.name for o in graph.output]}: the input "
                             "must be named \"x\" and the output \"y\" (the code that serves it looks them up).")
    if len(gemm.input) != 3 or gemm.input[0] != "x":
        raise AssertionError(f"the Gemm reads {list(gemm.input)}: you forgot the bias. Gemm(x, W, b) computes "
                             "x @ W.T + b; its third input is the initializer b.")
    attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    stored = {name: numpy_helper.to_array(init[name]) for name in gemm.input[1:] if name in init}
    if len(stored) != 2:
        raise AssertionError(f"the Gemm's weight and bias {list(gemm.input[1:])} must be initializers of the "
                             "graph (numpy_helper.from_array), not inputs.")
    weight, bias = (stored[name] for name in gemm.input[1:])
    if any(init[name].data_type != TensorProto.FLOAT for name in gemm.input[1:]):
        raise AssertionError(f"W and b are stored as {[weight.dtype.name, bias.dtype.name]}; the input x is "
                             "float32, and Gemm needs one type: store them as float32 "
                             "(np.asarray(W, np.float32)), whatever type you were given.")
    if weight.shape != W.shape or not np.array_equal(weight, W):
        raise AssertionError(f"the stored W has shape {weight.shape}, but W is {W.shape} (out_features, "
                             "in_features)" + (" and holds other values" if weight.shape == W.shape else "")
                             + ": store W as given and let Gemm transpose it with transB=1.")
    if attrs.get("transB", 0) != 1 or attrs.get("transA", 0) != 0:
        raise AssertionError(f"the Gemm's attributes are {attrs}: with W stored as (out, in), Gemm needs "
                             "transB=1 to compute x @ W.T + b.")
    if bias.shape != b.shape or not np.array_equal(bias, b):
        raise AssertionError(f"the stored bias has shape {bias.shape}, expected b as given, {b.shape}.")
    if list(relu.input) != [gemm.output[0]] or list(relu.output) != ["y"]:
        raise AssertionError(f"the Relu reads {list(relu.input)} and writes {list(relu.output)}: it must read the "
                             "Gemm's output and write \"y\".")
    (x_info,), (y_info,) = [i for i in graph.input if i.name == "x"], list(graph.output)
    x_dims, y_dims = _dims(x_info), _dims(y_info)
    declared_y = y_info.type.tensor_type.HasField("shape")   # y's shape may be left to inference
    if len(x_dims) != 2 or not isinstance(x_dims[0], str) or (declared_y and y_dims and not isinstance(y_dims[0], str)):
        raise AssertionError(f"x is declared {x_dims} and y {y_dims}: the batch dimension must be dynamic, give "
                             "it a name (\"batch\") or None instead of a number, in x and in y.")
    if x_dims[1] != W.shape[1] or (declared_y and (len(y_dims) != 2 or y_dims[1] != W.shape[0])):
        raise AssertionError(f"x is declared {x_dims} and y {y_dims}, but W is {W.shape}: x has W.shape[1] "
                             "(in_features) columns and y has W.shape[0] (out_features).")


def check_dense_relu(dense_relu: Callable, *, out_features: int, in_features: int, batches: Sequence[int] = (5,),
                     seed: int = 0, dtype: Any = np.float32) -> None:
    """``dense_relu(W, b)`` with a random ``W`` of shape (out_features, in_features) given as ``dtype``:
    the graph's structure, then onnxruntime's output on each batch size in ``batches`` against NumPy."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    W, b = rng.standard_normal((out_features, in_features)), rng.standard_normal(out_features)
    call = f"dense_relu(W, b) with W of shape {W.shape} ({np.dtype(dtype).name})"
    model = _call(dense_relu, call, W.astype(dtype), b.astype(dtype))
    if model is None or model is Ellipsis:
        raise AssertionError(f"{call} returned {model!r}: replace the `...` with your answer.")
    W32, b32 = W.astype(np.float32), b.astype(np.float32)
    _check_graph(model, W32, b32)
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:   # noqa: BLE001 - onnxruntime's errors, said plainly
        raise AssertionError(f"onnxruntime cannot load the model: {str(error)[:300]}") from None
    for batch in batches:
        x = rng.standard_normal((batch, in_features)).astype(np.float32)
        try:
            (y,) = session.run(["y"], {"x": x})
        except Exception as error:   # noqa: BLE001
            raise AssertionError(f"onnxruntime failed on a batch of {batch}: {str(error)[:300]}") from None
        want = np.maximum(x @ W32.T + b32, 0)
        if y.shape != want.shape or not np.allclose(y, want, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"on a batch of {batch} the model's output (shape {y.shape}) differs from "
                                 f"relu(x @ W.T + b) (shape {want.shape}).")


# --------------------------------------------------------------------------------------------------
# q2: param_count, param_bytes
# --------------------------------------------------------------------------------------------------


def size_model(initializers: Sequence[tuple]) -> Any:
    """An ONNX model holding ``initializers``: each ``(shape, dtype)`` stored as ``raw_data``
    (``numpy_helper.from_array``), or ``(shape, dtype, "typed")`` stored in the typed fields
    (``helper.make_tensor`` with a list of values: ``float_data``, ``int32_data``, ...)."""
    from onnx import TensorProto, helper, numpy_helper

    tensors = []
    for i, (shape, dtype, *storage) in enumerate(initializers):
        values = (np.arange(math.prod(shape)) % 7).astype(dtype).reshape(shape)
        name = f"t{i}"
        if storage == ["typed"]:
            onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            tensors.append(helper.make_tensor(name, onnx_type, list(shape), values.flatten().tolist()))
        else:
            tensors.append(numpy_helper.from_array(values, name))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "sizes",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])], tensors)
    return helper.make_model(graph)


def _count_hint(got: Any, model, want: int) -> str:
    dims = [list(t.dims) for t in model.graph.initializer]
    if got == len(dims):
        return "that is the number of initializers (tensors); count their values, the product of each one's dims."
    if got == sum(sum(d) for d in dims):
        return "you added each initializer's dims: multiply them (a 3 x 4 weight holds 12 values)."
    if got == want - sum(1 for d in dims if not d):
        return "a scalar initializer (dims []) holds one value: the product of no dims is 1."
    return "sum over the initializers of the product of their dims."


def _bytes_hint(got: Any, model, count: int, want: int) -> str:
    if got == 4 * count:
        return ("you assumed 4 bytes per value: look up each initializer's element size "
                "(helper.tensor_dtype_to_np_dtype(t.data_type)); float16 is 2 bytes, int8 1, int64 8.")
    if got == 8 * want:
        return "that is bits: itemsize is already in bytes (float32: 4)."
    if got == sum(len(t.raw_data) for t in model.graph.initializer):
        return ("raw_data is empty when the values are stored in the typed fields (float_data, int32_data, ...), "
                "as helper.make_tensor does: compute the product of the dims times the element size.")
    return "sum over the initializers of prod(dims) × the element size of their data type."


def check_param_size(param_count: Callable, param_bytes: Callable, initializers: Sequence[tuple]) -> None:
    """``param_count``/``param_bytes`` of :func:`size_model` ``(initializers)`` against the true sums."""
    from onnx import helper

    model = size_model(initializers)
    shown = ", ".join(f"{tuple(shape)} {np.dtype(dtype).name}" + (" in typed fields" if storage else "")
                      for shape, dtype, *storage in initializers)
    scalar_hint = "a scalar initializer has dims [] and holds one value." if any(not s[0] for s in initializers) else ""
    count = sum(math.prod(shape) for shape, *_ in initializers)
    size = sum(math.prod(t.dims) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
               for t in model.graph.initializer)
    got = _call(param_count, f"param_count of initializers {shown}", model, hint=scalar_hint)
    if got is None or got is Ellipsis:
        raise AssertionError(f"param_count returned {got!r}: replace the `...` with your answer.")
    if got != count:
        raise AssertionError(f"param_count of initializers {shown} is {got!r}, expected {count}: "
                             + _count_hint(got, model, count))
    got = _call(param_bytes, f"param_bytes of initializers {shown}", model,
                hint="look up every element size with helper.tensor_dtype_to_np_dtype(t.data_type), "
                     "int8 and float16 included; " + scalar_hint)
    if got is None or got is Ellipsis:
        raise AssertionError(f"param_bytes returned {got!r}: replace the `...` with your answer.")
    if got != size:
        raise AssertionError(f"param_bytes of initializers {shown} is {got!r}, expected {size}: "
                             + _bytes_hint(got, model, count, size))


# --------------------------------------------------------------------------------------------------
# Planted wrong answers (tools/mutants.py)
# --------------------------------------------------------------------------------------------------

_NODES = ('    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["z"], transB=1), '
          'helper.make_node("Relu", ["z"], ["y"])]\n')
_ITEMSIZE = "np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize"

MUTANTS = {
    "q1": (
        Mutant("transB forgotten", "Gemm needs transB=1", edits=((", transB=1)", ")"),)),
        Mutant("W stored transposed", "store W as given",
               edits=(('numpy_helper.from_array(W, "W")', 'numpy_helper.from_array(W.T, "W")'),)),
        Mutant("W.T stored, no transB", "store W as given and let Gemm transpose it", edits=(
            ('numpy_helper.from_array(W, "W")', 'numpy_helper.from_array(W.T, "W")'), (", transB=1)", ")"))),
        Mutant("bias forgotten", "you forgot the bias", edits=(('["x", "W", "b"]', '["x", "W"]'),)),
        Mutant("no Relu", "add a Relu node", edits=((_NODES, '    nodes = [helper.make_node("Gemm", ["x", "W", "b"], '
                                                             '["y"], transB=1)]\n'),)),
        Mutant("batch fixed at 5", "the batch dimension must be dynamic",
               edits=(('["batch", W.shape[1]]', '[5, W.shape[1]]'), ('["batch", W.shape[0]]', '[5, W.shape[0]]'))),
        Mutant("input named input", 'the input must be named "x"',
               edits=((_NODES, _NODES.replace('["x", "W", "b"]', '["input", "W", "b"]')),
                      ('make_tensor_value_info("x"', 'make_tensor_value_info("input"'))),
        Mutant("float64 kept", "store them as float32",
               edits=(("    W, b = np.asarray(W, np.float32), np.asarray(b, np.float32)\n",
                       "    W, b = np.asarray(W), np.asarray(b)\n"),)),
        Mutant("output declared with in_features", "y has W.shape[0] (out_features)",
               edits=(('["batch", W.shape[0]]', '["batch", W.shape[1]]'),)),
    ),
    "q2": (
        Mutant("number of tensors", "that is the number of initializers",
               edits=(("    return int(sum(np.prod(t.dims, dtype=np.int64) for t in model.graph.initializer))\n",
                       "    return len(model.graph.initializer)\n"),)),
        Mutant("dims added", "multiply them", edits=((
            "    return int(sum(np.prod(t.dims, dtype=np.int64) for t in model.graph.initializer))\n",
            "    return int(sum(sum(t.dims) for t in model.graph.initializer))\n"),)),
        Mutant("reduce over the dims", "a scalar initializer has dims []", edits=((
            "    return int(sum(np.prod(t.dims, dtype=np.int64) for t in model.graph.initializer))\n",
            "    import functools\n    import operator\n"
            "    return sum(functools.reduce(operator.mul, t.dims) for t in model.graph.initializer)\n"),)),
        Mutant("4 bytes per value", "you assumed 4 bytes per value", edits=((_ITEMSIZE, "4"),)),
        Mutant("bits, not bytes", "that is bits", edits=((_ITEMSIZE, _ITEMSIZE + " * 8"),)),
        Mutant("length of raw_data", "raw_data is empty", source=(
            "def param_count(model):\n"
            "    return int(sum(np.prod(t.dims, dtype=np.int64) for t in model.graph.initializer))\n\n\n"
            "def param_bytes(model):\n    return sum(len(t.raw_data) for t in model.graph.initializer)\n")),
        Mutant("a table without int8", "int8 and float16 included", edits=((
            _ITEMSIZE, "{TensorProto.FLOAT: 4, TensorProto.FLOAT16: 2, TensorProto.INT64: 8}[t.data_type]"),)),
    ),
}
