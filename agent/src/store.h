/* The executable store (store.c): verified executables shared by sessions
 * and VMs, kept in memory and, capped, on disk under the cache folder. */
#ifndef VMA_STORE_H
#define VMA_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vmrpc/status.h"

typedef struct vma_store vma_store_t;

/* A loaded, verified executable shared by sessions and VMs. */
typedef struct vma_exec_entry {
  uint8_t hash[VM_SHA256_BYTES];
  uint64_t size; /* file bytes */
  vm_executable_t *exec;
  uint32_t refs; /* under the store lock */
  struct vma_exec_entry *next;
} vma_exec_entry_t;

/* Opens the store under dir/executables (dir NULL: memory only). Scans the
 * directory to build the LRU list. */
vm_status_t vma_store_open(const char *dir, uint64_t max_bytes, uint64_t max_exec_bytes,
                           vma_store_t **out_store);
void vma_store_close(vma_store_t *s);
/* A hit in memory, or on disk (hash verified, loaded): *out_entry retained.
 * A miss: *out_entry NULL and OK. */
vm_status_t vma_store_lookup(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES], uint64_t size,
                             vma_exec_entry_t **out_entry);
/* Loads data (whose SHA-256 the caller verified to be hash) through the
 * verifier and keeps it: memory map and, capped, on disk. Loader errors
 * pass through. *out_entry retained. */
vm_status_t vma_store_insert(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES],
                             const uint8_t *data, size_t size, vma_exec_entry_t **out_entry);
void vma_store_retain(vma_store_t *s, vma_exec_entry_t *e);
void vma_store_release(vma_store_t *s, vma_exec_entry_t *e);
/* Disk bytes and entries, plus loaded entries (tests check executables
 * leave memory with their last user). */
void vma_store_stats(vma_store_t *s, uint64_t *out_disk_bytes, uint32_t *out_disk_entries,
                     uint32_t *out_loaded);

#endif /* VMA_STORE_H */
