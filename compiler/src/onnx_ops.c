/* ONNX operators: the registry of every supported operator (docs/onnx.md
 * lists them). The lowerings live in the op-family files onnx_ops_*.c;
 * each reads the current node (c->node), infers the shapes, folds
 * constants on the host or emits cl.* calls, and defines the outputs. */
#include <stdio.h>
#include <string.h>

#include "onnx_ops.h"

/* ---------------------------------------------------------------------------
 * The table
 */

/* Attribute specs (onx_check_attrs): the attributes each lowering reads,
 * with the opsets that define them. consumed_inputs (opsets 1-5) was an
 * optimisation hint without effect on the result. */
#define A_LEGACY "consumed_inputs:-5"
#define A_BCAST "axis:-6 broadcast:-6"
#define A_BCAST5 "axis:-6 broadcast:-6 consumed_inputs:-5"
#define A_REDUCE18 "keepdims axes:-17 noop_with_empty_axes:18-"

static const onx_op_t k_ops[] = {
    {"Abs", onx_op_unary, A_LEGACY},
    {"Add", onx_op_binary, A_BCAST5},
    {"And", onx_op_binary, A_BCAST},
    {"AveragePool", onx_op_avgpool,
     "auto_pad kernel_shape pads strides count_include_pad:7- ceil_mode:10- dilations:19-"},
    {"BatchNormalization", onx_op_batchnorm,
     "epsilon momentum consumed_inputs:-5 is_test:-6 spatial:-8 training_mode:14-"},
    {"Cast", onx_op_cast, "to saturate:19- round_mode:24-"},
    {"Ceil", onx_op_unary, A_LEGACY},
    {"Clip", onx_op_clip, "min:-10 max:-10 consumed_inputs:-5"},
    {"Concat", onx_op_concat, "axis"},
    {"Constant", onx_op_constant,
     "value value_float:12- value_floats:12- value_int:12- value_ints:12-"},
    {"ConstantOfShape", onx_op_constant_of_shape, "value"},
    {"Conv", onx_op_conv, "auto_pad dilations group kernel_shape pads strides"},
    {"ConvTranspose", onx_op_conv_transpose,
     "auto_pad dilations group kernel_shape output_padding output_shape pads strides"},
    {"Cos", onx_op_unary, ""},
    {"Div", onx_op_binary, A_BCAST5},
    {"Dropout", onx_op_dropout, "consumed_inputs:-5 is_test:-6 ratio:-11 seed:12-"},
    {"Elu", onx_op_elu, "alpha consumed_inputs:-5"},
    {"Equal", onx_op_binary, A_BCAST},
    {"Erf", onx_op_unary, ""},
    {"Exp", onx_op_unary, A_LEGACY},
    {"Expand", onx_op_expand, ""},
    {"Flatten", onx_op_flatten, "axis"},
    {"Floor", onx_op_unary, A_LEGACY},
    {"Gather", onx_op_gather, "axis"},
    {"Gelu", onx_op_gelu, "approximate"},
    {"Gemm", onx_op_gemm, "alpha beta transA transB broadcast:-6"},
    {"GlobalAveragePool", onx_op_global_pool, ""},
    {"GlobalMaxPool", onx_op_global_pool, ""},
    {"Greater", onx_op_binary, A_BCAST},
    {"GreaterOrEqual", onx_op_binary, ""},
    {"HardSigmoid", onx_op_hard_sigmoid, "alpha beta consumed_inputs:-5"},
    {"HardSwish", onx_op_unary, ""},
    {"Identity", onx_op_identity, ""},
    {"LayerNormalization", onx_op_layernorm, "axis epsilon stash_type"},
    {"LeakyRelu", onx_op_leaky_relu, "alpha consumed_inputs:-5"},
    {"Less", onx_op_binary, A_BCAST},
    {"LessOrEqual", onx_op_binary, ""},
    {"Log", onx_op_unary, A_LEGACY},
    {"LogSoftmax", onx_op_softmax, "axis"},
    {"MatMul", onx_op_matmul, ""},
    {"Max", onx_op_binary, A_LEGACY},
    {"MaxPool", onx_op_maxpool,
     "auto_pad kernel_shape pads strides storage_order:8- dilations:10- ceil_mode:10-"},
    {"Min", onx_op_binary, A_LEGACY},
    {"Mod", onx_op_binary, "fmod"},
    {"Mul", onx_op_binary, A_BCAST5},
    {"Neg", onx_op_unary, A_LEGACY},
    {"Not", onx_op_not, ""},
    {"Or", onx_op_binary, A_BCAST},
    {"Pad", onx_op_pad, "mode paddings:-1 pads:2-10 value:-10"},
    {"Pow", onx_op_binary, A_BCAST},
    {"Range", onx_op_range, "stash_type:27-"},
    {"Reciprocal", onx_op_unary, A_LEGACY},
    {"ReduceMax", onx_op_reduce, A_REDUCE18},
    {"ReduceMean", onx_op_reduce, A_REDUCE18},
    {"ReduceMin", onx_op_reduce, A_REDUCE18},
    {"ReduceProd", onx_op_reduce, A_REDUCE18},
    {"ReduceSum", onx_op_reduce, "keepdims axes:-12 noop_with_empty_axes:13-"},
    {"Relu", onx_op_unary, A_LEGACY},
    {"Reshape", onx_op_reshape, "consumed_inputs:-4 shape:-4 allowzero:14-"},
    {"Round", onx_op_unary, ""},
    {"Resize", onx_op_resize,
     "mode coordinate_transformation_mode:11- cubic_coeff_a:11- exclude_outside:11- "
     "extrapolation_value:11- nearest_mode:11- antialias:18- axes:18- "
     "keep_aspect_ratio_policy:18-"},
    {"Selu", onx_op_selu, "alpha gamma consumed_inputs:-5"},
    {"Shape", onx_op_shape, "start:15- end:15-"},
    {"Sigmoid", onx_op_unary, A_LEGACY},
    {"Sin", onx_op_unary, ""},
    {"Size", onx_op_size, ""},
    {"Slice", onx_op_slice, "starts:-9 ends:-9 axes:-9"},
    {"Softplus", onx_op_unary, ""},
    {"Softmax", onx_op_softmax, "axis"},
    {"Split", onx_op_split, "axis split:-12 num_outputs:18-"},
    {"Sqrt", onx_op_unary, A_LEGACY},
    {"Squeeze", onx_op_squeeze, "axes:-12"},
    {"Sub", onx_op_binary, A_BCAST5},
    {"Tanh", onx_op_unary, A_LEGACY},
    {"Transpose", onx_op_transpose, "perm"},
    {"Unsqueeze", onx_op_unsqueeze, "axes:-12"},
    {"Where", onx_op_where, ""},
    {"Xor", onx_op_binary, A_BCAST},
};

const onx_op_t *onx_find_op(const char *op_type) {
  for (size_t i = 0; i < sizeof(k_ops) / sizeof(k_ops[0]); i++)
    if (strcmp(k_ops[i].name, op_type) == 0) return &k_ops[i];
  return NULL;
}

void onx_supported_ops(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof(k_ops) / sizeof(k_ops[0]) && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", k_ops[i].name);
}
