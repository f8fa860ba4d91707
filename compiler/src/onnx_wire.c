/* Bounds on the structure of a protobuf message, checked on the wire before
 * protobuf-c unpacks it. The unpacker recurses into nested messages (a
 * graph inside an attribute inside a node inside a graph ... for If, Loop
 * and Scan bodies, or types inside types) and allocates memory per message
 * and per repeated string, so a hostile file could otherwise overflow the
 * stack or exhaust memory before the compiler sees a single field.
 *
 * The walker is iterative with a fixed stack of ONX_MAX_DEPTH frames and
 * follows the descriptors protoc-c generated, so it descends exactly where
 * protobuf-c would. Packed numbers (int64_data, ints ...) are not counted:
 * they take at most 8 bytes of memory per byte of the file. */
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"

typedef struct wire_limit {
  const ProtobufCMessageDescriptor *msg;
  uint32_t field;
  uint64_t max;
  const char *noun;
  const char *fix;
} wire_limit_t;

static const wire_limit_t k_limits[] = {
    {&onnx__node_proto__descriptor, 1, ONX_MAX_NODE_IO, "inputs",
     "split the node (e.g. a Concat of Concats)"},
    {&onnx__node_proto__descriptor, 2, ONX_MAX_NODE_IO, "outputs", "split the node"},
    {&onnx__node_proto__descriptor, 5, ONX_MAX_NODE_ATTRS, "attributes",
     "a node has one attribute per name"},
    {&onnx__tensor_shape_proto__descriptor, 1, ONX_MAX_RANK, "dims",
     "the compiler supports at most 8"},
    {&onnx__tensor_proto__descriptor, 1, ONX_MAX_RANK, "dims", "the compiler supports at most 8"},
    {&onnx__sparse_tensor_proto__descriptor, 3, ONX_MAX_RANK, "dims",
     "the compiler supports at most 8"},
};
#define NLIM (sizeof(k_limits) / sizeof(k_limits[0]))

typedef struct frame {
  const ProtobufCMessageDescriptor *d;
  size_t end;       /* where its bytes end */
  size_t name_off;  /* its "name" field, when it has one (name_len > 0) */
  size_t name_len;
  uint64_t count[NLIM];
} frame_t;

static int limit_of(const ProtobufCMessageDescriptor *d, uint32_t field) {
  for (size_t i = 0; i < NLIM; i++)
    if (k_limits[i].msg == d && k_limits[i].field == field) return (int)i;
  return -1;
}

/* A varint at *pos (before end): 0 when truncated or over 10 bytes. */
static int rd_varint(const uint8_t *buf, size_t end, size_t *pos, uint64_t *out) {
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 70 && *pos < end; shift += 7) {
    uint8_t b = buf[(*pos)++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return 1;
    }
  }
  return 0;
}

static const char *kind_of(const ProtobufCMessageDescriptor *d) {
  static const struct {
    const ProtobufCMessageDescriptor *d;
    const char *kind;
  } k[] = {
      {&onnx__model_proto__descriptor, "model"},
      {&onnx__graph_proto__descriptor, "graph"},
      {&onnx__node_proto__descriptor, "node"},
      {&onnx__attribute_proto__descriptor, "attribute"},
      {&onnx__tensor_proto__descriptor, "tensor"},
      {&onnx__sparse_tensor_proto__descriptor, "sparse tensor"},
      {&onnx__value_info_proto__descriptor, "value"},
      {&onnx__tensor_shape_proto__descriptor, "shape"},
      {&onnx__function_proto__descriptor, "function"},
  };
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
    if (k[i].d == d) return k[i].kind;
  return d->short_name;
}

/* Frame f's name as printable text (at most 80 bytes). */
static void frame_name(const uint8_t *buf, const frame_t *f, char *out, size_t n) {
  size_t len = f->name_len < 80 ? f->name_len : 80, j = 0;
  for (size_t i = 0; i < len && j + 1 < n; i++) {
    uint8_t ch = buf[f->name_off + i];
    out[j++] = ch >= 0x20 && ch < 0x7f && ch != '\'' ? (char)ch : '?';
  }
  out[j] = 0;
}

/* "node 'n'", or "a shape in value 'x'" when frame `top` has no name (the
 * nearest named frame around it gives the place). */
static void describe(const uint8_t *buf, const frame_t *fr, int top, char *out, size_t n) {
  char name[96];
  if (fr[top].name_len) {
    frame_name(buf, &fr[top], name, sizeof(name));
    snprintf(out, n, "%s '%s'", kind_of(fr[top].d), name);
    return;
  }
  for (int i = top - 1; i >= 0; i--) {
    if (!fr[i].name_len) continue;
    frame_name(buf, &fr[i], name, sizeof(name));
    snprintf(out, n, "a %s in %s '%s'", kind_of(fr[top].d), kind_of(fr[i].d), name);
    return;
  }
  snprintf(out, n, "a %s", kind_of(fr[top].d));
}

/* The limits on frame `top`, checked when its bytes end (so the message
 * gives the whole count). */
static vm_status_t check_counts(const uint8_t *buf, const frame_t *fr, int top) {
  for (size_t i = 0; i < NLIM; i++) {
    if (fr[top].count[i] <= k_limits[i].max) continue;
    char what[256];
    describe(buf, fr, top, what, sizeof(what));
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "onnx: %s has %llu %s, at most %llu are accepted: %s", what,
                          (unsigned long long)fr[top].count[i], k_limits[i].noun,
                          (unsigned long long)k_limits[i].max, k_limits[i].fix);
  }
  return VM_STATUS_OK;
}

vm_status_t onx_wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t n,
                           const char *malformed) {
  frame_t fr[ONX_MAX_DEPTH];
  int top = 0;
  memset(&fr[0], 0, sizeof(fr[0]));
  fr[0].d = desc;
  fr[0].end = n;
  uint64_t elements = 0, nodes = 0;
  size_t pos = 0;
  for (;;) {
    frame_t *f = &fr[top];
    if (pos == f->end) {
      vm_status_t st = check_counts(buf, fr, top);
      if (st) return st;
      if (top == 0) break;
      top--;
      continue;
    }
    uint64_t key, v;
    if (!rd_varint(buf, f->end, &pos, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
      return vm_status_make(VM_INVALID_ARGUMENT, "%s", malformed);
    uint32_t id = (uint32_t)(key >> 3);
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(f->d, id);
    int lim = fd ? limit_of(f->d, id) : -1;
    switch (key & 7) {
      case 0: /* varint: one element of a repeated number (dims, unpacked) */
        if (!rd_varint(buf, f->end, &pos, &v))
          return vm_status_make(VM_INVALID_ARGUMENT, "%s", malformed);
        if (lim >= 0) f->count[lim]++;
        break;
      case 1:
      case 5: {
        size_t w = (key & 7) == 1 ? 8 : 4;
        if (f->end - pos < w) return vm_status_make(VM_INVALID_ARGUMENT, "%s", malformed);
        pos += w;
        if (lim >= 0) f->count[lim]++;
        break;
      }
      case 2: {
        if (!rd_varint(buf, f->end, &pos, &v) || v > f->end - pos)
          return vm_status_make(VM_INVALID_ARGUMENT, "%s", malformed);
        size_t len = (size_t)v;
        if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
          elements++;
          if (lim >= 0) f->count[lim]++;
          const ProtobufCMessageDescriptor *sub = fd->descriptor;
          if (sub == &onnx__node_proto__descriptor) nodes++;
          if (top + 1 >= ONX_MAX_DEPTH) {
            char what[256];
            describe(buf, fr, top, what, sizeof(what));
            return vm_status_make(
                VM_INVALID_ARGUMENT,
                "onnx: messages nest more than %d levels deep (in %s): at most %d are accepted, "
                "about %d subgraphs (If, Loop, Scan bodies) within each other: flatten the "
                "model's control flow",
                ONX_MAX_DEPTH, what, ONX_MAX_DEPTH, ONX_MAX_DEPTH / 3);
          }
          top++;
          memset(&fr[top], 0, sizeof(fr[top]));
          fr[top].d = sub;
          fr[top].end = pos + len;
          continue; /* its fields follow */
        }
        if (fd && fd->label == PROTOBUF_C_LABEL_REPEATED) {
          if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_BYTES) {
            elements++;
            if (lim >= 0) f->count[lim]++;
          } else if (lim >= 0) { /* packed varints: one ends at each byte below 0x80 */
            for (size_t i = 0; i < len; i++)
              if (!(buf[pos + i] & 0x80)) f->count[lim]++;
          }
        } else if (fd && fd->type == PROTOBUF_C_TYPE_STRING && strcmp(fd->name, "name") == 0) {
          f->name_off = pos;
          f->name_len = len;
        }
        pos += len;
        break;
      }
      default: /* groups (3, 4) and 6, 7: protobuf-c refuses them too */
        return vm_status_make(VM_INVALID_ARGUMENT, "%s", malformed);
    }
  }
  if (nodes > ONX_MAX_NODES)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "onnx: the model has %llu nodes, at most %llu are accepted: split it "
                          "into several models",
                          (unsigned long long)nodes, (unsigned long long)ONX_MAX_NODES);
  if (elements > ONX_MAX_ELEMENTS)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "onnx: the model has %llu messages and repeated strings, at most %llu "
                          "are accepted: split it into several models",
                          (unsigned long long)elements, (unsigned long long)ONX_MAX_ELEMENTS);
  return VM_STATUS_OK;
}
