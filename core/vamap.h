/* Address -> record map over the 48-bit user address space at 2 MiB
 * granularity (every reservation gvmshim makes is 2 MiB aligned). Two
 * levels of tables, never freed, so a lookup is two dependent loads with
 * no lock, and a record pointer read from it stays readable (records are
 * type-stable: recycled, never returned to libc). */
#ifndef GVM_VAMAP_H
#define GVM_VAMAP_H

#include <stddef.h>
#include <stdint.h>

#define GVM_VAMAP_SHIFT 21

void *gvm_vamap_get(uintptr_t addr);

/* Sets [base, base+len) to val (NULL clears). Writers serialize among
 * themselves; returns -1 when a table cannot be allocated. */
int gvm_vamap_set(uintptr_t base, size_t len, void *val);

#endif
