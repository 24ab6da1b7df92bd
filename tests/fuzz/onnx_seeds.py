#!/usr/bin/env python3
"""Small ONNX seeds for the ONNX frontend fuzzer (the exported examples are 0.5 MB each, too
large to mutate quickly): an MLP block with LayerNorm, MatMul+Add and GELU (erf and tanh),
a gated SiLU MLP with RMSNorm, an FP8 Q/DQ linear, Hugging Face's Llama MLP as the dynamo
exporter writes it (RMSNorm between Casts, Gemm projections, x*sigmoid(x) turned round), and a
static Q/DQ linear with FP8 weight codes and per-channel scales. Hidden size 16, static shapes.

  onnx_seeds.py OUT_DIR"""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
H, F = 16, 32


def const(name, shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


def save(name, nodes, inits, opset=21):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.save(model, out / f"{name}.onnx")


save("gpt_mlp", [
    helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
    helper.make_node("MatMul", ["ln", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
    helper.make_node("Gelu", ["hb"], ["a"], approximate="tanh"),
    helper.make_node("MatMul", ["a", "w2"], ["o"]), helper.make_node("Add", ["o", "x"], ["y"])],
    [const("g", [H]), const("b", [H]), const("w1", [H, F]), const("b1", [F]), const("w2", [F, H])])
save("llama_mlp", [
    helper.make_node("RMSNormalization", ["x", "g"], ["n"], axis=-1, epsilon=1e-6),
    helper.make_node("MatMul", ["n", "wg"], ["gate"]), helper.make_node("Sigmoid", ["gate"], ["sg"]),
    helper.make_node("Mul", ["gate", "sg"], ["silu"]), helper.make_node("MatMul", ["n", "wu"], ["up"]),
    helper.make_node("Mul", ["silu", "up"], ["a"]), helper.make_node("MatMul", ["a", "wd"], ["o"]),
    helper.make_node("Add", ["o", "x"], ["y"])],
    [const("g", [H]), const("wg", [H, F]), const("wu", [H, F]), const("wd", [F, H])], opset=23)
scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
zero = helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], [0.0])
save("fp8_qdq", [
    helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"]),
    helper.make_node("MatMul", ["xd", "w"], ["o"]), helper.make_node("Erf", ["o"], ["e"]), helper.make_node("Add", ["e", "x"], ["y"])],
    [const("w", [H, H]), scale, zero])
save("llama_mlp_hf", [
    helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
    helper.make_node("Pow", ["x32", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
    helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
    helper.make_node("Reciprocal", ["rms"], ["inv"]), helper.make_node("Mul", ["x32", "inv"], ["n32"]),
    helper.make_node("Cast", ["n32"], ["n16"], to=TensorProto.FLOAT), helper.make_node("Mul", ["g", "n16"], ["n"]),
    helper.make_node("Reshape", ["n", "flat"], ["n2"]),
    helper.make_node("Gemm", ["n2", "wg"], ["gate"], transB=1), helper.make_node("Gemm", ["n2", "wu"], ["up"], transB=1),
    helper.make_node("Sigmoid", ["gate"], ["sg"]), helper.make_node("Mul", ["sg", "gate"], ["silu"]),
    helper.make_node("Mul", ["up", "silu"], ["a"]), helper.make_node("Gemm", ["a", "wd"], ["o2"], transB=1),
    helper.make_node("Reshape", ["o2", "shape"], ["o"]), helper.make_node("Add", ["x", "o"], ["y"])],
    [const("g", [H]), const("wg", [F, H]), const("wu", [F, H]), const("wd", [H, F]),
     numpy_helper.from_array(np.array(2.0, np.float32), "two"), numpy_helper.from_array(np.array([-1], np.int64), "axes"),
     numpy_helper.from_array(np.array(1e-6, np.float32), "eps"), numpy_helper.from_array(np.array([8, H], np.int64), "flat"),
     numpy_helper.from_array(np.array([2, 4, H], np.int64), "shape")], opset=18)
codes = helper.make_tensor("w8", TensorProto.FLOAT8E4M3FN, [H, H], (rng.standard_normal(H * H) * 50).clip(-448, 448).tolist())
save("fp8_static", [
    helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
    helper.make_node("DequantizeLinear", ["w8", "ws"], ["w"], axis=1),
    helper.make_node("MatMul", ["xd", "w"], ["o"]), helper.make_node("Add", ["o", "x"], ["y"])],
    [codes, numpy_helper.from_array((np.arange(H, dtype=np.float32) + 1) * 1e-3, "ws"), scale, zero])
print(f"wrote 5 seeds to {out}")
