/* A fixture for agent.imports_finds_circle: one header declaring what two
 * files define, each of which includes it (the old agent_internal.h). */
#ifndef COMMON_H
#define COMMON_H
int vma_one(void);
int vma_two(void);
#endif
