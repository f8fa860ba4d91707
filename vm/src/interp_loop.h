/* The dispatch loop, written once and included twice by interp.c: with
 * VMI_LOOP_NAME run_bytecode / VMI_LOOP_COMPILED 0 and with run_compiled /
 * 1. Operand and dispatch macros are defined in interp.c. No include guard
 * on purpose. */

/* Runs from the top frame (pushed by the caller, with its arguments) until
 * that frame returns; *out receives its owned result. On error every frame
 * this run pushed is popped and its registers released. */
static __attribute__((noinline)) vm_status_t VMI_LOOP_NAME(vm_machine_t *const m, vm_value_t *out) {
  const int compiled = VMI_LOOP_COMPILED;
  const vm_executable_t *const e = m->exec;
  const int64_t *const code = e->instr_data;
  const uint64_t *const offs = e->instr_offset;
  const vmi_crec_t *const recs = m->crecs;
  const vmi_func_t *const funcs = m->funcs;
  const uint32_t entry_depth = m->depth - 1;
  vm_value_t *regs = m->frames[entry_depth].regs;
  uint64_t pc = m->frames[entry_depth].func->start;
  uint32_t backjumps = 0;
  vm_status_t st = VM_STATUS_OK;
  const int64_t *ip = NULL;
  const vmi_crec_t *rp = NULL;
  uint32_t op;
  vm_value_t argbuf[VMI_SMALL_ARGS];
  (void)code;
  (void)offs;
  (void)recs;
  (void)e;
#if VMI_JUMPTABLE
  static const void *const disptab[] = {
      [VMI_OP_CALL_PACKED] = &&L_VMI_OP_CALL_PACKED,
      [VMI_OP_CALL_BYTECODE] = &&L_VMI_OP_CALL_BYTECODE,
      [VMI_OP_RET] = &&L_VMI_OP_RET,
      [VMI_OP_GOTO] = &&L_VMI_OP_GOTO,
      [VMI_OP_IF] = &&L_VMI_OP_IF,
  };
#endif

  for (;;) {
    VMI_FETCH();
    vmdispatch(op) {
      vmcase(VMI_OP_CALL_PACKED) {
        const uint32_t n = CALL_NARGS();
        const vmi_func_t *callee = CALL_CALLEE();
        vm_value_t *args = argbuf;
        vmi_regmark_t amark;
        if (VMI_UNLIKELY(n > VMI_SMALL_ARGS)) {
          args = regs_push(m, n, &amark);
          if (!args) {
            st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for %u call arguments", n);
            goto op_fail;
          }
        }
        for (uint32_t i = 0; i < n; i++) LOAD_ARG(&args[i], i);
        vm_value_t res;
        memset(&res, 0, sizeof(res)); /* none, in one store */
        if (VMI_LIKELY(m->instrument_fn == NULL))
          st = callee->fn(m, args, n, &res, callee->user);
        else
          st = call_packed_instrumented(m, callee, args, n, &res);
        if (VMI_UNLIKELY(n > VMI_SMALL_ARGS)) regs_pop(m, &amark);
        if (VMI_UNLIKELY(st != VM_STATUS_OK)) {
          vm_value_release(&res);
          goto op_fail;
        }
        store_result(regs, CALL_DST(), &res);
        pc++;
        vmbreak;
      }
      vmcase(VMI_OP_CALL_BYTECODE) {
        const uint32_t n = CALL_NARGS();
        const vmi_func_t *callee = CALL_CALLEE();
        if (VMI_UNLIKELY(n != callee->num_args)) {
          st = arity_error(callee, n);
          goto op_fail;
        }
        uint8_t instrumented = 0;
        if (VMI_UNLIKELY(m->instrument_fn != NULL)) {
          if (instrument_at(m, regs, pc, VM_INSTRUMENT_BEFORE) == VM_INSTRUMENT_SKIP) {
            const vm_value_t none = vm_value_none();
            store_result(regs, CALL_DST(), &none);
            pc++;
            vmbreak;
          }
          instrumented = 1;
        }
        m->frames[m->depth - 1].pc = pc;
        vm_value_t *nregs;
        st = frame_push(m, callee, CALL_DST(), instrumented, 0, &nregs);
        if (VMI_UNLIKELY(st != VM_STATUS_OK)) goto op_fail;
        for (uint32_t i = 0; i < n; i++) {
          LOAD_ARG(&nregs[i], i);
          vm_value_retain(&nregs[i]);
        }
        regs = nregs;
        pc = callee->start;
        vmbreak;
      }
      vmcase(VMI_OP_RET) {
        const uint32_t r = RET_REG();
        vm_value_t res = regs[r];
        regs[r] = vm_value_none();
        vmi_frame_t *fr = &m->frames[m->depth - 1];
        release_regs(regs, fr->func->num_regs);
        const uint32_t dst = fr->ret_dst;
        const uint8_t instrumented = fr->instrumented;
        const uint8_t entry = fr->entry;
        regs_pop(m, &fr->mark);
        m->depth--;
        if (entry) {
          *out = res;
          return VM_STATUS_OK;
        }
        fr = &m->frames[m->depth - 1];
        regs = fr->regs;
        pc = fr->pc;
        if (VMI_UNLIKELY(instrumented)) instrument_at(m, regs, pc, VM_INSTRUMENT_AFTER);
        store_result(regs, dst, &res);
        pc++;
        vmbreak;
      }
      vmcase(VMI_OP_GOTO) {
        if (GOTO_BACKWARD()) BACKJUMP_CHECK();
        pc = GOTO_TARGET();
        vmbreak;
      }
      vmcase(VMI_OP_IF) {
        const vm_value_t *c = &regs[IF_COND()];
        if (VMI_UNLIKELY(c->kind != VM_VAL_INT && c->kind != VM_VAL_BOOL)) {
          st = if_cond_error(c);
          goto op_fail;
        }
        if (c->u.i != 0) {
          pc++;
        } else {
          if (IF_BACKWARD()) BACKJUMP_CHECK();
          pc = IF_TARGET();
        }
        vmbreak;
      }
#if !VMI_JUMPTABLE
      default:
        /* Verified code has only the four opcodes, and the function table
         * only two kinds. */
        assert(0 && "verified code has only known opcodes");
        st = vm_status_make(VM_INTERNAL, "unknown operation %u at pc %llu", op,
                            (unsigned long long)pc);
        goto op_fail;
#endif
    }
  }

op_fail:
  st = annotate_at(m, st, pc);
  /* Unwind every frame of this run, the entry frame included. */
  while (m->depth > entry_depth) {
    vmi_frame_t *fr = &m->frames[m->depth - 1];
    release_regs(fr->regs, fr->func->num_regs);
    regs_pop(m, &fr->mark);
    m->depth--;
  }
  return st;
}
