/* The names of a graph's values in a hash table: the value defined under
 * each name so far, the first node writing it, the nodes reading it (in
 * node order) and how often the graph's outputs name it. Every lookup the
 * importer makes per node goes through here, so compile time stays linear
 * in the size of the graph. */
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

/* The slot of name: its entry, or the free slot where it would go. */
static onx_name_t *slot_of(const onx_names_t *t, const char *name, uint32_t h) {
  uint32_t mask = t->cap - 1;
  for (uint32_t i = h & mask;; i = (i + 1) & mask) {
    onx_name_t *e = &t->tab[i];
    if (!e->name || (e->hash == h && strcmp(e->name, name) == 0)) return e;
  }
}

onx_name_t *onx_names_find(const onx_names_t *t, const char *name) {
  if (!t->cap || !name || !name[0]) return NULL;
  onx_name_t *e = slot_of(t, name, hash_name(name));
  return e->name ? e : NULL;
}

static int grow(onx_names_t *t) {
  uint32_t ncap = t->cap ? t->cap * 2 : 64;
  if (ncap < t->cap) return -1;
  onx_name_t *old = t->tab;
  uint32_t ocap = t->cap;
  t->tab = calloc(ncap, sizeof(*t->tab));
  if (!t->tab) {
    t->tab = old;
    return -1;
  }
  t->cap = ncap;
  for (uint32_t i = 0; i < ocap; i++)
    if (old[i].name) *slot_of(t, old[i].name, old[i].hash) = old[i];
  free(old);
  return 0;
}

onx_name_t *onx_names_add(onx_names_t *t, const char *name) {
  if (!name || !name[0]) return NULL;
  if ((uint64_t)(t->n + 1) * 2 > t->cap && grow(t) != 0) return NULL;
  uint32_t h = hash_name(name);
  onx_name_t *e = slot_of(t, name, h);
  if (!e->name) {
    e->name = name;
    e->hash = h;
    e->val = -1;
    e->producer = -1;
    t->n++;
  }
  return e;
}

void onx_names_free(onx_names_t *t) {
  free(t->tab);
  free(t->uses);
  memset(t, 0, sizeof(*t));
}

static vm_status_t oom(void) {
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "onnx: out of host memory for the value names");
}

/* Calls fn(t, name, i, k, pass) for every input name of the nodes of the
 * subgraphs of node i (If's branches, Loop's and Scan's bodies, within
 * each other), k counting them: the node reads those values too, so a
 * value one of its subgraphs uses is no value only another node consumes.
 * The nesting is bounded by onx_wire_check. */
typedef int (*ref_fn)(onx_names_t *t, const char *name, uint32_t node, uint32_t k, int pass);

static int walk_sub_refs(onx_names_t *t, const Onnx__GraphProto *g, uint32_t node, uint32_t *k,
                         int pass, ref_fn fn) {
  for (size_t i = 0; g && i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (!n) continue;
    for (size_t j = 0; j < n->n_input; j++)
      if (n->input[j] && n->input[j][0] && fn(t, n->input[j], node, (*k)++, pass) != 0) return -1;
    for (size_t a = 0; a < n->n_attribute; a++) {
      const Onnx__AttributeProto *at = n->attribute[a];
      if (!at) continue;
      if (at->g && walk_sub_refs(t, at->g, node, k, pass, fn) != 0) return -1;
      for (size_t q = 0; q < at->n_graphs; q++)
        if (walk_sub_refs(t, at->graphs[q], node, k, pass, fn) != 0) return -1;
    }
  }
  return 0;
}

static int node_sub_refs(onx_names_t *t, const Onnx__NodeProto *n, uint32_t node, int pass,
                         ref_fn fn) {
  uint32_t k = (uint32_t)n->n_input;
  for (size_t a = 0; a < n->n_attribute; a++) {
    const Onnx__AttributeProto *at = n->attribute[a];
    if (!at) continue;
    if (at->g && walk_sub_refs(t, at->g, node, &k, pass, fn) != 0) return -1;
    for (size_t q = 0; q < at->n_graphs; q++)
      if (walk_sub_refs(t, at->graphs[q], node, &k, pass, fn) != 0) return -1;
  }
  return 0;
}

/* pass 0 counts a reader of a name the graph knows, pass 1 records it */
static int add_ref(onx_names_t *t, const char *name, uint32_t node, uint32_t k, int pass) {
  onx_name_t *e = onx_names_find(t, name);
  if (!e) return 0; /* defined inside the subgraph: not this graph's value */
  if (pass == 0) {
    if (e->num_cons == UINT32_MAX) return -1;
    e->num_cons++;
  } else {
    t->uses[e->cons_off + e->num_cons++] = (onx_use_t){node, k};
  }
  return 0;
}

vm_status_t onx_names_build(onx_names_t *t, const Onnx__GraphProto *g) {
  memset(t, 0, sizeof(*t));
  uint64_t nuses = 0;
  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    if (!tp || !tp->name || !tp->name[0]) continue;
    onx_name_t *e = onx_names_add(t, tp->name);
    if (!e) return oom();
    e->is_init = 1;
  }
  for (size_t i = 0; i < g->n_output; i++) {
    if (!g->output[i] || !g->output[i]->name || !g->output[i]->name[0]) continue;
    onx_name_t *e = onx_names_add(t, g->output[i]->name);
    if (!e) return oom();
    e->outputs++;
  }
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (!n) continue;
    for (size_t k = 0; k < n->n_output; k++) {
      onx_name_t *e = onx_names_add(t, n->output[k]);
      if (n->output[k] && n->output[k][0] && !e) return oom();
      if (e && e->producer < 0) e->producer = (int32_t)i;
    }
    for (size_t k = 0; k < n->n_input; k++) {
      onx_name_t *e = onx_names_add(t, n->input[k]);
      if (n->input[k] && n->input[k][0] && !e) return oom();
      if (!e) continue;
      e->num_cons++;
      nuses++;
    }
  }
  /* subgraphs' readers (the names above are all known by now) */
  uint64_t before = 0, after = 0;
  for (uint32_t i = 0; i < t->cap; i++) before += t->tab[i].name ? t->tab[i].num_cons : 0;
  for (size_t i = 0; i < g->n_node; i++)
    if (g->node[i] && node_sub_refs(t, g->node[i], (uint32_t)i, 0, add_ref) != 0) return oom();
  for (uint32_t i = 0; i < t->cap; i++) after += t->tab[i].name ? t->tab[i].num_cons : 0;
  nuses += after - before;
  if (nuses > UINT32_MAX) return oom();
  t->uses = malloc((nuses ? nuses : 1) * sizeof(*t->uses));
  if (!t->uses) return oom();
  /* each name's readers: a run of uses, filled in node order */
  uint32_t off = 0;
  for (uint32_t i = 0; i < t->cap; i++) {
    onx_name_t *e = &t->tab[i];
    if (!e->name) continue;
    e->cons_off = off;
    off += e->num_cons;
    e->num_cons = 0;
  }
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    for (size_t k = 0; n && k < n->n_input; k++) {
      onx_name_t *e = onx_names_find(t, n->input[k]);
      if (e) t->uses[e->cons_off + e->num_cons++] = (onx_use_t){(uint32_t)i, (uint32_t)k};
    }
    if (n) node_sub_refs(t, n, (uint32_t)i, 1, add_ref);
  }
  return VM_STATUS_OK;
}
