/* An LSTM unrolled into elementary nodes, as PyTorch exports an LSTMCell
 * called in a Python loop (captcha_crnn: 20 steps, two directions, ~390
 * nodes and ~870 launches), recognised and lowered as one LSTM: one
 * cl.gemm for the input projection of every step and one cl.rnn for the
 * recurrence (onnx_ops_recurrent.c), instead of ~40 calls a step.
 *
 * One cell, time step k (any order of operands where the operator
 * commutes, the gates in any order):
 *   gx = lin(x_k), gh = lin(h_{k-1})   Gemm (alpha, beta, transB, constant
 *                                      C) or MatMul [+ constant bias]
 *   z  = Add(gx, gh) [+ constant bias]
 *   four chunks of z's last axis       Split (sizes H, H, H, H) or four Slices
 *   three Sigmoid and one Tanh, one a chunk
 *   c_k = Add(Mul(sf, c_{k-1}), Mul(si, tanh_g))
 *   h_k = Mul(so, Tanh(c_k))
 * The roles of the sigmoids follow from where they go (the one multiplying
 * c_{k-1} is f, the one multiplying tanh_g is i, the one multiplying
 * Tanh(c_k) is o), so any gate order works; the weights are reordered to
 * the LSTM's (i, o, f, c) on the host. Every cell reads the same weights
 * (by name), x_k = Gather(X, t, axis a) of one X ([T, B, I], a = 0, or
 * batch first [B, T, I], a = 1: the LSTM's layout) with t = k (forward) or
 * T-1-k (reverse) covering X, and c_0, h_0 [B, H] defined before the
 * sequence. Each intermediate is read by the sequence alone; what leaves
 * it: the last h and c (Y_h, Y_c) and, when every h_k goes through
 * Unsqueeze(axis a) into one Concat(axis a) in time order, that Concat (Y).
 * Anything else (a cell that differs, weights of another name, a step
 * missing, x_k not a Gather of X, an intermediate read elsewhere) is
 * lowered node by node as before. */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* Steps of one recognised sequence (each ~15 nodes). */
#define MAX_STEPS 4096

/* x W (+ b): a Gemm, or a MatMul maybe followed by an Add of a constant. */
typedef struct lin {
  int64_t node, add; /* the Gemm or MatMul; the bias Add (-1 none) */
  const char *in;    /* the run-time operand */
  const char *wname;
  const onx_value_t *w, *b; /* W constant 2-D; b constant or NULL */
  int wt;                   /* W is [N, K] (Gemm transB) */
  double alpha, beta;
  int64_t K, N;
} lin_t;

typedef struct cell {
  lin_t l[2];
  int64_t sum, badd;     /* Add(l0, l1); its bias Add (-1 none) */
  const onx_value_t *gb; /* that bias */
  int64_t split, sl[4];  /* the Split, or the four Slices (split -1) */
  int64_t act[4];        /* activation of each chunk */
  int chunk[4];          /* chunk of the LSTM's gate r (i, o, f, c) */
  int64_t mf, mi, ac, tc, mo;
  const char *cprev, *h, *c; /* c_{k-1}; h_k and c_k */
  int64_t N;                 /* 4H */
} cell_t;

static const Onnx__NodeProto *op_at(onx_ctx_t *c, int64_t i, const char *op) {
  if (i < 0 || (size_t)i >= c->graph->n_node) return NULL;
  const Onnx__NodeProto *n = c->graph->node[i];
  if (!n || !n->op_type || strcmp(n->op_type, op) != 0 || (n->domain && n->domain[0]) ||
      n->n_output < 1 || !n->output[0] || !n->output[0][0])
    return NULL;
  if (n->n_input < 1 && strcmp(op, "Constant") != 0) return NULL; /* input[0] is read */
  for (size_t k = 0; k < n->n_input; k++)
    if (!n->input[k]) return NULL;
  return n;
}

static int64_t producer(onx_ctx_t *c, const char *name) {
  const onx_name_t *e = onx_names_find(&c->names, name);
  return e ? e->producer : -1;
}

/* The node alone reading `name` (no graph output, once), or -1. */
static int64_t sole_reader(onx_ctx_t *c, const char *name) {
  const onx_name_t *e = onx_names_find(&c->names, name);
  if (!e || e->outputs || e->num_cons != 1) return -1;
  onx_use_t u = c->names.uses[e->cons_off];
  const Onnx__NodeProto *n = c->graph->node[u.node];
  return u.slot < n->n_input ? (int64_t)u.node : -1;
}

/* A float32 constant defined by now. */
static const onx_value_t *fconst(onx_ctx_t *c, const char *name) {
  onx_value_t *v = name && name[0] ? onx_lookup(c, name) : NULL;
  return v && v->data && vm_dtype_equal(v->dt, VM_F32) ? v : NULL;
}

/* An int constant of at most max values: defined by now, or a later
 * Constant node's value (as exporters place them beside their reader). */
static int iconst(onx_ctx_t *c, const char *name, int64_t *out, int64_t max, int64_t *n) {
  onx_value_t *v = name && name[0] ? onx_lookup(c, name) : NULL;
  if (v) {
    if (!v->data || !onx_is_int(v->dt) || v->numel > max || v->ndim > 1) return 0;
    for (int64_t i = 0; i < v->numel; i++) out[i] = onx_ld_i(v->dt, v->data, i);
    *n = v->numel;
    return 1;
  }
  const Onnx__NodeProto *k = op_at(c, producer(c, name), "Constant");
  const Onnx__AttributeProto *a = k && k->n_attribute == 1 ? onx_attr(k, "value") : NULL;
  if (!a || !a->t || a->t->n_dims > 1) return 0;
  vmcc_tensor_t t;
  vm_status_t st = onx_tensor_from_proto(a->t, NULL, "constant", &t);
  if (st) { /* the Constant's own lowering reports it */
    vm_status_free(st);
    return 0;
  }
  int64_t cnt = t.ndim ? t.shape[0] : 1;
  int ok = onx_is_int(t.dtype) && cnt <= max;
  for (int64_t i = 0; ok && i < cnt; i++) out[i] = onx_ld_i(t.dtype, t.data, i);
  *n = cnt;
  vmcc_tensor_free(&t);
  return ok;
}

/* A bias for N outputs: [N] or [1, N]. */
static int is_bias(const onx_value_t *b, int64_t N) {
  return b && b->numel == N && (b->ndim == 1 || (b->ndim == 2 && b->dims[0] == 1));
}

/* `name` as lin (the Add of a bias included): 1 when it fits. */
static int lin_of(onx_ctx_t *c, const char *name, lin_t *l) {
  memset(l, 0, sizeof(*l));
  l->add = -1;
  int64_t p = producer(c, name);
  const Onnx__NodeProto *n = op_at(c, p, "Add");
  if (n && n->n_input == 2) { /* Add(MatMul or Gemm, bias) */
    for (int s = 0; s < 2 && l->add < 0; s++) {
      const onx_value_t *b = fconst(c, n->input[s]);
      int64_t q = producer(c, n->input[1 - s]);
      if (b && (op_at(c, q, "MatMul") || op_at(c, q, "Gemm")) &&
          sole_reader(c, n->input[1 - s]) == p)
        l->add = p, l->b = b, p = q;
    }
    if (l->add < 0) return 0;
  }
  l->alpha = l->beta = 1.0;
  if ((n = op_at(c, p, "Gemm")) != NULL) {
    if (n->n_input < 2 || n->n_input > 3) return 0;
    for (size_t i = 0; i < n->n_attribute; i++) {
      const Onnx__AttributeProto *a = n->attribute[i];
      int is_f = a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
      int is_i = a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
      if (!a->name) return 0;
      if (strcmp(a->name, "alpha") == 0 && is_f)
        l->alpha = a->f;
      else if (strcmp(a->name, "beta") == 0 && is_f)
        l->beta = a->f;
      else if (strcmp(a->name, "transB") == 0 && is_i && (a->i == 0 || a->i == 1))
        l->wt = (int)a->i;
      else if (!(strcmp(a->name, "transA") == 0 && is_i && a->i == 0))
        return 0;
    }
    int has_c = n->n_input == 3 && n->input[2][0];
    if (has_c && l->add >= 0) return 0; /* a bias twice: not worth it */
    if (has_c && !(l->b = fconst(c, n->input[2]))) return 0;
    if (l->add >= 0) l->beta = 1.0; /* the Add's bias, not C */
  } else if ((n = op_at(c, p, "MatMul")) == NULL || n->n_input != 2) {
    return 0;
  }
  l->node = p, l->in = n->input[0], l->wname = n->input[1];
  l->w = fconst(c, n->input[1]);
  if (!l->w || l->w->ndim != 2 || !l->in[0]) return 0;
  l->K = l->w->dims[l->wt ? 1 : 0], l->N = l->w->dims[l->wt ? 0 : 1];
  return l->N > 0 && l->N % 4 == 0 && l->K > 0 && (!l->b || is_bias(l->b, l->N));
}

/* The four chunks of gates z (N = 4H wide): out[j] the name of chunk j. */
static int chunks_of(onx_ctx_t *c, cell_t *cl, const char *z, const char *out[4]) {
  const onx_name_t *e = onx_names_find(&c->names, z);
  int64_t H = cl->N / 4, v[4], n;
  if (!e || e->outputs) return 0;
  cl->split = -1;
  if (e->num_cons == 1) { /* Split(z, [H, H, H, H], axis -1) */
    int64_t s = c->names.uses[e->cons_off].node;
    const Onnx__NodeProto *sp = op_at(c, s, "Split");
    if (!sp || sp->n_output != 4 || c->names.uses[e->cons_off].slot != 0) return 0;
    int64_t axis = 0;
    int have = 0;
    for (size_t i = 0; i < sp->n_attribute; i++) {
      const Onnx__AttributeProto *a = sp->attribute[i];
      if (!a->name) return 0;
      if (strcmp(a->name, "axis") == 0)
        axis = a->i;
      else if (strcmp(a->name, "num_outputs") == 0 && a->i == 4)
        continue;
      else if (strcmp(a->name, "split") == 0 && a->n_ints == 4) {
        memcpy(v, a->ints, sizeof(v)), have = 1;
      } else
        return 0;
    }
    if (sp->n_input == 2 && sp->input[1][0]) {
      if (have || !iconst(c, sp->input[1], v, 4, &n) || n != 4) return 0;
      have = 1;
    } else if (sp->n_input > 2) {
      return 0;
    }
    for (int j = 0; have && j < 4; j++)
      if (v[j] != H) return 0;
    if (axis != 1 && axis != -1) return 0;
    cl->split = s;
    for (int j = 0; j < 4; j++) out[j] = sp->output[j];
    return 1;
  }
  if (e->num_cons != 4) return 0;
  int seen = 0;
  for (uint32_t u = 0; u < 4; u++) { /* Slice(z, [jH], [(j+1)H], [-1]) */
    onx_use_t use = c->names.uses[e->cons_off + u];
    const Onnx__NodeProto *sl = op_at(c, use.node, "Slice");
    int64_t st[1], en[1], ax[1], sp[1] = {1}, nst, nen, nax, nsp = 1;
    if (!sl || use.slot != 0 || sl->n_input < 4 || sl->n_input > 5 || sl->n_output != 1 ||
        !iconst(c, sl->input[1], st, 1, &nst) || !iconst(c, sl->input[2], en, 1, &nen) ||
        !iconst(c, sl->input[3], ax, 1, &nax) ||
        (sl->n_input == 5 && sl->input[4][0] && !iconst(c, sl->input[4], sp, 1, &nsp)))
      return 0;
    if (nst != 1 || nen != 1 || nax != 1 || nsp != 1 || sp[0] != 1 || (ax[0] != 1 && ax[0] != -1) ||
        st[0] % H != 0 || st[0] < 0 || st[0] >= cl->N)
      return 0;
    int j = (int)(st[0] / H);
    if (!(en[0] == st[0] + H || (j == 3 && en[0] >= cl->N)) || (seen & 1 << j)) return 0;
    seen |= 1 << j;
    cl->sl[j] = use.node;
    out[j] = sl->output[0];
  }
  return seen == 15;
}

/* The other input of two-input node n than `name`, or NULL. */
static const char *other(const Onnx__NodeProto *n, const char *name) {
  if (!n || n->n_input != 2) return NULL;
  if (strcmp(n->input[0], name) == 0) return n->input[1];
  if (strcmp(n->input[1], name) == 0) return n->input[0];
  return NULL;
}

/* The cell whose gate sum (Add of the two lins) is node `sum`. */
static int cell_of(onx_ctx_t *c, int64_t sum, cell_t *cl) {
  memset(cl, 0, sizeof(*cl));
  const Onnx__NodeProto *s = op_at(c, sum, "Add");
  if (!s || s->n_input != 2 || !lin_of(c, s->input[0], &cl->l[0]) ||
      !lin_of(c, s->input[1], &cl->l[1]) || cl->l[0].N != cl->l[1].N)
    return 0;
  for (int i = 0; i < 2; i++)
    if (sole_reader(c, s->input[i]) != sum) return 0;
  cl->sum = sum, cl->badd = -1, cl->N = cl->l[0].N;
  const char *z = s->output[0];
  int64_t r = sole_reader(c, z);
  const Onnx__NodeProto *ba = op_at(c, r, "Add");
  const char *bn = ba ? other(ba, z) : NULL;
  if (bn && (cl->gb = fconst(c, bn)) != NULL && is_bias(cl->gb, cl->N)) {
    cl->badd = r, z = ba->output[0];
  } else {
    cl->gb = NULL;
  }
  const char *ch[4], *ao[4];
  if (!chunks_of(c, cl, z, ch)) return 0;
  int ntanh = 0, g = -1;
  for (int j = 0; j < 4; j++) {
    cl->act[j] = sole_reader(c, ch[j]);
    const Onnx__NodeProto *a = op_at(c, cl->act[j], "Sigmoid");
    if (!a && (a = op_at(c, cl->act[j], "Tanh")) != NULL) ntanh++, g = j;
    if (!a || a->n_input != 1 || a->n_output != 1) return 0;
    ao[j] = a->output[0];
  }
  if (ntanh != 1) return 0;
  /* i: Mul(si, tanh_g); f: Mul(sf, c_{k-1}); c_k = Add of the two */
  cl->mi = sole_reader(c, ao[g]);
  const Onnx__NodeProto *mi = op_at(c, cl->mi, "Mul");
  const char *si = mi ? other(mi, ao[g]) : NULL;
  cl->ac = mi ? sole_reader(c, mi->output[0]) : -1;
  const Onnx__NodeProto *ac = op_at(c, cl->ac, "Add");
  const char *fo = ac ? other(ac, mi->output[0]) : NULL;
  cl->mf = fo ? producer(c, fo) : -1;
  const Onnx__NodeProto *mf = op_at(c, cl->mf, "Mul");
  if (!si || !mf || sole_reader(c, fo) != cl->ac || mf->n_input != 2) return 0;
  int ri = -1, rf = -1, ro = -1;
  for (int j = 0; j < 4; j++) {
    if (j == g) continue;
    if (strcmp(ao[j], si) == 0)
      ri = j;
    else if (sole_reader(c, ao[j]) == cl->mf)
      rf = j;
    else
      ro = j;
  }
  if (ri < 0 || rf < 0 || ro < 0) return 0;
  cl->cprev = other(mf, ao[rf]);
  cl->c = ac->output[0];
  /* h_k = Mul(so, Tanh(c_k)) */
  cl->mo = sole_reader(c, ao[ro]);
  const Onnx__NodeProto *mo = op_at(c, cl->mo, "Mul");
  const char *th = mo ? other(mo, ao[ro]) : NULL;
  cl->tc = th ? producer(c, th) : -1;
  const Onnx__NodeProto *tc = op_at(c, cl->tc, "Tanh");
  if (!cl->cprev || !tc || tc->n_input != 1 || strcmp(tc->input[0], cl->c) != 0 ||
      sole_reader(c, th) != cl->mo)
    return 0;
  cl->h = mo->output[0];
  cl->chunk[0] = ri, cl->chunk[1] = ro, cl->chunk[2] = rf, cl->chunk[3] = g;
  return 1;
}

/* The gate sum a lin node (Gemm or MatMul) feeds, or -1. */
static int64_t sum_above(onx_ctx_t *c, int64_t node) {
  int64_t r = sole_reader(c, c->graph->node[node]->output[0]);
  const Onnx__NodeProto *a = op_at(c, r, "Add");
  if (a) { /* maybe the lin's own bias Add */
    const char *o = other(a, c->graph->node[node]->output[0]);
    if (o && fconst(c, o)) r = sole_reader(c, a->output[0]);
  }
  return op_at(c, r, "Add") ? r : -1;
}

/* The cell whose h_k is `h` (the Mul ending it), or 0. */
static int cell_ending(onx_ctx_t *c, const char *h, cell_t *cl) {
  const Onnx__NodeProto *mo = op_at(c, producer(c, h), "Mul");
  if (mo && mo->n_input != 2) return 0;
  for (int s = 0; mo && s < 2; s++) { /* Sigmoid(chunk of z) */
    const Onnx__NodeProto *sg = op_at(c, producer(c, mo->input[s]), "Sigmoid");
    int64_t p = sg ? producer(c, sg->input[0]) : -1;
    const Onnx__NodeProto *ch = op_at(c, p, "Split");
    if (!ch) ch = op_at(c, p, "Slice");
    int64_t zp = ch ? producer(c, ch->input[0]) : -1;
    const Onnx__NodeProto *z = op_at(c, zp, "Add");
    if (!z || z->n_input != 2) continue;
    /* z is the sum, or the bias Add after it */
    if (cell_of(c, zp, cl) && strcmp(cl->h, h) == 0) return 1;
    for (int t = 0; t < 2; t++)
      if (cell_of(c, producer(c, z->input[t]), cl) && strcmp(cl->h, h) == 0) return 1;
  }
  return 0;
}

/* Same weights (by name) and constants as the first cell; hs: which lin
 * reads h. */
static int same_weights(const cell_t *a, int ahs, const cell_t *b, int bhs) {
  for (int s = 0; s < 2; s++) {
    const lin_t *x = &a->l[s == 0 ? ahs : 1 - ahs], *y = &b->l[s == 0 ? bhs : 1 - bhs];
    if (strcmp(x->wname, y->wname) != 0 || x->b != y->b || x->wt != y->wt || x->alpha != y->alpha ||
        x->beta != y->beta)
      return 0;
  }
  return a->gb == b->gb && memcmp(a->chunk, b->chunk, sizeof(a->chunk)) == 0;
}

/* Which lin of cl reads h (its input named h), -1 neither or both. */
static int h_side(const cell_t *cl, const char *h) {
  int a = strcmp(cl->l[0].in, h) == 0, b = strcmp(cl->l[1].in, h) == 0;
  return a == b ? -1 : a ? 0 : 1;
}

/* The cell after cl (h-side hs): a cell whose h lin reads cl's h_k and whose
 * c_{k-1} is cl's c_k. */
static int next_cell(onx_ctx_t *c, const cell_t *cl, int hs, cell_t *nx, int *nhs) {
  const onx_name_t *e = onx_names_find(&c->names, cl->h);
  for (uint32_t u = 0; e && u < e->num_cons; u++) {
    int64_t r = c->names.uses[e->cons_off + u].node;
    if (!op_at(c, r, "Gemm") && !op_at(c, r, "MatMul")) continue;
    int64_t s = sum_above(c, r);
    if (s < 0 || !cell_of(c, s, nx) || strcmp(nx->cprev, cl->c) != 0) continue;
    *nhs = h_side(nx, cl->h);
    if (*nhs >= 0 && same_weights(cl, hs, nx, *nhs)) return 1;
  }
  return 0;
}

/* Marks the nodes of cl (mark 1) and collects them; x-lin at 1 - hs. */
static void mark_cell(const cell_t *cl, uint8_t *mark) {
  int64_t ids[] = {cl->l[0].node, cl->l[0].add, cl->l[1].node, cl->l[1].add, cl->sum,    cl->badd,
                   cl->split,     cl->act[0],   cl->act[1],    cl->act[2],   cl->act[3], cl->mf,
                   cl->mi,        cl->ac,       cl->tc,        cl->mo};
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
    if (ids[i] >= 0) mark[ids[i]] = 1;
  if (cl->split < 0)
    for (int j = 0; j < 4; j++) mark[cl->sl[j]] = 1;
}

/* Whether every reader of node i's outputs is marked and none is a graph
 * output, but for ex (NULL none). */
static int closed(onx_ctx_t *c, int64_t i, const uint8_t *mark, const char *ex) {
  const Onnx__NodeProto *n = c->graph->node[i];
  for (size_t k = 0; k < n->n_output; k++) {
    const char *o = n->output[k];
    if (!o || !o[0] || (ex && strcmp(o, ex) == 0)) continue;
    const onx_name_t *e = onx_names_find(&c->names, o);
    if (!e || e->outputs) return 0;
    for (uint32_t u = 0; u < e->num_cons; u++)
      if (!mark[c->names.uses[e->cons_off + u].node]) return 0;
  }
  return 1;
}

/* What the sequence needs once recognised. */
typedef struct seq {
  cell_t first, last;
  int hs; /* which lin reads h (the same in every cell) */
  int64_t T, B, I, H;
  int reverse;
  int64_t layout; /* X [T, B, I] (0) or [B, T, I] (1), as the LSTM's */
  const char *x, *h0;
  int64_t concat; /* the Concat of every h_k (Y), -1 none */
} seq_t;

/* Whether the constant `name` (defined by now, or a later Constant
 * node's value) is 0-d: Gather by a [1] index keeps the axis, and the
 * cell would then be rank 3, not the LSTM's [B, H]. */
static int scalar_index(onx_ctx_t *c, const char *name) {
  onx_value_t *v = name && name[0] ? onx_lookup(c, name) : NULL;
  if (v) return v->ndim == 0;
  const Onnx__NodeProto *k = op_at(c, producer(c, name), "Constant");
  const Onnx__AttributeProto *a = k && k->n_attribute == 1 ? onx_attr(k, "value") : NULL;
  return a && a->t && a->t->n_dims == 0;
}

/* x_k = Gather(X, t, axis 0 or 1) of the one X (axis *ax: the first
 * step's, then the same) with a 0-d index t: t, or -1. */
static int64_t step_of(onx_ctx_t *c, const char *xk, const char **x, int64_t *ax) {
  const Onnx__NodeProto *g = op_at(c, producer(c, xk), "Gather");
  int64_t t, n, a = 0;
  if (!g || g->n_input != 2 || g->n_output != 1 || !scalar_index(c, g->input[1]) ||
      !iconst(c, g->input[1], &t, 1, &n) || n != 1)
    return -1;
  for (size_t i = 0; i < g->n_attribute; i++) {
    const Onnx__AttributeProto *at = g->attribute[i];
    if (!at->name || strcmp(at->name, "axis") != 0 ||
        at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT)
      return -1;
    a = at->i;
  }
  onx_value_t *xv = onx_lookup(c, g->input[0]);
  if (!xv || xv->ndim != 3 || (*x && (strcmp(*x, g->input[0]) != 0 || a != *ax)) ||
      (a != 0 && a != 1))
    return -1;
  *x = g->input[0], *ax = a;
  if (t < 0) t += xv->dims[a];
  return t >= 0 && t < xv->dims[a] ? t : -1;
}

/* Unsqueeze(h, axis ax), its output read by Concat(axis ax) node *cat
 * alone: 1. */
static int unsqueeze_at(onx_ctx_t *c, int64_t u, int64_t ax, int64_t *cat) {
  const Onnx__NodeProto *n = op_at(c, u, "Unsqueeze");
  int64_t v[1], na = -1;
  if (!n || n->n_output != 1) return 0;
  const Onnx__AttributeProto *a = onx_attr(n, "axes");
  if (a && n->n_input == 1 && a->n_ints == 1)
    v[0] = a->ints[0], na = 1;
  else if (!a && n->n_input == 2 && !iconst(c, n->input[1], v, 1, &na))
    return 0;
  if (na != 1 || v[0] != ax) return 0;
  *cat = sole_reader(c, n->output[0]);
  const Onnx__NodeProto *k = op_at(c, *cat, "Concat");
  const Onnx__AttributeProto *ca = k ? onx_attr(k, "axis") : NULL;
  return k && k->n_output == 1 && ca && ca->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT &&
         ca->i == ax;
}

vm_status_t onx_lstm_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  size_t nn = c->graph->n_node;
  int64_t s0 = sum_above(c, c->node_idx);
  cell_t cl, nx;
  if (s0 < 0 || !cell_of(c, s0, &cl)) return VM_STATUS_OK;
  /* the first cell: no cell ends with the h either lin reads */
  for (int s = 0; s < 2; s++)
    if (cell_ending(c, cl.l[s].in, &nx)) return VM_STATUS_OK;
  uint8_t *mark = calloc(nn, 1);
  int64_t *steps = malloc(MAX_STEPS * sizeof(int64_t));
  int64_t *hprod = malloc(MAX_STEPS * sizeof(int64_t));
  seq_t q;
  memset(&q, 0, sizeof(q));
  q.concat = -1;
  if (!mark || !steps || !hprod) {
    free(mark), free(steps), free(hprod);
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  int ok = 0, hs = -1, nhs;
  q.first = cl;
  int64_t T = 0;
  /* walk the cells; h-side of the first from the second, or by K */
  for (;;) {
    if (T == MAX_STEPS) goto out;
    int more = hs >= 0 ? next_cell(c, &cl, hs, &nx, &nhs) : 0;
    if (hs < 0) { /* the first cell: try either side */
      for (int s = 0; s < 2 && hs < 0; s++)
        if (next_cell(c, &cl, s, &nx, &nhs)) hs = s, more = 1;
      if (hs < 0) { /* one step: the lin of K = H reads h (both: ambiguous) */
        int k0 = cl.l[0].K == cl.N / 4, k1 = cl.l[1].K == cl.N / 4;
        if (k0 == k1) goto out;
        hs = k0 ? 0 : 1;
      }
      q.hs = hs;
    }
    mark_cell(&cl, mark);
    steps[T] = step_of(c, cl.l[1 - hs].in, &q.x, &q.layout);
    hprod[T] = cl.mo;
    if (steps[T] < 0) goto out;
    T++;
    if (!more) break;
    cl = nx, hs = nhs;
  }
  q.last = cl, q.T = T, q.H = q.first.N / 4;
  q.h0 = q.first.l[q.hs].in;
  onx_value_t *xv = onx_lookup(c, q.x), *h0 = onx_lookup(c, q.h0),
              *c0 = onx_lookup(c, q.first.cprev);
  if (!xv || !h0 || !c0 || xv->dims[q.layout] != T || !vm_dtype_equal(xv->dt, VM_F32)) goto out;
  q.B = xv->dims[1 - q.layout], q.I = xv->dims[2];
  int64_t sd[2] = {q.B, q.H};
  if (q.first.l[1 - q.hs].K != q.I || q.first.l[q.hs].K != q.H) goto out;
  for (int i = 0; i < 2; i++) {
    onx_value_t *v = i ? c0 : h0;
    if (!vm_dtype_equal(v->dt, VM_F32) || v->ndim != 2 || memcmp(v->dims, sd, sizeof(sd)) != 0)
      goto out;
  }
  /* the steps cover X in order, or in reverse */
  q.reverse = T > 1 && steps[0] == T - 1;
  for (int64_t k = 0; k < T; k++)
    if (steps[k] != (q.reverse ? T - 1 - k : k)) goto out;
  /* Y: every h_k through Unsqueeze(0) into one Concat(0) in time order;
   * an intermediate h_k read elsewhere is refused */
  int64_t cat = -1;
  int use_cat = 1;
  for (int64_t k = 0; k < T; k++) {
    const onx_name_t *e = onx_names_find(&c->names, c->graph->node[hprod[k]]->output[0]);
    int64_t un = -1, ck, others = 0;
    for (uint32_t u = 0; e && u < e->num_cons; u++) {
      int64_t r = c->names.uses[e->cons_off + u].node;
      if (mark[r]) continue;
      if (un < 0 && unsqueeze_at(c, r, q.layout, &ck) && (cat < 0 || ck == cat)) {
        un = r, cat = ck;
      } else {
        others++;
      }
    }
    if (others && k < T - 1) goto out;
    int64_t pos = q.reverse ? T - 1 - k : k;
    if (un < 0 || c->graph->node[cat]->n_input != (size_t)T ||
        strcmp(c->graph->node[cat]->input[pos], c->graph->node[un]->output[0]) != 0)
      use_cat = 0;
    steps[k] = un;
  }
  if (use_cat && cat >= 0) {
    for (int64_t k = 0; k < T; k++) mark[steps[k]] = 2;
    q.concat = cat, mark[cat] = 2;
  }
  /* the trigger is the first node; every value stays inside but the exits */
  for (size_t i = 0; i < nn; i++) {
    if (!mark[i]) continue;
    if (i < c->node_idx) goto out;
    const char *ex = NULL;
    if ((int64_t)i == q.last.mo) ex = q.last.h;
    if ((int64_t)i == q.last.ac) ex = q.last.c;
    if ((int64_t)i == q.concat) ex = c->graph->node[i]->output[0];
    if (!closed(c, i, mark, ex)) goto out;
  }
  ok = 1;
out:
  free(steps);
  if (!ok) {
    free(mark), free(hprod);
    return VM_STATUS_OK;
  }
  free(hprod);

  /* the weights in the LSTM's gate order (i, o, f, c) */
  int64_t H = q.H, N = 4 * H, I = q.I;
  const lin_t *lx = &q.first.l[1 - q.hs], *lh = &q.first.l[q.hs];
  float *w = malloc((size_t)(N * I + N * H + 2 * N) * sizeof(float));
  if (!w) {
    free(mark);
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  float *rt = w + N * I, *bb = rt + N * H;
  for (int r = 0; r < 4; r++) {
    int64_t j = q.first.chunk[r];
    for (int64_t u = 0; u < H; u++) {
      int64_t src = j * H + u, dst = r * H + u;
      for (int64_t k = 0; k < I; k++)
        w[dst * I + k] =
            (float)(lx->alpha * onx_ld_f(VM_F32, lx->w->data, lx->wt ? src * I + k : k * N + src));
      for (int64_t k = 0; k < H; k++)
        rt[k * N + dst] =
            (float)(lh->alpha * onx_ld_f(VM_F32, lh->w->data, lh->wt ? src * H + k : k * N + src));
      double bx = lx->b ? lx->beta * onx_ld_f(VM_F32, lx->b->data, src) : 0;
      double bh = lh->b ? lh->beta * onx_ld_f(VM_F32, lh->b->data, src) : 0;
      if (q.first.gb) bx += onx_ld_f(VM_F32, q.first.gb->data, src);
      bb[dst] = (float)bx, bb[N + dst] = (float)bh;
    }
  }
  int64_t wd[3] = {1, N, I}, rd[3] = {1, H, N}, bd[2] = {1, 2 * N};
  int32_t tw = vmcc_graph_weight(c->g, w, 3, wd), trt = vmcc_graph_weight(c->g, rt, 3, rd);
  int32_t tb = vmcc_graph_weight(c->g, bb, 2, bd);
  free(w);
  if (c->rep) {
    c->rep->num_consts += 3;
    c->rep->const_bytes += (uint64_t)(N * I + N * H + 2 * N) * sizeof(float);
  }
  /* zero initial states are the cl.rnn's own */
  int32_t ts[2] = {-1, -1};
  const onx_value_t *st0[2] = {onx_lookup(c, q.h0), onx_lookup(c, q.first.cprev)};
  for (int i = 0; i < 2; i++) {
    int zero = st0[i]->data != NULL;
    for (int64_t k = 0; zero && k < st0[i]->numel; k++)
      zero = onx_ld_f(VM_F32, st0[i]->data, k) == 0.0;
    int64_t d3[3] = {q.layout ? q.B : 1, q.layout ? 1 : q.B, H};
    if (!zero) ts[i] = onx_reshaped(c, (onx_value_t *)st0[i], 3, d3);
  }
  int64_t xd2[2] = {q.T * q.B, I};
  int32_t ty, tyh, tyc;
  vm_status_t st = onx_lstm_emit(c, q.T, q.B, I, H, q.reverse, q.layout,
                                 onx_reshaped(c, onx_lookup(c, q.x), 2, xd2), tw, trt, tb, ts[0],
                                 ts[1], &ty, &tyh, &tyc);
  if (st) {
    free(mark);
    return st;
  }
  /* the Gathers of x_k read by their lin alone, not lowered yet */
  cell_t it = q.first;
  int ihs = q.hs;
  for (int64_t k = 0; k < q.T; k++) {
    int64_t gp = producer(c, it.l[1 - ihs].in);
    if (gp > (int64_t)c->node_idx && sole_reader(c, it.l[1 - ihs].in) == it.l[1 - ihs].node)
      mark[gp] = 1;
    cell_t nx2;
    if (k + 1 == q.T || !next_cell(c, &it, ihs, &nx2, &ihs)) break;
    it = nx2;
  }
  for (size_t i = 0; i < nn; i++)
    if (mark[i] && i != c->node_idx) c->skip[i] = 1;
  free(mark);
  int64_t bh[2] = {q.B, H}, yd[3] = {q.layout ? q.B : q.T, q.layout ? q.T : q.B, H};
  c->fused = 1;
  *done = 1;
  VM_RETURN_IF_ERROR(onx_bind_named(c, q.last.h, tyh, 2, bh));
  VM_RETURN_IF_ERROR(onx_bind_named(c, q.last.c, tyc, 2, bh));
  if (q.concat >= 0)
    VM_RETURN_IF_ERROR(onx_bind_named(c, c->graph->node[q.concat]->output[0], ty, 3, yd));
  return VM_STATUS_OK;
}
