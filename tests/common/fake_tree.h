/* Files under a scratch directory, for fake sysfs trees (the device-state
 * tests). */
#ifndef VMRPC_TEST_FAKE_TREE_H
#define VMRPC_TEST_FAKE_TREE_H

/* Writes root/rel with text, creating root and the directories on the way; fails
 * the test (cmocka) when it cannot. */
void fake_tree_put(const char *root, const char *rel, const char *text);

#endif
