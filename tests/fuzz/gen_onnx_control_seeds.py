"""Writes the control-flow seeds of fuzz_onnx (tests/fuzz/corpus/fuzz_onnx/):
small models with If, Loop and Scan whose every shape is static, so that
vmcc_onnx_compile without options lowers them all the way (the node models
of libonnx-testdata, the other seeds, bind their inputs as graph inputs and
mostly stop earlier). Deterministic; run with the onnx package of
scripts/onnx-node-1.23.sh's venv:

    build/pyenv/bin/python tests/fuzz/gen_onnx_control_seeds.py tests/fuzz/corpus/fuzz_onnx

tests/compiler/test_onnx_hostile_control.c checks that each compiles."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def f(n, s):
    return h.make_tensor_value_info(n, T.FLOAT, s)


def save(out, name, nodes, ins, outs, inits=(), opset=17):
    g = h.make_graph(nodes, name, ins, outs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="vmrpc seeds")
    m.ir_version = 8
    onnx.checker.check_model(m)
    with open(os.path.join(out, name + ".onnx"), "wb") as fh:
        fh.write(m.SerializeToString(deterministic=True))


def main(out):
    w = nh.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5, "w")
    zero = nh.from_array(np.array(0, np.float32), "zero")
    # If with a run-time condition, branches reading an outer initializer
    then = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("Mul", ["r", "w"], ["t"])],
                        "then", [], [f("t", [2, 3])])
    els = h.make_graph([h.make_node("Sub", ["x", "w"], ["e"])], "else", [], [f("e", [2, 3])])
    save(out, "if_run_time", [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                              h.make_node("Greater", ["s", "zero"], ["c"]),
                              h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els)],
         [f("x", [2, 3])], [f("y", [2, 3])], [w, zero])
    # If nested in a branch, the inner condition a graph input
    inner = h.make_node("If", ["d"], ["u"],
                        then_branch=h.make_graph([h.make_node("Add", ["x", "w"], ["p"])], "it", [],
                                                 [f("p", [2, 3])]),
                        else_branch=h.make_graph([h.make_node("Mul", ["x", "w"], ["q"])], "ie", [],
                                                 [f("q", [2, 3])]))
    save(out, "if_nested", [h.make_node("If", ["c"], ["z"],
                                        then_branch=h.make_graph([inner], "t", [], [f("u", [2, 3])]),
                                        else_branch=h.make_graph([h.make_node("Neg", ["x"], ["n"])],
                                                                 "e", [], [f("n", [2, 3])]))],
         [f("x", [2, 3]), h.make_tensor_value_info("c", T.BOOL, []),
          h.make_tensor_value_info("d", T.BOOL, [])], [f("z", [2, 3])], [w])
    # If whose condition folds (a constant): only one branch is lowered
    save(out, "if_folded", [h.make_node("Constant", [], ["c"], value=nh.from_array(np.array(True))),
                            h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els)],
         [f("x", [2, 3])], [f("y", [2, 3])], [w])
    # If with a run-time condition whose else_branch cannot run with x's
    # shape (MatMul of [2, 3] by itself): compiled into a function that fails
    save(out, "if_invalid_branch",
         [h.make_node("If", ["c"], ["y"],
                      then_branch=h.make_graph([h.make_node("Relu", ["x"], ["r"])], "t", [],
                                               [f("r", [2, 3])]),
                      else_branch=h.make_graph([h.make_node("MatMul", ["x", "x"], ["m"])], "e",
                                               [], [f("m", [2, 3])]))],
         [f("x", [2, 3]), h.make_tensor_value_info("c", T.BOOL, [])], [f("y", [2, 3])])
    # Loop with a run-time trip count and condition: a VM loop
    body = h.make_graph([h.make_node("Add", ["y_in", "x"], ["y_out"]),
                         h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
                         h.make_node("Less", ["s", "lim"], ["c_out"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []),
                         h.make_tensor_value_info("c_in", T.BOOL, []), f("y_in", [2, 3])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), f("y_out", [2, 3])])
    save(out, "loop_run_time", [h.make_node("Loop", ["M", "c0", "y0"], ["y"], body=body)],
         [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("c0", T.BOOL, []),
          f("y0", [2, 3]), f("x", [2, 3]), f("lim", [])], [f("y", [2, 3])])
    # Loop with a constant trip count and scan outputs: unrolled, the
    # iteration number indexing a slice
    lb = h.make_graph([h.make_node("Unsqueeze", ["i", "ax"], ["st"]),
                       h.make_node("Add", ["st", "one"], ["en"]),
                       h.make_node("Slice", ["x", "st", "en"], ["xi"]),
                       h.make_node("Add", ["y_in", "xi"], ["y_out"]),
                       h.make_node("Identity", ["c_in"], ["c_out"]),
                       h.make_node("Identity", ["y_out"], ["z"])], "lb",
                      [h.make_tensor_value_info("i", T.INT64, []),
                       h.make_tensor_value_info("c_in", T.BOOL, []), f("y_in", [1])],
                      [h.make_tensor_value_info("c_out", T.BOOL, []), f("y_out", [1]), f("z", [1])])
    save(out, "loop_unrolled", [h.make_node("Loop", ["M", "", "y0"], ["y", "zs"], body=lb)],
         [f("y0", [1]), f("x", [5])], [f("y", [1]), f("zs", [5, 1])],
         [nh.from_array(np.array(5, np.int64), "M"), nh.from_array(np.array([0], np.int64), "ax"),
          nh.from_array(np.array([1], np.int64), "one")])
    # Scan: two states, reversed input, output on axis 1
    sb = h.make_graph([h.make_node("Add", ["s_in", "xt"], ["s_out"]),
                       h.make_node("Mul", ["p_in", "xt"], ["p_out"]),
                       h.make_node("Mul", ["s_out", "xt"], ["z"])], "sb",
                      [f("s_in", [3]), f("p_in", [3]), f("xt", [3])],
                      [f("s_out", [3]), f("p_out", [3]), f("z", [3])])
    save(out, "scan", [h.make_node("Scan", ["s0", "p0", "x"], ["s", "p", "zs"], body=sb,
                                   num_scan_inputs=1, scan_input_directions=[1],
                                   scan_output_axes=[1])],
         [f("s0", [3]), f("p0", [3]), f("x", [4, 3])], [f("s", [3]), f("p", [3]), f("zs", [3, 4])],
         opset=11)


if __name__ == "__main__":
    main(sys.argv[1])
