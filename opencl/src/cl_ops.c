/* Registration of the cl.* operator library (docs/operators.md). */
#include "cl_ops_internal.h"

typedef struct op_entry {
  const char *name;
  vm_packed_fn fn;
  const char *user; /* the operation's short name for shared functions */
} op_entry_t;

static const op_entry_t ops[] = {
    {"cl.gemm", vmcl_op_gemm, NULL},
    {"cl.gemm_strided", vmcl_op_gemm_strided, NULL},
    {"cl.gemm_packed", vmcl_op_gemm_packed, NULL},
    {"cl.conv2d", vmcl_op_conv2d, NULL},
    {"cl.conv_transpose2d", vmcl_op_conv_transpose2d, NULL},
    {"cl.binary.add", vmcl_op_binary, "add"},
    {"cl.binary.sub", vmcl_op_binary, "sub"},
    {"cl.binary.mul", vmcl_op_binary, "mul"},
    {"cl.binary.div", vmcl_op_binary, "div"},
    {"cl.binary.max", vmcl_op_binary, "max"},
    {"cl.binary.min", vmcl_op_binary, "min"},
    {"cl.binary.pow", vmcl_op_binary, "pow"},
    {"cl.binary.bitwise_and", vmcl_op_binary, "bitwise_and"},
    {"cl.binary.bitwise_or", vmcl_op_binary, "bitwise_or"},
    {"cl.binary.bitwise_xor", vmcl_op_binary, "bitwise_xor"},
    {"cl.binary.equal", vmcl_op_binary, "equal"},
    {"cl.binary.less", vmcl_op_binary, "less"},
    {"cl.binary.less_equal", vmcl_op_binary, "less_equal"},
    {"cl.binary.greater", vmcl_op_binary, "greater"},
    {"cl.binary.greater_equal", vmcl_op_binary, "greater_equal"},
    {"cl.where", vmcl_op_where, NULL},
    {"cl.unary.relu", vmcl_op_unary, "relu"},
    {"cl.unary.gelu", vmcl_op_unary, "gelu"},
    {"cl.unary.sigmoid", vmcl_op_unary, "sigmoid"},
    {"cl.unary.tanh", vmcl_op_unary, "tanh"},
    {"cl.unary.exp", vmcl_op_unary, "exp"},
    {"cl.unary.log", vmcl_op_unary, "log"},
    {"cl.unary.sqrt", vmcl_op_unary, "sqrt"},
    {"cl.unary.neg", vmcl_op_unary, "neg"},
    {"cl.unary.abs", vmcl_op_unary, "abs"},
    {"cl.unary.erf", vmcl_op_unary, "erf"},
    {"cl.unary.gelu_tanh", vmcl_op_unary, "gelu_tanh"},
    {"cl.unary.reciprocal", vmcl_op_unary, "reciprocal"},
    {"cl.unary.floor", vmcl_op_unary, "floor"},
    {"cl.unary.ceil", vmcl_op_unary, "ceil"},
    {"cl.unary.round", vmcl_op_unary, "round"},
    {"cl.unary.sin", vmcl_op_unary, "sin"},
    {"cl.unary.cos", vmcl_op_unary, "cos"},
    {"cl.unary.softplus", vmcl_op_unary, "softplus"},
    {"cl.unary.hard_swish", vmcl_op_unary, "hard_swish"},
    {"cl.unary.leaky_relu", vmcl_op_unary, "leaky_relu"},
    {"cl.unary.hard_sigmoid", vmcl_op_unary, "hard_sigmoid"},
    {"cl.unary.clip", vmcl_op_unary, "clip"},
    {"cl.unary.elu", vmcl_op_unary, "elu"},
    {"cl.unary.selu", vmcl_op_unary, "selu"},
    {"cl.softmax", vmcl_op_softmax, NULL},
    {"cl.layer_norm", vmcl_op_layer_norm, NULL},
    {"cl.rms_norm", vmcl_op_layer_norm, "rms"},
    {"cl.reduce.sum", vmcl_op_reduce, "sum"},
    {"cl.reduce.mean", vmcl_op_reduce, "mean"},
    {"cl.reduce.max", vmcl_op_reduce, "max"},
    {"cl.reduce.min", vmcl_op_reduce, "min"},
    {"cl.reduce.prod", vmcl_op_reduce, "prod"},
    {"cl.argmax", vmcl_op_argmax, "argmax"},
    {"cl.argmin", vmcl_op_argmax, "argmin"},
    {"cl.pool2d.max", vmcl_op_pool2d, "max"},
    {"cl.pool2d.avg", vmcl_op_pool2d, "avg"},
    {"cl.pool2d.global_avg", vmcl_op_global_avg_pool2d, NULL},
    {"cl.squeeze_excite", vmcl_op_squeeze_excite, NULL},
    {"cl.transpose", vmcl_op_transpose, NULL},
    {"cl.concat", vmcl_op_concat, NULL},
    {"cl.slice", vmcl_op_slice, NULL},
    {"cl.cast", vmcl_op_cast, NULL},
    {"cl.bitcast", vmcl_op_bitcast, NULL},
    {"cl.fill", vmcl_op_fill, NULL},
    {"cl.broadcast_to", vmcl_op_broadcast_to, NULL},
    {"cl.pad", vmcl_op_pad, NULL},
    {"cl.gather", vmcl_op_gather, NULL},
    {"cl.embedding", vmcl_op_embedding, NULL},
    {"cl.resize", vmcl_op_resize, NULL},
    {"cl.elementwise", vmcl_op_elementwise, NULL},
    {"cl.quantize", vmcl_op_quantize, NULL},
    {"cl.dequantize", vmcl_op_dequantize, NULL},
    {"cl.dynamic_quantize", vmcl_op_dynamic_quantize, NULL},
    {"cl.qgemm", vmcl_op_qgemm, NULL},
    {"cl.qgemm_packed", vmcl_op_qgemm_packed, NULL},
    {"cl.qconv2d", vmcl_op_qconv2d, NULL},
    {"cl.rnn", vmcl_op_rnn, NULL},
    {"cl.linear_attention", vmcl_op_linear_attention, NULL},
    /* cl_ops_spatial.c */
    {"cl.grid_sample", vmcl_op_grid_sample, NULL},
    {"cl.roi_align", vmcl_op_roi_align, NULL},
    {"cl.deform_conv2d", vmcl_op_deform_conv2d, NULL},
    {"cl.pool2d.max_indices", vmcl_op_maxpool_indices, NULL},
    {"cl.det", vmcl_op_det, NULL},
    {"cl.stft", vmcl_op_stft, NULL},
    {"cl.conv_transpose3d", vmcl_op_conv_transpose3d, NULL},
    {"cl.topk", vmcl_op_topk, NULL},
    {"cl.cumulative", vmcl_op_cumulative, NULL},
    {"cl.tensor_scatter", vmcl_op_tensor_scatter, NULL},
    {"cl.nonzero", vmcl_op_nonzero, NULL},
    {"cl.unique", vmcl_op_unique, NULL},
    {"cl.nms", vmcl_op_nms, NULL},
};

vm_status_t vmcl_register_ops(vm_registry_t *reg) {
  if (!reg) return vm_status_make(VM_INVALID_ARGUMENT, "vmcl_register_ops: no registry");
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
    /* the user pointer is only read: the table is static. The elementwise
     * and reduction operators take their full name, which their messages
     * use (the operation is its last part): nothing is formatted per call. */
    vm_packed_fn fn = ops[i].fn;
    int named = fn == vmcl_op_binary || fn == vmcl_op_unary || fn == vmcl_op_reduce ||
                fn == vmcl_op_argmax;
    const char *user = named ? ops[i].name : ops[i].user;
    VM_RETURN_IF_ERROR(vm_registry_add(reg, ops[i].name, ops[i].fn, (void *)user));
  }
  return vmcl_register_kernel_op(reg);
}
