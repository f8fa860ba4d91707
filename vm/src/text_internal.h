/* Rules of the text form (.vmasm) shared by the disassembler and the
 * assembler, so that what one prints the other reads back. docs/vmasm.md
 * describes the syntax. */
#ifndef VMI_TEXT_INTERNAL_H
#define VMI_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Tensor data of at most this many bytes is printed on the .const line;
 * longer data goes in a block, this many bytes per line. */
#define VMI_TEXT_HEX_INLINE 32
#define VMI_TEXT_HEX_PER_LINE 32

/* The bit pattern printed as "nan" / "-nan"; any other NaN is printed as
 * "bits 0x..." so that every double round-trips bit for bit. */
#define VMI_TEXT_NAN_BITS UINT64_C(0x7ff8000000000000)
#define VMI_TEXT_NEG_NAN_BITS UINT64_C(0xfff8000000000000)

static inline int vmi_text_ident_start(int c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
static inline int vmi_text_ident_char(int c) {
  return vmi_text_ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}

/* True if name can be written without quotes: [A-Za-z_][A-Za-z0-9_.]*.
 * Everything else is written as a quoted, escaped string. */
static inline int vmi_text_is_bare(const char *s, size_t n) {
  if (n == 0 || !vmi_text_ident_start((unsigned char)s[0])) return 0;
  for (size_t i = 1; i < n; i++)
    if (!vmi_text_ident_char((unsigned char)s[i])) return 0;
  return 1;
}

#endif
