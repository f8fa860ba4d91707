/* ONNX operators: the registry of every supported operator (docs/onnx.md
 * lists them). The lowerings live in the op-family files onnx_ops_*.c;
 * each reads the current node (c->node), infers the shapes, folds
 * constants on the host or emits cl.* calls, and defines the outputs. */
#include <stdio.h>
#include <string.h>

#include "onnx_ops.h"

/* ---------------------------------------------------------------------------
 * The registry: one row per operator, consulted in one place
 * (onx_resolve_op, for every node before it is lowered or skipped).
 *
 * A row: {op_type, domain ("" the default one), the first and last opset
 * it lowers (0: no bound; today's rows take every opset the importer
 * takes, 1 to 28), the attributes it reads (onx_check_attrs' spec: any
 * other is refused), the lowering, and the lowering's arg (which unary or
 * binary operation, as c->op->arg)}.
 *
 * Adding an operator:
 *  1. Write `vm_status_t onx_op_foo(onx_ctx_t *c)` in its family's file
 *     (onnx_ops_elementwise.c, _nn.c, _reduce.c, _shape.c; a new family
 *     gets a new onnx_ops_<family>.c) and declare it in onnx_ops.h.
 *     Read inputs with onx_in_req / onx_in, attributes with onx_attr_*,
 *     check every shape it computes with onx_check_shape and every size
 *     with vmrpc/checked.h, fold constant inputs on the host (onx_def_const)
 *     or emit cl.* calls (new_t, call) and define each output
 *     (onx_bind_out / onx_def_out / onx_def_view). Propagate statuses
 *     with VM_RETURN_IF_ERROR; refuse what it cannot do with onx_node_err
 *     or onx_unsupported_attr (UNIMPLEMENTED, naming what is supported).
 *  2. Add its row to the table below, listing every attribute
 *     the lowering reads with the opsets that define it.
 *  3. Add it to docs/onnx.md's operator table, remove its cases from
 *     tests/compiler/onnx_node_known_failures.txt as they pass, and test
 *     its refusals (tests/compiler/test_onnx_import.c).
 */

/* Attribute specs (onx_check_attrs): the attributes each lowering reads,
 * with the opsets that define them. consumed_inputs (opsets 1-5) was an
 * optimisation hint without effect on the result. */
#define A_LEGACY "consumed_inputs:-5"
#define A_BCAST "axis:-6 broadcast:-6"
#define A_BCAST5 "axis:-6 broadcast:-6 consumed_inputs:-5"
#define A_REDUCE18 "keepdims axes:-17 noop_with_empty_axes:18-"

#define A_RECURRENT "activation_alpha activation_beta activations clip direction hidden_size"

static const onx_op_t k_ops[] = {
    {"Abs", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_ABS},
    {"Add", "", 0, 0, A_BCAST5, onx_op_binary, B_ADD},
    {"And", "", 0, 0, A_BCAST, onx_op_binary, B_AND},
    {"AveragePool", "", 0, 0,
     "auto_pad kernel_shape pads strides count_include_pad:7- ceil_mode:10- dilations:19-",
     onx_op_avgpool, 0},
    {"BatchNormalization", "", 0, 0,
     "epsilon momentum consumed_inputs:-5 is_test:-6 spatial:-8 training_mode:14-",
     onx_op_batchnorm, 0},
    {"Cast", "", 0, 0, "to saturate:19- round_mode:24-", onx_op_cast, 0},
    {"Ceil", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_CEIL},
    {"Clip", "", 0, 0, "min:-10 max:-10 consumed_inputs:-5", onx_op_clip, 0},
    {"Concat", "", 0, 0, "axis", onx_op_concat, 0},
    {"Constant", "", 0, 0, "value value_float:12- value_floats:12- value_int:12- value_ints:12-",
     onx_op_constant, 0},
    {"ConstantOfShape", "", 0, 0, "value", onx_op_constant_of_shape, 0},
    {"Conv", "", 0, 0, "auto_pad dilations group kernel_shape pads strides", onx_op_conv, 0},
    {"ConvTranspose", "", 0, 0,
     "auto_pad dilations group kernel_shape output_padding output_shape pads strides",
     onx_op_conv_transpose, 0},
    {"Cos", "", 0, 0, "", onx_op_unary, ONX_U_COS},
    {"Div", "", 0, 0, A_BCAST5, onx_op_binary, B_DIV},
    {"Dropout", "", 0, 0, "consumed_inputs:-5 is_test:-6 ratio:-11 seed:12-", onx_op_dropout, 0},
    {"Elu", "", 0, 0, "alpha consumed_inputs:-5", onx_op_elu, 0},
    {"Equal", "", 0, 0, A_BCAST, onx_op_binary, B_EQ},
    {"Erf", "", 0, 0, "", onx_op_unary, ONX_U_ERF},
    {"Exp", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_EXP},
    {"Expand", "", 0, 0, "", onx_op_expand, 0},
    {"Flatten", "", 0, 0, "axis", onx_op_flatten, 0},
    {"Floor", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_FLOOR},
    {"Gather", "", 0, 0, "axis", onx_op_gather, 0},
    {"Gelu", "", 0, 0, "approximate", onx_op_gelu, 0},
    {"Gemm", "", 0, 0, "alpha beta transA transB broadcast:-6", onx_op_gemm, 0},
    {"GlobalAveragePool", "", 0, 0, "", onx_op_global_pool, 0},
    {"GlobalMaxPool", "", 0, 0, "", onx_op_global_pool, 1},
    {"Greater", "", 0, 0, A_BCAST, onx_op_binary, B_GT},
    {"GreaterOrEqual", "", 0, 0, "", onx_op_binary, B_GE},
    {"HardSigmoid", "", 0, 0, "alpha beta consumed_inputs:-5", onx_op_hard_sigmoid, 0},
    {"HardSwish", "", 0, 0, "", onx_op_unary, ONX_U_HARD_SWISH},
    {"Identity", "", 0, 0, "", onx_op_identity, 0},
    {"LayerNormalization", "", 0, 0, "axis epsilon stash_type", onx_op_layernorm, 0},
    {"LeakyRelu", "", 0, 0, "alpha consumed_inputs:-5", onx_op_leaky_relu, 0},
    {"Less", "", 0, 0, A_BCAST, onx_op_binary, B_LT},
    {"LessOrEqual", "", 0, 0, "", onx_op_binary, B_LE},
    {"Log", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_LOG},
    {"LogSoftmax", "", 0, 0, "axis", onx_op_softmax, 1},
    {"MatMul", "", 0, 0, "", onx_op_matmul, 0},
    {"Max", "", 0, 0, A_LEGACY, onx_op_binary, B_MAX},
    {"MaxPool", "", 0, 0,
     "auto_pad kernel_shape pads strides storage_order:8- dilations:10- ceil_mode:10-",
     onx_op_maxpool, 0},
    {"Min", "", 0, 0, A_LEGACY, onx_op_binary, B_MIN},
    {"Mod", "", 0, 0, "fmod", onx_op_binary, B_MOD},
    {"Mul", "", 0, 0, A_BCAST5, onx_op_binary, B_MUL},
    {"Neg", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_NEG},
    {"Not", "", 0, 0, "", onx_op_not, 0},
    {"Or", "", 0, 0, A_BCAST, onx_op_binary, B_OR},
    {"Pad", "", 0, 0, "mode paddings:-1 pads:2-10 value:-10", onx_op_pad, 0},
    {"Pow", "", 0, 0, A_BCAST, onx_op_binary, B_POW},
    {"Range", "", 0, 0, "stash_type:27-", onx_op_range, 0},
    {"Reciprocal", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_RECIPROCAL},
    {"ReduceMax", "", 0, 0, A_REDUCE18, onx_op_reduce, ONX_R_MAX},
    {"ReduceMean", "", 0, 0, A_REDUCE18, onx_op_reduce, ONX_R_MEAN},
    {"ReduceMin", "", 0, 0, A_REDUCE18, onx_op_reduce, ONX_R_MIN},
    {"ReduceProd", "", 0, 0, A_REDUCE18, onx_op_reduce, ONX_R_PROD},
    {"ReduceSum", "", 0, 0, "keepdims axes:-12 noop_with_empty_axes:13-", onx_op_reduce, ONX_R_SUM},
    {"Relu", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_RELU},
    {"Reshape", "", 0, 0, "consumed_inputs:-4 shape:-4 allowzero:14-", onx_op_reshape, 0},
    {"Round", "", 0, 0, "", onx_op_unary, ONX_U_ROUND},
    {"Resize", "", 0, 0,
     "mode coordinate_transformation_mode:11- cubic_coeff_a:11- exclude_outside:11- "
     "extrapolation_value:11- nearest_mode:11- antialias:18- axes:18- "
     "keep_aspect_ratio_policy:18-",
     onx_op_resize, 0},
    {"Selu", "", 0, 0, "alpha gamma consumed_inputs:-5", onx_op_selu, 0},
    {"Shape", "", 0, 0, "start:15- end:15-", onx_op_shape, 0},
    {"Sigmoid", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_SIGMOID},
    {"Sin", "", 0, 0, "", onx_op_unary, ONX_U_SIN},
    {"Size", "", 0, 0, "", onx_op_size, 0},
    {"Slice", "", 0, 0, "starts:-9 ends:-9 axes:-9", onx_op_slice, 0},
    {"Softplus", "", 0, 0, "", onx_op_unary, ONX_U_SOFTPLUS},
    {"Softmax", "", 0, 0, "axis", onx_op_softmax, 0},
    {"Split", "", 0, 0, "axis split:-12 num_outputs:18-", onx_op_split, 0},
    {"Sqrt", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_SQRT},
    {"Squeeze", "", 0, 0, "axes:-12", onx_op_squeeze, 0},
    {"Sub", "", 0, 0, A_BCAST5, onx_op_binary, B_SUB},
    {"Tanh", "", 0, 0, A_LEGACY, onx_op_unary, ONX_U_TANH},
    {"Transpose", "", 0, 0, "perm", onx_op_transpose, 0},
    {"Unsqueeze", "", 0, 0, "axes:-12", onx_op_unsqueeze, 0},
    {"Where", "", 0, 0, "", onx_op_where, 0},
    {"Xor", "", 0, 0, A_BCAST, onx_op_binary, B_XOR},
    /* quantization (onnx_ops_quant.c) */
    {"QuantizeLinear", "", 10, 0,
     "axis:13- saturate:19- block_size:21- output_dtype:21- precision:23-", onx_op_quantize, 0},
    {"DequantizeLinear", "", 10, 0, "axis:13- block_size:21- output_dtype:23-", onx_op_dequantize,
     0},
    {"DynamicQuantizeLinear", "", 11, 0, "", onx_op_dynamic_quantize, 0},
    {"MatMulInteger", "", 10, 0, "", onx_op_matmul_integer, 0},
    {"ConvInteger", "", 10, 0, "auto_pad dilations group kernel_shape pads strides",
     onx_op_conv_integer, 0},
    {"QLinearMatMul", "", 10, 0, "", onx_op_qlinear_matmul, 0},
    {"QLinearConv", "", 10, 0, "auto_pad dilations group kernel_shape pads strides",
     onx_op_qlinear_conv, 0},
    {"QGemm", "com.microsoft", 0, 0, "alpha transA transB", onx_op_qgemm, 0},
    {"QLinearAdd", "com.microsoft", 0, 0, "", onx_op_qlinear_binary, 0},
    {"QLinearMul", "com.microsoft", 0, 0, "", onx_op_qlinear_binary, 1},
    {"QLinearSigmoid", "com.microsoft", 0, 0, "", onx_op_qlinear_unary, 0},
    {"QLinearLeakyRelu", "com.microsoft", 0, 0, "alpha", onx_op_qlinear_unary, 1},
    {"QLinearGlobalAveragePool", "com.microsoft", 0, 0, "channels_last", onx_op_qlinear_global_avg,
     0},
    {"QLinearConcat", "com.microsoft", 0, 0, "axis", onx_op_qlinear_concat, 0},
    {"QuantizeLinear", "com.microsoft", 0, 0, "axis", onx_op_quantize, 0},
    {"DequantizeLinear", "com.microsoft", 0, 0, "axis", onx_op_dequantize, 0},
    /* recurrent layers (onnx_ops_recurrent.c); output_sequence (opsets
     * 1-6) only said whether Y is computed, which the outputs say too */
    {"GRU", "", 0, 0, A_RECURRENT " linear_before_reset:3- layout:14- output_sequence:-6",
     onx_op_recurrent, 1},
    {"LSTM", "", 0, 0, A_RECURRENT " input_forget layout:14- output_sequence:-6", onx_op_recurrent,
     2},
    {"RNN", "", 0, 0, A_RECURRENT " layout:14- output_sequence:-6", onx_op_recurrent, 0},
    {"DynamicQuantizeLSTM", "com.microsoft", 0, 0, A_RECURRENT " input_forget", onx_op_dq_lstm, 0},
    /* control flow (onnx_ops_control.c) */
    {"If", "", 0, 0, "then_branch else_branch", onx_op_if, 0},
    {"Loop", "", 0, 0, "body", onx_op_loop, 0},
    {"Scan", "", 8, 0,
     "body num_scan_inputs directions:8-8 scan_input_directions:9- scan_output_directions:9- "
     "scan_input_axes:9- scan_output_axes:9-",
     onx_op_scan, 0},
    /* ---- onnx_ops_index.c: constant indices, one Gather ---- */
    {"CenterCropPad", "", 0, 0, "axes", onx_op_center_crop_pad, 0},
    {"Compress", "", 0, 0, "axis", onx_op_compress, 0},
    {"GatherElements", "", 0, 0, "axis", onx_op_gather_elements, 0},
    {"GatherND", "", 0, 0, "batch_dims:12-", onx_op_gather_nd, 0},
    {"MaxUnpool", "", 0, 0, "kernel_shape pads strides", onx_op_max_unpool, 0},
    {"OneHot", "", 0, 0, "axis", onx_op_one_hot, 0},
    {"ReverseSequence", "", 0, 0, "batch_axis time_axis", onx_op_reverse_sequence, 0},
    {"Scatter", "", 0, 10, "axis", onx_op_scatter_elements, 0},
    {"ScatterElements", "", 0, 0, "axis reduction:16-", onx_op_scatter_elements, 0},
    {"ScatterND", "", 0, 0, "reduction:16-", onx_op_scatter_nd, 0},
    /* ---- onnx_ops_compose.c: one elementwise program, one call, or
     * sub-nodes (onnx_sub.c) ---- */
    {"Acos", "", 0, 0, "", onx_op_ew, ONX_E_ACOS},
    {"AffineGrid", "", 0, 0, "align_corners", onx_op_affine_grid, 0},
    {"Acosh", "", 0, 0, "", onx_op_ew, ONX_E_ACOSH},
    {"Attention", "", 23, 0,
     "is_causal kv_num_heads q_num_heads qk_matmul_output_mode scale softcap softmax_precision "
     "left_window_size:25- right_window_size:25-",
     onx_op_attention, 0},
    {"ArgMax", "", 0, 0, "axis keepdims select_last_index:12-", onx_op_argmax, 0},
    {"ArgMin", "", 0, 0, "axis keepdims select_last_index:12-", onx_op_argmax, 1},
    {"Asin", "", 0, 0, "", onx_op_ew, ONX_E_ASIN},
    {"Asinh", "", 0, 0, "", onx_op_ew, ONX_E_ASINH},
    {"Atan", "", 0, 0, "", onx_op_ew, ONX_E_ATAN},
    {"Atanh", "", 0, 0, "", onx_op_ew, ONX_E_ATANH},
    {"BitCast", "", 26, 0, "to", onx_op_bitcast, 0},
    {"BitShift", "", 0, 0, "direction", onx_op_bitshift, 0},
    {"BitwiseAnd", "", 0, 0, "", onx_op_bitwise, 0},
    {"BitwiseNot", "", 0, 0, "", onx_op_bitwise, 3},
    {"BitwiseOr", "", 0, 0, "", onx_op_bitwise, 1},
    {"BitwiseXor", "", 0, 0, "", onx_op_bitwise, 2},
    {"BlackmanWindow", "", 0, 0, "output_datatype periodic", onx_op_window, 2},
    {"CastLike", "", 0, 0, "saturate round_mode:25-", onx_op_cast_like, 0},
    {"Celu", "", 0, 0, "alpha", onx_op_ew, ONX_E_CELU},
    {"Col2Im", "", 0, 0, "dilations pads strides", onx_op_col2im, 0},
    {"Cosh", "", 0, 0, "", onx_op_ew, ONX_E_COSH},
    {"DFT", "", 17, 0, "axis:-19 inverse onesided", onx_op_dft, 0},
    {"DepthToSpace", "", 0, 0, "blocksize mode:11-", onx_op_depth_space, 0},
    {"EyeLike", "", 0, 0, "dtype k", onx_op_eye_like, 0},
    {"GroupNormalization", "", 21, 0, "epsilon num_groups stash_type", onx_op_group_norm, 0},
    {"HammingWindow", "", 0, 0, "output_datatype periodic", onx_op_window, 1},
    {"HannWindow", "", 0, 0, "output_datatype periodic", onx_op_window, 0},
    {"Hardmax", "", 13, 0, "axis", onx_op_hardmax, 0},
    {"InstanceNormalization", "", 0, 0, "epsilon consumed_inputs:-5", onx_op_instance_norm, 0},
    {"IsInf", "", 0, 0, "detect_negative detect_positive", onx_op_isinf, 0},
    {"IsNaN", "", 0, 0, "", onx_op_ew, ONX_E_ISNAN},
    {"LRN", "", 0, 0, "alpha beta bias size", onx_op_lrn, 0},
    {"LpPool", "", 0, 0, "auto_pad ceil_mode:18- dilations:18- kernel_shape p pads strides",
     onx_op_lp_pool, 0},
    {"LpNormalization", "", 0, 0, "axis p", onx_op_lp_norm, 0},
    {"Mean", "", 0, 0, A_LEGACY, onx_op_variadic, 1},
    {"MeanVarianceNormalization", "", 0, 0, "axes", onx_op_mvn, 0},
    {"Mish", "", 0, 0, "", onx_op_ew, ONX_E_MISH},
    {"NegativeLogLikelihoodLoss", "", 0, 0, "ignore_index reduction", onx_op_nll, 0},
    {"PRelu", "", 0, 0, A_LEGACY, onx_op_ew, ONX_E_PRELU},
    {"ReduceL1", "", 0, 0, A_REDUCE18, onx_op_reduce_composite, ONX_RC_L1},
    {"ReduceL2", "", 0, 0, A_REDUCE18, onx_op_reduce_composite, ONX_RC_L2},
    {"ReduceLogSum", "", 0, 0, A_REDUCE18, onx_op_reduce_composite, ONX_RC_LOG_SUM},
    {"ReduceLogSumExp", "", 0, 0, A_REDUCE18, onx_op_reduce_composite, ONX_RC_LOG_SUM_EXP},
    {"ReduceSumSquare", "", 0, 0, A_REDUCE18, onx_op_reduce_composite, ONX_RC_SUM_SQUARE},
    {"RotaryEmbedding", "", 23, 0, "interleaved num_heads rotary_embedding_dim", onx_op_rotary, 0},
    {"RMSNormalization", "", 0, 0, "axis epsilon stash_type", onx_op_rms_norm, 0},
    {"Shrink", "", 0, 0, "bias lambd", onx_op_ew, ONX_E_SHRINK},
    {"Sign", "", 0, 0, "", onx_op_ew, ONX_E_SIGN},
    {"Sinh", "", 0, 0, "", onx_op_ew, ONX_E_SINH},
    {"SoftmaxCrossEntropyLoss", "", 0, 0, "ignore_index reduction", onx_op_nll, 1},
    {"Softsign", "", 0, 0, "", onx_op_ew, ONX_E_SOFTSIGN},
    {"SpaceToDepth", "", 0, 0, "blocksize mode:28-", onx_op_depth_space, 1},
    {"Sum", "", 0, 0, A_LEGACY, onx_op_variadic, 0},
    {"Swish", "", 0, 0, "alpha", onx_op_ew, ONX_E_SWISH},
    {"SwiGLU", "", 0, 0, "alpha", onx_op_swiglu, 0},
    {"Tan", "", 0, 0, "", onx_op_ew, ONX_E_TAN},
    {"ThresholdedRelu", "", 0, 0, "alpha", onx_op_ew, ONX_E_THRESHOLDED_RELU},
    {"Tile", "", 0, 0, "", onx_op_tile, 0},
    {"Trilu", "", 0, 0, "upper", onx_op_trilu, 0},
    {"Upsample", "", 7, 9, "mode scales:-8", onx_op_upsample, 0},
    /* ---- onnx_ops_attention.c ---- */
    {"CausalConvWithState", "", 27, 0, "activation", onx_op_causal_conv, 0},
    {"LinearAttention", "", 27, 0, "chunk_size kv_num_heads q_num_heads scale update_rule",
     onx_op_linear_attention, 0},
    {"TfIdfVectorizer", "", 9, 0,
     "max_gram_length max_skip_count min_gram_length mode ngram_counts ngram_indexes pool_int64s "
     "pool_strings weights",
     onx_op_tfidf, 0},
    {"FlexAttention", "ai.onnx.preview", 0, 0, "prob_mod scale score_mod softmax_precision",
     onx_op_flex_attention, 0},
    /* ---- onnx_ops_spatial.c: sampling and spatial operators (MaxPool's
     * Indices output is handed over by its row above) ---- */
    {"DeformConv", "", 19, 0, "dilations group kernel_shape offset_group pads strides",
     onx_op_deform_conv, 0},
    {"Det", "", 11, 0, "", onx_op_det, 0},
    {"GridSample", "", 16, 0, "align_corners mode padding_mode", onx_op_grid_sample, 0},
    {"MelWeightMatrix", "", 17, 0, "output_datatype", onx_op_mel_weight_matrix, 0},
    {"RoiAlign", "", 10, 0,
     "coordinate_transformation_mode:16- mode output_height output_width sampling_ratio "
     "spatial_scale",
     onx_op_roi_align, 0},
    {"STFT", "", 17, 0, "onesided", onx_op_stft, 0},
    /* onnx_ops_select.c */
    {"CumSum", "", 0, 0, "exclusive reverse", onx_op_cumulative, 0},
    {"CumProd", "", 26, 0, "exclusive reverse", onx_op_cumulative, 1},
    {"TensorScatter", "", 24, 0, "axis mode", onx_op_tensor_scatter, 0},
    {"TopK", "", 0, 0, "axis k:-9 largest:11- sorted:11-", onx_op_topk, 0},
    {"NonZero", "", 9, 0, "", onx_op_nonzero, 0},
    {"Unique", "", 11, 0, "axis sorted", onx_op_unique, 0},
    {"NonMaxSuppression", "", 10, 0, "center_point_box", onx_op_nms, 0},
    {"Einsum", "", 12, 0, "equation", onx_op_einsum, 0},
};

#define NUM_OPS (sizeof(k_ops) / sizeof(k_ops[0]))

/* The operators of domain dom, in the table's order. */
static void supported_ops(const char *dom, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < NUM_OPS && used < len; i++)
    if (strcmp(k_ops[i].domain, dom) == 0)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", k_ops[i].name);
}

/* A node's domain as the registry spells it ("" the default one). */
static const char *node_domain(const Onnx__NodeProto *n) {
  return n->domain && strcmp(n->domain, "ai.onnx") != 0 ? n->domain : "";
}

const onx_op_t *onx_find_node_op(const Onnx__NodeProto *n) {
  const char *dom = node_domain(n);
  for (size_t i = 0; n->op_type && i < NUM_OPS; i++)
    if (strcmp(k_ops[i].domain, dom) == 0 && strcmp(k_ops[i].name, n->op_type) == 0)
      return &k_ops[i];
  return NULL;
}

const onx_op_t *onx_find_op(const char *op_type) {
  for (size_t i = 0; op_type && i < NUM_OPS; i++)
    if (!k_ops[i].domain[0] && strcmp(k_ops[i].name, op_type) == 0) return &k_ops[i];
  return NULL;
}

vm_status_t onx_resolve_op(const onx_ctx_t *c, const onx_op_t **out) {
  const Onnx__NodeProto *n = c->node;
  const char *dom = node_domain(n);
  const onx_op_t *op = NULL;
  int dom_known = 0;
  *out = NULL;
  for (size_t i = 0; i < NUM_OPS && !op; i++) {
    if (strcmp(k_ops[i].domain, dom) != 0) continue;
    dom_known = 1;
    if (strcmp(k_ops[i].name, n->op_type) == 0) op = &k_ops[i];
  }
  if (!dom_known)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "domain '%.60s': supported: the default domain, com.microsoft, "
                        "ai.onnx.preview",
                        dom);
  if (!op) {
    char ops[4096];
    supported_ops(dom, ops, sizeof(ops));
    if (dom[0])
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "operator %.40s of domain '%.60s' is not supported: supported: %s",
                          n->op_type, dom, ops);
    return onx_node_err(c, VM_UNIMPLEMENTED, "operator %.40s is not supported: supported: %s",
                        n->op_type, ops);
  }
  if ((op->opset_lo && c->opset < op->opset_lo) || (op->opset_hi && c->opset > op->opset_hi)) {
    char lo[24] = "1", hi[24] = "the newest";
    if (op->opset_lo) snprintf(lo, sizeof(lo), "%d", op->opset_lo);
    if (op->opset_hi) snprintf(hi, sizeof(hi), "%d", op->opset_hi);
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "operator %.40s at opset %lld is not supported: supported: opsets %s to %s",
                        n->op_type, (long long)c->opset, lo, hi);
  }
  VM_RETURN_IF_ERROR(onx_check_attrs(c, op->attrs));
  *out = op;
  return VM_STATUS_OK;
}
